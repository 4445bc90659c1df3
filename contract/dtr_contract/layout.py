"""The run's volume (its PVC): where it is mounted in the trainer's container and where things live on it.

    /mnt/dtr/
      data/                           --data-dir; data/keras/ caches the Keras downloads as published
                                      (mnist.npz, fashion_mnist/*.gz), data/cache/sha256/<digest>/<file> the
                                      --dataset-url downloads
      models/<modelName>/<version>/   --export-dir is models/<modelName>; each version a SavedModel
      models/.dtr-export/<modelName>/claim-<version>   who owns each version number
      models/.dtr-export/<modelName>/owner             which run owns the model name (who may publish)

    s3://bucket/<base>/<version>/     --export-dir s3://bucket/<base>: each version a SavedModel and its
                                      dtr-manifest.json, written last (dtr_contract.published)
    s3://bucket/<base>/.dtr-export/claim-<version>   who owns each version number there
    s3://bucket/<base>/.dtr-export/owner             which run owns the base (who may publish there)
      backup/<run>/<uid>/             --backup-dir (BackupAndRestore)
      logs/<run>/                     --log-dir and --tensorboard-dir; worker-<i>.log per worker,
                                      history.jsonl: the chief's line per finished epoch (history.py)

The operator passes these paths as the trainer's flags; the trainer extends the directories it is
given, so a local directory can stand in for the volume (`dtr run`, the tests). docs/models.md tells
a user what each is for.
"""

from __future__ import annotations

import posixpath

MOUNT_PATH = "/mnt/dtr"
# Where a run's code from a ConfigMap (spec.training.code.configMap) is mounted, read-only, in every worker:
# the trainer gets --code <CODE_DIR>/<key>. Outside the volume and the image's own /opt/dtr.
CODE_DIR = "/opt/dtr-code"

_DATA, _MODELS, _BACKUP, _LOGS = "data", "models", "backup", "logs"
_KERAS_CACHE = "keras"
_URL_CACHE = ("cache", "sha256")  # content-addressed: a file's path names its digest
_BOOKKEEPING = ".dtr-export"  # beside the model dirs, on the same volume: renames stay atomic
_CLAIM_PREFIX = "claim-"
_OWNER = "owner"
_HISTORY = "history.jsonl"


def code_file(key: str) -> str:
    """The path --code names for a ConfigMap's key."""
    return posixpath.join(CODE_DIR, key)


def data_dir(mount: str = MOUNT_PATH) -> str:
    return posixpath.join(mount, _DATA)


def keras_cache_dir(data_dir: str) -> str:
    """Where the Keras datasets are cached once downloaded, as published: <data-dir>/keras/mnist.npz, ..."""
    return posixpath.join(data_dir, _KERAS_CACHE)


def dataset_cache_file(data_dir: str, sha256: str, file_name: str) -> str:
    """A dataset downloaded from a URL: <data-dir>/cache/sha256/<digest>/<file name from the URL>."""
    return posixpath.join(data_dir, *_URL_CACHE, sha256, file_name)


def export_dir(model_name: str, mount: str = MOUNT_PATH) -> str:
    """A model's base directory, which holds its numbered versions (what a model server watches)."""
    return posixpath.join(mount, _MODELS, model_name)


def mount_of(export_dir: str) -> str | None:
    """The inverse of export_dir: the volume's mount for <mount>/models/<modelName>, else None."""
    parent = posixpath.dirname(posixpath.normpath(export_dir))
    return posixpath.dirname(parent) if posixpath.basename(parent) == _MODELS else None


def version_dir(export_dir: str, version: int) -> str:
    return posixpath.join(export_dir, str(version))


def bookkeeping_dir(export_dir: str) -> str:
    """The trainer's claims and staging dirs for <export-dir>: <parent>/.dtr-export/<name>."""
    parent, name = posixpath.split(posixpath.normpath(export_dir))
    return posixpath.join(parent, _BOOKKEEPING, name)


def claim_file(export_dir: str, version: int) -> str:
    return posixpath.join(bookkeeping_dir(export_dir), f"{_CLAIM_PREFIX}{version}")


def owner_file(export_dir: str) -> str:
    """Which run owns the model name of <export-dir>, and which others it lets publish there (the trainer's)."""
    return posixpath.join(bookkeeping_dir(export_dir), _OWNER)


def bucket_bookkeeping_key(base_key: str) -> str:
    """In a bucket (--export-dir s3://bucket/<base>), the claims and staging objects live inside the base:
    <base>/.dtr-export/. A model server takes only numbered names there; a bucket has no rename to keep atomic,
    so nothing needs a sibling, and a base at the bucket's root works too (docs/models.md#versions-in-a-bucket)."""
    return posixpath.join(base_key, _BOOKKEEPING) if base_key else _BOOKKEEPING


def bucket_claim_key(base_key: str, version: int) -> str:
    return posixpath.join(bucket_bookkeeping_key(base_key), f"{_CLAIM_PREFIX}{version}")


def bucket_owner_key(base_key: str) -> str:
    return posixpath.join(bucket_bookkeeping_key(base_key), _OWNER)


def claimed_version(name: str) -> int | None:
    """N for a claim file's name `claim-N`; None for any other name."""
    number = name[len(_CLAIM_PREFIX):] if name.startswith(_CLAIM_PREFIX) else ""
    return int(number) if number.isdigit() else None


def backup_dir(run_name: str, run_uid: str | None = None, mount: str = MOUNT_PATH) -> str:
    """Per run object (its uid), so a run re-created under the same name on a kept volume starts afresh;
    per name without a uid (dtr run, dtr render)."""
    base = posixpath.join(mount, _BACKUP, run_name)
    return posixpath.join(base, run_uid) if run_uid else base


def logs_dir(run_name: str, mount: str = MOUNT_PATH) -> str:
    return posixpath.join(mount, _LOGS, run_name)


def worker_log_file(log_dir: str, task: str) -> str:
    """Each worker's own log, task as TF_CONFIG names it: <log-dir>/worker-0.log, ..."""
    return posixpath.join(log_dir, f"{task}.log")


def history_file(log_dir: str) -> str:
    """The chief's per-epoch history (dtr_contract.history): <log-dir>/history.jsonl."""
    return posixpath.join(log_dir, _HISTORY)


def created_claim(run_name: str) -> str:
    """The PVC the operator creates for a run that names none (spec.storage.claimName)."""
    return f"{run_name}-data"


def in_volume(path: str, mount: str = MOUNT_PATH) -> str | None:
    """path relative to the volume's root (`models/m/1`), or None when it is not under the mount."""
    prefix = mount.rstrip("/") + "/"
    return path[len(prefix):] if path.startswith(prefix) else None


def model_base(model_path: str, mount: str = MOUNT_PATH) -> str | None:
    """The inverse of version_dir inside the volume: for <mount>/<base>/<N>, <base> relative to the volume
    (`models/<modelName>`); None when model_path is no numbered version under the mount."""
    base, _, version = model_path.rstrip("/").rpartition("/")
    relative = in_volume(base, mount)
    return relative if relative and version.isdigit() else None
