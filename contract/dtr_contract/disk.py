"""What the trainer may write on the run's volume besides the model and its backups: each cap's one home.

A claim's size holds only on storage classes that enforce it (docs/operator.md#disk-what-holds-a-run-to-its-size);
on host-directory classes (local-path, the dev cluster's shared-path) the volume is the node's disk. So what a
run makes the trainer write that its author does not write with code of their own is bounded here:

- a --dataset-url download: at most --dataset-max-bytes (spec.training.datasetSource.maxSize), within
  --dataset-timeout-seconds (timeoutSeconds) for all its tries;
- each worker's log file (<log-dir>/worker-<i>.log): WORKER_LOG_MAX_BYTES of lines, then only the epoch-end lines
  and container starts, at most WORKER_LOG_RESERVE_BYTES more (the file is a convenience: the pod log has it all);
- the chief's history.jsonl: history.MAX_FILE, what a reader takes of it.

The operator passes the download's two from the run's spec; the trainer's defaults are the API's.
"""

from __future__ import annotations

GI = 1 << 30
DATASET_MAX_BYTES = 1 * GI  # spec.training.datasetSource.maxSize's default (1Gi: the default volume's size)
DATASET_MAX_BYTES_LIMIT = 1024 * GI  # the API's bound on maxSize (1Ti); the operator's --max-storage bounds it lower
DATASET_TIMEOUT_SECONDS = 3600  # spec.training.datasetSource.timeoutSeconds's default: every try, and the pauses
DATASET_TIMEOUT_LIMITS = (60, 86_400)  # timeoutSeconds's bounds: a minute, a day

WORKER_LOG_MAX_BYTES = 16 << 20  # 16 MiB of any lines per worker log file, every container of the worker together
# Past the cap, only the lines readers of the file count on, up to this much more: the trainer writes at most 1000
# epoch-end lines of ~200 bytes per attempt (spec.training.epochs <= 1000), so a few attempts' worth.
WORKER_LOG_RESERVE_BYTES = 1 << 20
