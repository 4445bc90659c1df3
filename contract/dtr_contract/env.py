"""The environment the operator gives the trainer's container: who the run is, for the lineage file
beside each model (docs/models.md). A trainer started by hand has none of them (its lineage says null)."""

from __future__ import annotations

RUN_NAME = "DTR_RUN_NAME"
RUN_UID = "DTR_RUN_UID"  # only for runs read from the API (dtr render / dtr run have no uid)
RUN_NAMESPACE = "DTR_RUN_NAMESPACE"
RUN_SWEEP = "DTR_RUN_SWEEP"  # a sweep's trial: the sweep's name (its MLflow experiment; docs/tracking.md)
RUN_TRIAL = "DTR_RUN_TRIAL"  # and the trial's index
RUN_SPEC = "DTR_RUN_SPEC"  # the DistTrainingRun spec with defaults applied, compact JSON
TRAINER_IMAGE = "DTR_TRAINER_IMAGE"  # the image the container runs
# An object store (spec.objectStore; docs/object-storage.md): what TensorFlow's s3:// (tensorflow-io's plugin) and the
# trainer's own client (objectstore.py) read. The endpoint keeps its scheme: without one the plugin speaks HTTPS.
S3_ENDPOINT = "S3_ENDPOINT"
AWS_REGION = "AWS_REGION"
AWS_ACCESS_KEY_ID = "AWS_ACCESS_KEY_ID"  # from the run's Secret (secretKeyRef), of the same key: never a literal
AWS_SECRET_ACCESS_KEY = "AWS_SECRET_ACCESS_KEY"  # likewise
S3_CA_FILE = "S3_CA_FILE"  # the CA's PEM, mounted from spec.objectStore.caConfigMap; unset: the image's CAs
# Bounded retries: the plugin's default mode ("legacy") ignores AWS_MAX_ATTEMPTS and took 102 s to fail on a refused
# connection (bench/s3/results.md); "standard" with a few attempts fails within seconds, and the trainer's preflight
# has already checked that the endpoint answers.
AWS_RETRY_MODE, RETRY_MODE = "AWS_RETRY_MODE", "standard"
AWS_MAX_ATTEMPTS, MAX_ATTEMPTS = "AWS_MAX_ATTEMPTS", 3
AWS_EC2_METADATA_DISABLED = "AWS_EC2_METADATA_DISABLED"  # "true": no probe of a cloud's metadata service for keys
OBJECT_STORE = (S3_ENDPOINT, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, S3_CA_FILE, AWS_RETRY_MODE,
                AWS_MAX_ATTEMPTS, AWS_EC2_METADATA_DISABLED)  # fmt: skip
# The MLflow tracking server the chief logs each run to (dtr_trainer.tracking; docs/tracking.md), set when the
# operator's admin names one (--mlflow-tracking-uri); MLflow's own name for it, so code using mlflow finds it too.
MLFLOW_TRACKING_URI = "MLFLOW_TRACKING_URI"
# Every variable the trainer reads that the operator sets.
ALL = (RUN_NAME, RUN_UID, RUN_NAMESPACE, RUN_SWEEP, RUN_TRIAL, RUN_SPEC, TRAINER_IMAGE, *OBJECT_STORE,
       MLFLOW_TRACKING_URI)
