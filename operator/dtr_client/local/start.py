"""What `dtr run` does on this machine before it starts the workers: the user's data onto the run's volume
(--data), and whether the run resumes a backup there (backups.py); whether its network can reach what it names."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

from dtr_contract import flags, layout

from dtr_operator import settings
from dtr_operator.spec import RunSpec

from . import backups
from .source import RunError


def check_network(run: RunSpec, loopback_only: bool) -> None:
    """RunError for a run naming an object store when its workers have a loopback of their own."""
    if loopback_only and run.object_store is not None:
        raise RunError(f"{run.name} reads or writes the object store {run.object_store.endpoint} (spec.objectStore), "
                       "which workers on a loopback of their own cannot reach: dtr run --host-network "
                       "(docs/local.md#network)")  # fmt: skip


def tracking_uri(environ: Mapping[str, str], loopback_only: bool) -> tuple[str, str | None]:
    """The MLflow server the workers log to (docs/tracking.md): the operator's --mlflow-tracking-uri, which dtr run
    takes from its environment twin (DTR_MLFLOW_TRACKING_URI), checked as the operator checks it (RunError); none
    when the workers have a loopback of their own, where no server answers, and the line that says so."""
    try:
        uri = settings.tracking_uri(environ.get(settings.TRACKING_ENV, ""), settings.TRACKING_ENV)
    except settings.SettingsError as err:
        raise RunError(str(err)) from None
    if uri and loopback_only:
        return "", (f"[dtr] {settings.TRACKING_ENV}: not given to the workers, which have a loopback of their own: "
                    "dtr run --host-network logs to MLflow (docs/tracking.md)")
    return uri, None


def put_data(run: RunSpec, claim_dir: str, local: str) -> str:
    """`dtr run --data PATH`: the file or directory PATH copied into the volume's data directory as
    data/<its name>, as `dtr data put CLAIM PATH` copies it on a cluster (a file of the same name replaced); the
    line that says where, and what ctx.dataset names it."""
    source = Path(local)
    if not run.has_volume:
        raise RunError(f"--data {local}: run {run.name} has no volume (spec.storage.volume false) to put it on")
    if source.is_symlink() or not (source.is_file() or source.is_dir()):
        raise RunError(f"--data {local}: not a file or a directory")
    data = Path(claim_dir) / (layout.in_volume(layout.data_dir()) or "data")
    target = data / source.resolve().name
    data.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, target, dirs_exist_ok=True)
    else:
        shutil.copyfile(source, target)
    return (f"[dtr] data {local} -> {target} (your load_data reads it as os.path.join(ctx.data_dir, "
            f"{target.name!r}); {flags.DATASET} {target.name} passes the name as ctx.dataset)")


def before_start(run: RunSpec, claim_dir: str, run_dir: Path, status_file: str, code_sha256: str | None,
                 backup: str | None, data: str | None) -> list[str]:  # fmt: skip
    """The data put (--data), the backup settled (backup: backups.RESUME, FRESH or None); the lines to say."""
    lines = [put_data(run, claim_dir, data)] if data is not None else []
    where = backups.backup_path(run, claim_dir)
    note = backups.settle(run, code_sha256, where, run_dir, status_file, backup)
    return lines + ([note] if note is not None else [])
