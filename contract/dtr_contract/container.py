"""The trainer's container as the TFJob describes it."""

from __future__ import annotations

# MultiWorkerMirroredStrategy's gRPC port: the TFJob's containerPort, which the training-operator puts
# in TF_CONFIG and its Services (Dockerfile.trainer EXPOSEs it; tests/unit/contract/test_contract_literals.py).
PORT = 2222
# Kubernetes' default terminationMessagePath, set explicitly by the operator and the trainer's default:
# the chief writes its summary there and the operator reads it from the pod's status.
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
