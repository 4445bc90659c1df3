"""The trainer's command-line flags that the operator passes (builders.trainer_args -> dtr_trainer.main).

The trainer's own tuning flags (bench/trainer) are not here: the operator never passes them.
"""

from __future__ import annotations

MODEL = "--model"
DATASET = "--dataset"
DATASET_URL = "--dataset-url"  # instead of DATASET: an https:// file, downloaded once into the data cache
DATASET_SHA256 = "--dataset-sha256"  # required with DATASET_URL: the file's SHA-256, 64 hex digits
# With DATASET_URL: the download's caps (dtr_contract.disk): a larger file is refused, a slower one given up, for good.
DATASET_MAX_BYTES = "--dataset-max-bytes"
DATASET_TIMEOUT_SECONDS = "--dataset-timeout-seconds"
EPOCHS = "--epochs"
BATCH_SIZE_PER_WORKER = "--batch-size-per-worker"
STEPS_PER_EPOCH = "--steps-per-epoch"
LEARNING_RATE = "--learning-rate"
SEED = "--seed"
DATA_DIR = "--data-dir"
EXPORT_DIR = "--export-dir"
BACKUP_DIR = "--backup-dir"
# With BACKUP_DIR: the backup kept in a bucket too (s3://bucket/prefix); BACKUP_DIR is then each pod's own copy.
BACKUP_URI = "--backup-uri"
# With BACKUP_DIR: a worker told to stop (SIGTERM) first saves mid-epoch with its peers (dtr_trainer.step_backup).
BACKUP_ON_SIGTERM = "--backup-on-sigterm"
# With BACKUP_DIR: N > 0 also saves every N steps inside an epoch (a worker lost without notice redoes fewer).
BACKUP_EVERY_STEPS = "--backup-every-steps"
# The run names (of the run's namespace) besides its own that may publish versions of its model name when this run
# owns the name (spec.export.allowedPublishers), comma-separated; none: only runs of its own name.
ALLOWED_PUBLISHERS = "--allowed-publishers"
TENSORBOARD_DIR = "--tensorboard-dir"
LOG_DIR = "--log-dir"
TERMINATION_MESSAGE_PATH = "--termination-message-path"
# Your own model (docs/own-model.md): a Python file, or a module importable in the image; never both.
CODE = "--code"
CODE_MODULE = "--code-module"
# With CODE: the file's SHA-256 as the operator recorded it in status.code before it created the TFJob. The workers
# mount the ConfigMap by name, so a ConfigMap replaced since would otherwise run under the recorded digest; the
# trainer refuses any other bytes (exits.CODE_CHANGED) before it runs a line of them.
CODE_SHA256 = "--code-sha256"
METRIC = "--metric"  # the evaluation metric the run reports as its headline (summary `metric`)
# spec.training.params (dtr_contract.params): the run's own hyperparameters, one JSON object; the code reads ctx.params.
PARAMS = "--params"
# spec.training.validation.everyEpochs: the eval split evaluated every N epochs during fit (val_* figures); 0: only
# once, after the last epoch.
VALIDATE_EVERY = "--validate-every"
