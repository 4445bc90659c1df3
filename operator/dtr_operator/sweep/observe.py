"""A sweep's trials as the operator sees them, and the status it writes. Pure.

The sweep's status is its memory (nothing lives only in the operator's): status.trials records each trial's index,
run, point, phase and the objective at every epoch seen, since a run's status keeps only its last epoch's figures
(status.progress) and a stopped trial's run is deleted. Each reconcile folds the runs as listed now into those
records (fold), decides (decide.py), and writes the records with what was decided (written) before acting on it:
an operator that restarts between the write and the act finds the records and acts again (creating a run that
exists, or deleting one gone, changes nothing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..api import API_VERSION, KIND, MANAGED_BY, SWEEP_KIND, SWEEP_LABEL, TRIAL_LABEL
from .decide import TERMINAL, Decision, SweepSpec, Trial, point
from .fields import MAX_CURVE
from .model_based import Outcome
from .space import apply_point

STOPPED = "Stopped"  # a trial's phase once the sweep stopped it (its run deleted)
MAX_POINTS = MAX_CURVE  # objective values kept per trial: 50 trials x 200 stay well within an object's size
RUN_DELETED = "its run was deleted before it finished"


def trial_name(sweep: str, index: int) -> str:
    return f"{sweep}-{index}"


def _figure(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


def _epoch_value(status: Mapping[str, Any], metric: str) -> tuple[int, float] | None:
    """The objective at the run's last finished epoch (status.progress), or None."""
    progress = status.get("progress") or {}
    epoch = progress.get("epoch")
    for entry in progress.get("metrics") or []:
        if isinstance(entry, Mapping) and entry.get("name") == metric and isinstance(epoch, int):
            value = _figure(entry.get("value"))
            return None if value is None else (epoch, value)
    return None


def final_value(status: Mapping[str, Any], metric: str) -> float | None:
    """The objective a succeeded run ended with: val_X is the final evaluation's X on the held-out split
    (status.metrics); another metric has no final figure (the curve's last value is taken)."""
    if not metric.startswith("val_"):
        return None
    return _figure((status.get("metrics") or {}).get(metric.removeprefix("val_")))


def _curve(record: Mapping[str, Any], status: Mapping[str, Any], metric: str) -> list[list[float]]:
    """The record's curve with the run's last finished epoch, when it is a new one. Not once the run succeeded: its
    status.progress then says every epoch done, beside the figures of the last one the poll read."""
    curve = [list(p) for p in record.get("curve") or []]
    seen = None if status.get("phase") == "Succeeded" else _epoch_value(status, metric)
    if seen and (not curve or seen[0] > curve[-1][0]) and len(curve) < MAX_POINTS:
        curve.append([seen[0], seen[1]])
    return curve


def _folded(record: Mapping[str, Any], run: Mapping[str, Any] | None, metric: str) -> dict[str, Any]:
    out = dict(record)
    if out.get("phase") in (*TERMINAL, STOPPED):
        return out
    if run is None:
        if out.get("phase"):  # seen before, gone now: someone deleted it
            out.update(phase="Failed", reason=RUN_DELETED)
        return out
    status = run.get("status") or {}
    out["phase"] = status.get("phase") or ""
    if curve := _curve(record, status, metric):
        out["curve"] = curve
    if isinstance(epochs := (status.get("progress") or {}).get("epochs"), int):
        out["epochs"] = epochs
    return _ended(out, status, metric)


def _ended(record: dict[str, Any], status: Mapping[str, Any], metric: str) -> dict[str, Any]:
    """A succeeded trial's final objective, a failed one's reason."""
    final = final_value(status, metric) if record["phase"] == "Succeeded" else None
    if final is not None:
        record["final"] = final
    if record["phase"] == "Failed":
        record["reason"] = str(status.get("message") or "")[:300]
    return record


def fold(records: Sequence[Mapping[str, Any]], runs: Mapping[int, Mapping[str, Any]], metric: str
         ) -> list[dict[str, Any]]:  # fmt: skip
    """status.trials brought up to date with the trials' runs (by index) as listed now."""
    return [_folded(r, runs.get(int(r["index"])), metric) for r in records if isinstance(r.get("index"), int)]


