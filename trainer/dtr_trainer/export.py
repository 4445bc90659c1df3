"""Model export: version claims on the volume, every-worker save with one surviving copy, the summary.

Several runs may export to one <export-dir> at once (two runs sharing a claim and a modelName), so
versions are claimed on the volume (docs/models.md). <export-dir> (a model server's base path) only
ever holds complete versions; the bookkeeping lives beside it (dtr_contract.layout.bookkeeping_dir):

- `claim-N`: the chief claims version N by creating this file with O_CREAT|O_EXCL, which exactly one
  process can do (on NFS too, v3 and later); on EEXIST it tries N+1. It names its owner: a random
  token (kept in --backup-dir, so a restarted chief of the same run finds it) and the run.
- `staging-N-<token>-<attempt>/`: the chief's export while it is written; renamed to
  <export-dir>/N/ (same volume: one atomic rename) when complete. Only the claim's holder writes N/.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from dtr_contract import flags, layout

from dtr_trainer import volume
from dtr_trainer.errors import ExportError, VolumeError
from dtr_trainer.lineage import RunIdentity, utc_now

VERSION_RECORD = "export-version"  # in --backup-dir: the claim this run exports to
# In --backup-dir once the run has exported: its summary line. A container of the run started again after that
# (a kubelet that lost the exit code when containerd restarted reports it as 255, and OnFailure restarts it)
# exits at once instead of training a second time into a second version.
EXPORTED_RECORD = "exported"
STAGING_PREFIX = "staging-"  # a chief's partial export, renamed into place when complete
LEGACY_STAGING_PREFIX = ".staging-"  # inside <export-dir>, left by trainers from before claims
# A staging dir of another claim is removed only when nothing touched it for this long: a live save
# takes seconds to minutes, so such a dir was left by a chief that died and never came back.
STALE_STAGING_SECONDS = 24 * 3600
MAX_CLAIM_ATTEMPTS = 1000


@dataclass(frozen=True)
class Claim:
    version: int
    token: str  # random, per run: a restarted chief of the same run finds it in --backup-dir

    @property
    def staging_prefix(self) -> str:
        return f"{STAGING_PREFIX}{self.version}-{self.token}-"


def bookkeeping_dir(export_dir: str) -> Path:
    """Claims and staging dirs of <export-dir>: a sibling on the same volume (renames stay atomic)."""
    return Path(layout.bookkeeping_dir(export_dir))


# ---------------------------------------------------------------- versions (pure)


def _claimed_version(name: str) -> int | None:
    """N for `N` (a published version) or `claim-N`; None for anything else."""
    return int(name) if name.isdigit() else layout.claimed_version(name)


def next_version(names: Iterable[str]) -> int:
    """1 + the largest version published (`N`) or claimed (`claim-N`); 1 when there is none."""
    versions = [v for v in map(_claimed_version, names) if v is not None]
    return max(versions, default=0) + 1


def is_stale(age_seconds: float, max_age: float = STALE_STAGING_SECONDS) -> bool:
    return age_seconds > max_age


def parse_record(text: str) -> tuple[Claim | None, str | None]:
    """The --backup-dir record -> (claim, run uid). A bare `N` (written before claims existed) has
    no token: its version is reused only if nobody else claimed it since."""
    text = text.strip()
    if text.isdigit() and int(text) > 0:
        return Claim(int(text), ""), None
    try:
        record = json.loads(text)
        claim = Claim(int(record["version"]), str(record["token"]))
    except (ValueError, KeyError, TypeError):
        return None, None
    return (claim, record.get("runUid")) if claim.version > 0 and claim.token else (None, None)


# ---------------------------------------------------------------- versions (volume)


def _names(path: Path) -> list:
    return [p.name for p in path.iterdir()] if path.is_dir() else []


def _dirs(path: Path) -> list:
    return [p.name for p in path.iterdir() if p.is_dir()] if path.is_dir() else []


def _write_atomic(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    partial.write_text(text)
    os.replace(partial, path)


def _read_record(backup_dir: str | None) -> tuple[Claim | None, str | None]:
    if not backup_dir:
        return None, None
    try:
        return parse_record((Path(backup_dir) / VERSION_RECORD).read_text())
    except OSError:
        return None, None


def claim_file(export_dir: str, version: int) -> Path:
    return Path(layout.claim_file(export_dir, version))


def claim_token(export_dir: str, version: int) -> str | None:
    """The token in claim-<version>, None when absent or unreadable (then it is nobody's we know)."""
    try:
        return str(json.loads(claim_file(export_dir, version).read_text())["token"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _try_claim(export_dir: str, version: int, token: str, run: RunIdentity) -> bool:
    """Create claim-<version> exclusively; False if it exists. The file is written in one write
    right after its creation; a reader that finds it empty treats it as someone else's."""
    body = json.dumps({"version": version, "token": token, "run": run.as_json(), "claimedAt": utc_now(),
                       "host": socket.gethostname(), "pid": os.getpid()}) + "\n"
    try:
        fd = os.open(claim_file(export_dir, version), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    try:
        os.write(fd, body.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def _claim_next(export_dir: str, token: str, run: RunIdentity) -> Claim:
    version = next_version(_names(Path(export_dir)) + _names(bookkeeping_dir(export_dir)))
    for _ in range(MAX_CLAIM_ATTEMPTS):
        # A number taken by a version published without a claim (a trainer from before claims) is skipped.
        if _try_claim(export_dir, version, token, run) and not Path(layout.version_dir(export_dir, version)).exists():
            return Claim(version, token)
        version += 1
    raise ExportError(f"cannot claim a version for {flags.EXPORT_DIR} {export_dir}: "
                      f"{MAX_CLAIM_ATTEMPTS} numbers from {version - MAX_CLAIM_ATTEMPTS} on are taken")


def _reclaim(export_dir: str, recorded: Claim, run: RunIdentity) -> Claim | None:
    """A restarted chief's recorded claim, if it is still this run's: its claim file holds the
    token, or (a record from before claim files) the number is free to claim now."""
    owner = claim_token(export_dir, recorded.version)
    if owner is not None:
        return recorded if owner == recorded.token else None
    token = recorded.token or secrets.token_hex(8)
    if _try_claim(export_dir, recorded.version, token, run):
        return Claim(recorded.version, token)
    return None


def _same_run(recorded_uid: str | None, run: RunIdentity) -> bool:
    """A record left by a deleted run of the same name (same backup dir, another uid) is not ours."""
    return recorded_uid is None or run.uid is None or recorded_uid == run.uid


def claim_version(export_dir: str, backup_dir: str | None, run: RunIdentity) -> Claim:
    """Chief only, before training. A restarted chief reuses the claim recorded in its backup dir
    (a restart never exports twice); otherwise the lowest free number above every published or
    claimed version is claimed and recorded."""
    recorded, recorded_uid = _read_record(backup_dir)
    try:
        Path(export_dir).mkdir(parents=True, exist_ok=True)
        bookkeeping_dir(export_dir).mkdir(parents=True, exist_ok=True)
        claim = None
        if recorded is not None and _same_run(recorded_uid, run):
            claim = _reclaim(export_dir, recorded, run)
        if claim is None:
            claim = _claim_next(export_dir, secrets.token_hex(8), run)
        if backup_dir and claim != recorded:
            Path(backup_dir).mkdir(parents=True, exist_ok=True)
            _write_atomic(Path(backup_dir) / VERSION_RECORD, json.dumps(
                {"version": claim.version, "token": claim.token, "runUid": run.uid}) + "\n")
    except OSError as exc:
        raise ExportError(f"cannot claim a model version for {flags.EXPORT_DIR} {export_dir}: "
                          f"{exc.strerror or exc}") from None
    return claim


def record_exported(backup_dir: str | None, run: RunIdentity, line: str) -> None:
    """After the export (chief), before the backup goes: the summary line, for this run's uid only (a local
    run has none: each `dtr run` trains). Written first, so a chief killed while clearing still finds it."""
    if not backup_dir or not run.uid:
        return
    try:
        Path(backup_dir).mkdir(parents=True, exist_ok=True)
        _write_atomic(Path(backup_dir) / EXPORTED_RECORD, json.dumps({"runUid": run.uid, "summary": line}) + "\n")
    except OSError as exc:
        print(f"dtr_trainer: warning: cannot record the export in {backup_dir}: {exc.strerror}",
              file=sys.stderr, flush=True)


def exported_before(backup_dir: str | None, run: RunIdentity) -> str | None:
    """The summary line of this run's export when it has exported already (record_exported), else None."""
    if not backup_dir or not run.uid:
        return None
    try:
        record = json.loads((Path(backup_dir) / EXPORTED_RECORD).read_text())
        return str(record["summary"]) if record.get("runUid") == run.uid else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def clear_backup(backup_dir: str | None) -> None:
    """After the export (chief): the run's backup and version record go (the export's record stays). Kept until
    then, not deleted by Keras at the end of fit, so a run stopped during its evaluation or export (a suspend,
    a preemption) resumes after its last epoch instead of training again from epoch 1."""
    if not backup_dir or not Path(backup_dir).is_dir():
        return
    empty_dir(Path(backup_dir), keep=(EXPORTED_RECORD,))


def empty_dir(root: Path, keep: tuple[str, ...] = ()) -> None:
    """Everything in root goes but the entries named in keep (a symlink as itself, never what it points to)."""
    for entry in root.iterdir():
        if entry.name in keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _age_seconds(path: Path, now: float) -> float:
    try:
        return now - path.stat().st_mtime
    except OSError:
        return 0.0  # gone already, or unreadable: not ours to judge


def _staging_dirs(export_dir: str) -> list:
    """Every staging dir: the bookkeeping dir's, and legacy ones inside <export-dir>."""
    ours = bookkeeping_dir(export_dir)
    found = [ours / n for n in _dirs(ours) if n.startswith(STAGING_PREFIX)]
    return found + [Path(export_dir) / n for n in _dirs(Path(export_dir)) if n.startswith(LEGACY_STAGING_PREFIX)]


def remove_stale_staging(export_dir: str, claim: Claim, now: float | None = None) -> list:
    """Remove this claim's staging dirs (a chief killed mid-save) and any staging dir untouched for
    STALE_STAGING_SECONDS; another run's live staging dir is never touched. Returns the names removed."""
    now = time.time() if now is None else now
    removed = []
    for path in _staging_dirs(export_dir):
        if path.name.startswith(claim.staging_prefix) or is_stale(_age_seconds(path, now)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path.name)
    return removed


# ---------------------------------------------------------------- saving


def _save(model, path: str, layer_traces: bool) -> None:
    """Keras' own serving signature: its inputs named after the model's Input layers (the built-ins'
    `images`), its outputs after the last layers (`probabilities`), the shapes the model was trained on
    with any batch size.

    Without layer_traces (the built-in models) Keras saves each layer's config instead of tracing its call
    functions: a quarter of the CPU (docs/performance.md#the-trainers-time-outside-its-epochs).
    tf.keras.models.load_model rebuilds a model of Keras layers from their configs; one with layers of its own
    would need their classes, so a run's own model keeps the traces (docs/own-model.md). The serving signature
    is the one model.save makes by default, traced here because without traces model.save leaves it out."""
    if layer_traces:
        model.save(path, save_format="tf", include_optimizer=False)
        return
    import tensorflow as tf
    from keras.saving.legacy.saved_model import save_impl
    from tensorflow.python.saved_model import save_context

    # Traced as model.save traces it, in a save context: a distributed variable is read there as its own value
    # (BatchNormalization's moving statistics, ON_READ), not through an all-reduce, which cannot be saved.
    with save_context.save_context(tf.saved_model.SaveOptions()):
        signature = save_impl.default_save_signature(model)
    model.save(path, save_format="tf", include_optimizer=False, save_traces=False, signatures=signature)


def _publish(staging: Path, final: Path, claim: Claim) -> None:
    """Rename the complete export into place. Only the claim's holder writes `final`, so a copy
    already there is this run's own (a chief restarted after exporting): it is replaced, and there
    is still exactly one."""
    if final.exists():
        old = staging.with_name(f"{claim.staging_prefix}replaced-{secrets.token_hex(4)}")
        os.replace(final, old)
        shutil.rmtree(old, ignore_errors=True)
    os.replace(staging, final)


def _write_extra(staging: Path, files: Mapping[str, str]) -> None:
    for relative, text in files.items():
        target = staging / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def save_everywhere(model, export_dir: str, claim: Claim | None, is_chief: bool,
                    extra_files: Mapping[str, str] | None = None, layer_traces: bool = True,
                    before_publish: Callable[[], object] | None = None) -> Path | None:  # fmt: skip
    """Every worker must call this, alike: saving runs collective ops (ON_READ variables are
    aggregated), so a chief saving alone would wait forever. Non-chief workers save to a
    local temporary dir (never the volume) and delete it. The chief adds extra_files (paths
    relative to the version dir, such as the lineage) before the version appears, and calls before_publish
    last (ownership.admit: an error there leaves no version). layer_traces: _save."""
    if not is_chief:
        scratch = tempfile.mkdtemp(prefix="dtr-worker-export-")
        try:
            _save(model, os.path.join(scratch, "model"), layer_traces)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return None
    assert claim is not None
    final = Path(layout.version_dir(export_dir, claim.version))
    staging = bookkeeping_dir(export_dir) / f"{claim.staging_prefix}{secrets.token_hex(4)}"
    try:
        _save(model, str(staging), layer_traces)
        _write_extra(staging, extra_files or {})
        if before_publish is not None:
            before_publish()
        _publish(staging, final, claim)
    except Exception as exc:  # OSError, or TensorFlow's own error from inside model.save
        shutil.rmtree(staging, ignore_errors=True)
        if volume.is_full(exc):
            raise VolumeError(volume.full_message(f"exporting version {claim.version} to {final}")) from None
        if isinstance(exc, OSError):
            raise ExportError(f"cannot write the model to {final}: {exc.strerror or exc}") from None
        raise
    return final


# ---------------------------------------------------------------- summary


def report_summary(line: str, termination_path: str | None) -> None:
    """The summary line (dtr_contract.summary) on stdout and in the termination message (Kubernetes reads
    it from there)."""
    print(line, flush=True)
    if not termination_path:
        return
    try:
        with open(termination_path, "w") as f:
            f.write(line)
    except OSError as exc:
        print(f"dtr_trainer: warning: cannot write termination message {termination_path}: {exc.strerror}",
              file=sys.stderr, flush=True)
