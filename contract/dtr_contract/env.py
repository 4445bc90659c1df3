"""The environment the operator gives the trainer's container: who the run is, for the lineage file
beside each model (docs/models.md). A trainer started by hand has none of them (its lineage says null)."""

from __future__ import annotations

RUN_NAME = "DTR_RUN_NAME"
RUN_UID = "DTR_RUN_UID"  # only for runs read from the API (dtr render / dtr run have no uid)
RUN_NAMESPACE = "DTR_RUN_NAMESPACE"
RUN_SPEC = "DTR_RUN_SPEC"  # the DistTrainingRun spec with defaults applied, compact JSON
TRAINER_IMAGE = "DTR_TRAINER_IMAGE"  # the image the container runs
# Every variable the trainer reads that the operator sets.
ALL = (RUN_NAME, RUN_UID, RUN_NAMESPACE, RUN_SPEC, TRAINER_IMAGE)
