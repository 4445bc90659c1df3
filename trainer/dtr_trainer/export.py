"""Model export (every worker saves, only the chief's copy stays) and the run summary."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterable
from pathlib import Path

from dtr_trainer.errors import ExportError

VERSION_RECORD = "export-version"  # in --backup-dir: the version this run exports to
STAGING_PREFIX = ".staging-"  # chief's partial export, renamed into place when complete


# ---------------------------------------------------------------- versions (pure + small I/O)


def next_version(names: Iterable[str]) -> int:
    """1 + the largest integer directory name (1 when there is none)."""
    versions = [int(n) for n in names if n.isdigit()]
    return max(versions, default=0) + 1


def _dirs(path: Path) -> list:
    return [p.name for p in path.iterdir() if p.is_dir()] if path.is_dir() else []


def read_recorded_version(backup_dir: str | None) -> int | None:
    if not backup_dir:
        return None
    try:
        text = (Path(backup_dir) / VERSION_RECORD).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) > 0 else None


def _write_atomic(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    partial.write_text(text)
    os.replace(partial, path)


def choose_version(export_dir: str, backup_dir: str | None) -> int:
    """Chief only. A restarted chief reuses the version its backup dir recorded, so a
    restart never exports twice; a new run takes the next free integer."""
    recorded = read_recorded_version(backup_dir)
    if recorded is not None:
        return recorded
    try:
        Path(export_dir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExportError(f"cannot create --export-dir {export_dir}: {exc.strerror}") from None
    version = next_version(_dirs(Path(export_dir)))
    if backup_dir:
        Path(backup_dir).mkdir(parents=True, exist_ok=True)
        _write_atomic(Path(backup_dir) / VERSION_RECORD, f"{version}\n")
    return version


def forget_version(backup_dir: str | None) -> None:
    """After a successful run: a re-created run with the same name exports a new version."""
    if backup_dir:
        (Path(backup_dir) / VERSION_RECORD).unlink(missing_ok=True)


def remove_stale_staging(export_dir: str) -> None:
    """A chief killed mid-save leaves a staging dir; it is never a servable version."""
    for name in _dirs(Path(export_dir)):
        if name.startswith(STAGING_PREFIX):
            shutil.rmtree(Path(export_dir) / name, ignore_errors=True)


# ---------------------------------------------------------------- saving


def _serving_function(model):
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([None, 28, 28, 1], tf.float32, name="images")])
    def serve(images):
        return {"probabilities": model(images, training=False)}

    return serve


def _save(model, path: str) -> None:
    model.save(
        path,
        save_format="tf",
        include_optimizer=False,
        signatures={"serving_default": _serving_function(model)},
    )


def _publish(staging: Path, final: Path) -> None:
    """Rename the complete export into place; a previous copy of the same version (a chief
    restarted after exporting) is replaced, so there is still exactly one."""
    if final.exists():
        old = final.with_name(f"{STAGING_PREFIX}old-{uuid.uuid4().hex}")
        os.replace(final, old)
        shutil.rmtree(old, ignore_errors=True)
    os.replace(staging, final)


def save_everywhere(model, export_dir: str, version: int | None, is_chief: bool) -> Path | None:
    """Every worker must call this: saving runs collective ops (ON_READ variables are
    aggregated), so a chief saving alone would wait forever. Non-chief workers save to a
    local temporary dir (never the volume) and delete it."""
    if not is_chief:
        scratch = tempfile.mkdtemp(prefix="dtr-worker-export-")
        try:
            _save(model, os.path.join(scratch, "model"))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return None
    assert version is not None
    final = Path(export_dir) / str(version)
    staging = Path(export_dir) / f"{STAGING_PREFIX}{version}-{uuid.uuid4().hex}"
    try:
        _save(model, str(staging))
        _publish(staging, final)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise ExportError(f"cannot write the model to {final}: {exc.strerror or exc}") from None
    return final


# ---------------------------------------------------------------- summary


def summary_json(loss: float, accuracy: float, epochs: int, examples_per_second: float,
                 model_path: str, model_version: int) -> str:
    return json.dumps(
        {
            "loss": round(float(loss), 6),
            "accuracy": round(float(accuracy), 6),
            "epochs": int(epochs),
            "examplesPerSecond": round(float(examples_per_second), 1),
            "modelPath": model_path,
            "modelVersion": int(model_version),
        },
        separators=(",", ":"),
    )


def report_summary(line: str, termination_path: str | None) -> None:
    """The JSON line on stdout and in the termination message (Kubernetes reads it from there)."""
    print(line, flush=True)
    if not termination_path:
        return
    try:
        with open(termination_path, "w") as f:
            f.write(line)
    except OSError as exc:
        print(f"dtr_trainer: warning: cannot write termination message {termination_path}: {exc.strerror}",
              file=sys.stderr, flush=True)