def trials(records: Sequence[Mapping[str, Any]]) -> list[Trial]:
    return [Trial(int(r["index"]), str(r["run"]), str(r.get("phase") or ""),
                  tuple((int(e), float(v)) for e, v in r.get("curve") or []), r.get("phase") == STOPPED,
                  r.get("final"), r.get("epochs")) for r in records]  # fmt: skip


def finished_points(records: Sequence[Mapping[str, Any]]) -> list[Outcome]:
    """What a model-based search learns from: each trial that succeeded with a value, and each stopped early with
    its curve (a trial that failed tells nothing of its point)."""
    found = []
    for record, trial in zip(records, trials(records), strict=True):
        if trial.phase == "Succeeded" and not trial.stopped and trial.value is not None:
            found.append(Outcome(record.get("point") or {}, trial.value))
        elif trial.stopped and trial.curve:
            found.append(Outcome(record.get("point") or {}, None, trial.curve))
    return found


def _message(decision: Decision, records: Sequence[Mapping[str, Any]]) -> str:
    """The decision's message; a failed sweep's names the last failed trial and why."""
    failed = [r for r in records if r.get("phase") == "Failed" and r.get("reason")]
    if decision.phase != "Failed" or not failed:
        return decision.message
    return f"{decision.message}; {failed[-1]['run']}: {failed[-1]['reason']}"


def _best(decision: Decision, records: Sequence[Mapping[str, Any]], model: str | None) -> dict[str, Any] | None:
    leader = decision.best
    if leader is None or leader.value is None:
        return None
    found = next((r.get("point") for r in records if r["index"] == leader.index), {})
    best = {"run": leader.name, "trial": leader.index, "value": leader.value, "point": found}
    return {**best, "model": model} if model else best


def written(sweep: SweepSpec, name: str, records: Sequence[Mapping[str, Any]], decision: Decision,
            runs: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:  # fmt: skip
    """The sweep's status after `decision`: the records with the new trials and the stopped ones, the counts, the
    best trial with its run's model (status.model.path; `runs`: the trials' runs as read, by index)."""
    best_run = runs.get(decision.best.index) if decision.best else None
    best_model = ((best_run or {}).get("status") or {}).get("model", {}).get("path")
    stopping = dict(decision.stop)
    out = [{**r, "phase": STOPPED, "reason": stopping[r["run"]]} if r["run"] in stopping else dict(r)
           for r in records]  # fmt: skip
    history = finished_points(out)
    out += [{"index": i, "run": trial_name(name, i), "phase": "", "point": point(sweep, i, history)}
            for i in decision.create]  # fmt: skip
    finished = sum(1 for r in out if r.get("phase") in (*TERMINAL, STOPPED))
    status: dict[str, Any] = {"phase": decision.phase, "message": _message(decision, out), "trials": out,
                              "counts": dict(decision.counts), "trialsDone": f"{finished}/{sweep.trials}"}  # fmt: skip
    if (best := _best(decision, out, best_model)) is not None:
        status["best"] = best
    return status


def trial_run(sweep_body: Mapping[str, Any], index: int, point: Mapping[str, Any]) -> dict[str, Any]:
    """The trial's DistTrainingRun: the template's spec with the trial's point (as its record holds it), owned by the
    sweep (it goes with it)."""
    found = sweep_body.get("metadata") or {}
    template = dict(((sweep_body.get("spec") or {}).get("template") or {}).get("spec") or {})
    template["training"] = apply_point(template.get("training") or {}, point)
    owner = {"apiVersion": API_VERSION, "kind": SWEEP_KIND, "name": found.get("name"), "uid": found.get("uid"),
             "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    labels = {**MANAGED_BY, SWEEP_LABEL: found.get("name"), TRIAL_LABEL: str(index)}
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": trial_name(str(found.get("name")), index), "namespace": found.get("namespace"),
                         "labels": labels, "ownerReferences": [owner]},
            "spec": template}  # fmt: skip


def refused(records: Sequence[Mapping[str, Any]], run: str, why: str) -> list[dict[str, Any]]:
    """The records with `run`'s failed: the API server refused to create it (its template, or the point in it)."""
    reason = f"the API server refused its run: {why}"[:300]
    return [{**r, "phase": "Failed", "reason": reason} if r.get("run") == run else dict(r) for r in records]
