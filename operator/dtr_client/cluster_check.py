"""`dtr render --cluster`: what the cluster's operator would say to each run of a file, before it is applied.

The operator's settings are read from its Deployment with the parser `dtr operator` uses (namespaces.py), then
each run goes through the same checks the operator makes before it creates anything: the image allow-list, user
code, and the policy of what a run may ask of the cluster (settings.py, policy.py). A run that passes them all
may still wait for a claim, a queue or room on a node: those the status says once it runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dtr_operator.reasons import IMAGE_NOT_ALLOWED, USER_CODE_NOT_ALLOWED
from dtr_operator.settings import Settings, SettingsError
from dtr_operator.spec import RunSpec

from .namespaces import Watcher, operator_settings, watchers


def refusals(run: RunSpec, settings: Settings) -> list[str]:
    """Every reason the operator with these settings would fail the run with, before creating anything
    ("Reason: message"); empty when it would go ahead."""
    out = []
    if (why := settings.image_refusal(run.image)) is not None:
        out.append(f"{IMAGE_NOT_ALLOWED}: {why}")
    if (why := settings.code_refusal(run.code.config_map if run.code else None)) is not None:
        out.append(f"{USER_CODE_NOT_ALLOWED}: {why}")
    if (refused := settings.run_refusal(run)) is not None:
        out.append(f"{refused.reason}: {refused.message}")
    return out


def verdicts(runs: Sequence[RunSpec], deployments: Sequence[Mapping[str, Any]]) -> tuple[int, list[str]]:
    """(exit code, lines): 0 when an operator watches each run's namespace and would accept the run."""
    found = watchers(deployments)
    by_name = {f"{d['metadata']['namespace']}/{d['metadata']['name']}": d for d in deployments}
    code, lines = 0, []
    for run in runs:
        where = f"{run.namespace}/{run.name}"
        serving: Watcher | None = next((w for w in found if w.watches(run.namespace)), None)
        if serving is None:
            code = 1
            lines.append(f"{where}: no operator watches namespace {run.namespace}: the run would get no status "
                         "(dtr namespaces)")  # fmt: skip
            continue
        try:
            settings = operator_settings(by_name[serving.name])
        except SettingsError as err:
            code = 1
            lines.append(f"{where}: the operator {serving.name} has an invalid setting and does not start: {err}")
            continue
        said = refusals(run, settings)
        if said:
            code = 1
            lines.extend(f"{where}: the operator {serving.name} would fail it: {why}" for why in said)
        else:
            lines.append(f"{where}: the operator {serving.name} would accept it (watching {serving.scope()})")
    return code, lines
