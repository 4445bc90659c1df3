"""Whether a local run starts fresh or resumes the backup on its volume (docs/local.md#a-fresh-run-is-fresh).

On a cluster a run re-created under the same name has a new uid, and so a backup directory of its own. A local
run has no uid: its backup is DIR/volumes/<claim>/backup/<name>/, the same for every `dtr run` of that name. So
the runner asks decide() before it starts the workers: a new run starts fresh (the earlier backup discarded,
saying so) unless it is the same run, suspended, or the user asks with --resume; a backup made by another file
or other options is never resumed, refused with what to do instead. What "the same run" means: the run's spec
with its defaults (not suspend) and its code file's SHA-256, recorded beside the run (DIR/runs/<name>/RECORD)
when it starts.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dtr_contract import layout

from dtr_operator import builders
from dtr_operator.reasons import SUSPENDED, TERMINAL
from dtr_operator.spec import RunSpec

RESUME, FRESH = "resume", "fresh"  # what the user asked for (dtr run --resume, --fresh); None: neither
RECORD = "backup-of.json"  # in the run's directory: the fingerprint of the run that made the backup
_NOT_THE_RUN = ("uid", "generation", "suspend")  # a suspended run resumed is the same run


@dataclass(frozen=True)
class Found:
    """What is on disk: whether the backup has anything in it, the fingerprint recorded for it (None: not
    recorded), the phase its run last had (None: unknown, or a new run created by the client), and the process
    id of a `dtr run` of it still alive (None: none)."""

    present: bool
    recorded: Mapping[str, Any] | None
    phase: str | None
    running: int | None = None


@dataclass(frozen=True)
class Start:
    """Start the workers; resume: from the backup (else it is discarded first when there is one); note: the line
    that says so (None: nothing to say)."""

    resume: bool
    note: str | None = None


@dataclass(frozen=True)
class Refuse:
    message: str


# ---- pure -------------------------------------------------------------------------------------


def fingerprint(run: RunSpec, code_sha256: str | None) -> dict[str, Any]:
    """What makes a run the same run, as JSON values: its spec with every default (not suspend), and its code."""
    spec = {k: v for k, v in dataclasses.asdict(run).items() if k not in _NOT_THE_RUN}
    return {"spec": json.loads(json.dumps(spec, sort_keys=True, default=str)), "code": code_sha256}


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out.update(_flat(inner, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def differences(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """What differs between two fingerprints, one phrase each: the code file, or a spec field old -> new."""
    found = ["the code file (its SHA-256)"] if recorded.get("code") != current.get("code") else []
    old, new = _flat(recorded.get("spec") or {}), _flat(current.get("spec") or {})
    for path in sorted(set(old) | set(new)):
        if old.get(path) != new.get(path):
            found.append(f"{path} {old.get(path)!r} -> {new.get(path)!r}")
    return found


def decide(name: str, where: str, found: Found, current: Mapping[str, Any], ask: str | None) -> Start | Refuse:
    """Resume the backup at `where`, start fresh, or refuse: the module's rule, with the line to say."""
    if (early := _whatever_the_record(name, where, found, ask)) is not None:
        return early
    if found.recorded is None:
        return _unrecorded(name, where, ask)
    changed = differences(found.recorded, current)
    suspended = found.phase == SUSPENDED
    if changed:
        return _changed(name, where, "; ".join(changed), suspended, ask)
    if ask == RESUME or suspended:
        why = "--resume" if ask == RESUME else "it was suspended"
        return Start(True, f"[dtr] run {name} resumes from its backup in {where} ({why})")
    return Start(False, f"[dtr] run {name} starts fresh: the backup an earlier run of it left in {where} "
                        f"(it ended {found.phase or 'without a status'}) is discarded; dtr run --resume resumes "
                        "it")  # fmt: skip


def _whatever_the_record(name: str, where: str, found: Found, ask: str | None) -> Start | Refuse | None:
    """What no record changes: a run of the name alive here, no backup, --fresh."""
    if found.running is not None:
        return Refuse(f"run {name} is training in this directory already (dtr run, process {found.running}): wait "
                      "for it or stop it (Ctrl-C), or give this run another --name")  # fmt: skip
    if not found.present:
        return Start(False, f"[dtr] --resume: run {name} has no backup in {where}: it starts fresh"
                     if ask == RESUME else None)  # fmt: skip
    if ask == FRESH:
        return Start(False, f"[dtr] run {name} starts fresh (--fresh): the backup in {where} is discarded")
    return None


def _unrecorded(name: str, where: str, ask: str | None) -> Start:
    """A backup with no record of the run that made it (an older dtr, or a copied volume)."""
    if ask == RESUME:
        return Start(True, f"[dtr] run {name} resumes from the backup in {where} (--resume), which does not "
                           "record the file and options that made it")  # fmt: skip
    return Start(False, f"[dtr] run {name} starts fresh: the backup in {where}, which does not record the file "
                        "and options that made it, is discarded; dtr run --resume resumes it")  # fmt: skip


def _changed(name: str, where: str, changed: str, suspended: bool, ask: str | None) -> Start | Refuse:
    """A backup another file or other options made: never resumed."""
    if ask == RESUME or suspended:
        state = f"run {name} is suspended, and " if suspended and ask != RESUME else ""
        return Refuse(f"{state}the backup of run {name} in {where} was made by another file or other options "
                      f"({changed}): to resume it, run the same file with the same options; to start over from "
                      f"epoch 1, dtr run {'without --resume' if ask == RESUME else '--fresh'}")  # fmt: skip
    return Start(False, f"[dtr] run {name} starts fresh: the backup an earlier run left in {where} was made by "
                        f"another file or other options ({changed}) and is discarded")  # fmt: skip


# ---- the shell --------------------------------------------------------------------------------


def backup_path(run: RunSpec, claim_dir: str) -> Path | None:
    """The run's backup on this machine; None when it is not on the volume (spec.storage.backupUri)."""
    inside = layout.in_volume(builders.backup_dir(run))
    if run.storage.backup_uri is not None or not run.has_volume or inside is None:
        return None
    return Path(claim_dir) / inside


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _live_pid(record: Mapping[str, Any] | None, phase: str | None) -> int | None:
    """The recorded `dtr run` process when its run has not ended and it is still alive."""
    pid = (record or {}).get("pid")
    if phase in (*TERMINAL, SUSPENDED) or not isinstance(pid, int) or pid == os.getpid():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # alive, another user's
        return pid
    return pid


def settle(run: RunSpec, code_sha256: str | None, backup: Path | None, run_dir: Path, status_file: str,
           ask: str | None) -> str | None:  # fmt: skip
    """Decide for the run about to start (RunError when refused), discard the backup when it starts fresh,
    record what the run is; the line to print, if any."""
    from .source import RunError

    if backup is None:
        return None
    current = fingerprint(run, code_sha256)
    record, phase = _read_json(run_dir / RECORD), (_read_json(run_dir / status_file) or {}).get("phase")
    found = Found(backup.is_dir() and any(backup.iterdir()), record, phase, _live_pid(record, phase))
    decision = decide(run.name, str(backup), found, current, ask)
    if isinstance(decision, Refuse):
        raise RunError(decision.message)
    if not decision.resume:
        shutil.rmtree(backup, ignore_errors=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / RECORD).write_text(json.dumps({**current, "pid": os.getpid()}, indent=1, sort_keys=True))
    return decision.note
