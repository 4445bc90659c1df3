"""The trainer's command-line flags that the operator passes (builders.trainer_args -> dtr_trainer.main).

The trainer's own tuning flags (bench/trainer) are not here: the operator never passes them.
"""

from __future__ import annotations

MODEL = "--model"
DATASET = "--dataset"
EPOCHS = "--epochs"
BATCH_SIZE_PER_WORKER = "--batch-size-per-worker"
STEPS_PER_EPOCH = "--steps-per-epoch"
LEARNING_RATE = "--learning-rate"
SEED = "--seed"
DATA_DIR = "--data-dir"
EXPORT_DIR = "--export-dir"
BACKUP_DIR = "--backup-dir"
TENSORBOARD_DIR = "--tensorboard-dir"
LOG_DIR = "--log-dir"
TERMINATION_MESSAGE_PATH = "--termination-message-path"
# Your own model (docs/own-model.md): a Python file, or a module importable in the image; never both.
CODE = "--code"
CODE_MODULE = "--code-module"
METRIC = "--metric"  # the evaluation metric the run reports as its headline (summary `metric`)
