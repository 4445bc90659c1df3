"""What the operator and the trainer agree on, written once; both sides import it (docs/architecture.md).

The operator (Python 3.11) builds the trainer's pod and reads what the trainer leaves; the trainer
(Python 3.9, TensorFlow) parses that command line and writes those lines and files. Each module here is
one part of that agreement, pure and standard-library only:

- `flags`      the trainer's command-line flags the operator passes
- `env`        the environment variables the operator sets and the trainer reads
- `container`  the gRPC port and the termination-message path of the trainer's container
- `layout`     the run's volume: its mount path and where models, claims, backups, logs and data live
- `progress`   the epoch-end log line: its writer and its parser
- `summary`    the chief's one-line JSON summary: its writer and its parser
- `history`    the chief's per-epoch history file: its line writer and its reader
- `exits`      the exit-code classes the restart policy and the status act on
- `params`     a run's own hyperparameters (spec.training.params): their bounds, grammar and flag value
"""
