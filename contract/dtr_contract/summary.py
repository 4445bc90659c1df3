"""The chief's summary: one JSON line on stdout and in the termination message, which the operator reads
from the chief pod's status into status.metrics and status.model.

    {"loss":0.0712,"accuracy":0.9812,"epochs":3,"examplesPerSecond":5400.3,"modelPath":"/mnt/dtr/models/m/1",
     "modelVersion":1,"metric":"accuracy","metrics":{"accuracy":0.9812,"loss":0.0712}}

`metrics` holds every figure the model's evaluation reported, under Keras' names (a regression model's
`{"loss":..,"mae":..}`); `metric` names the headline among them (--metric, else `default_metric`). `loss`
and `accuracy` repeat theirs at the top level for readers of the first format; `accuracy` only when the
model reports it. A figure that is not a finite number (a diverged loss) is null. `stoppedEarly`, only when a
callback of the run's own code ended the training before its last epoch (docs/experiments.md#callbacks):
`{"epoch": 4, "epochs": 10, "reason": "EarlyStopping: val_loss did not improve for 2 epoch(s); ..."}`.

The reader survives any text (a custom image writes its own message): it reads at most MAX_TEXT
characters, keeps at most MAX_FIGURES figures whose names are short and printable, and takes nothing it
cannot represent (nesting too deep to parse, integers past MAX_INT, numbers too large for a float).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

LOSS, ACCURACY, EPOCHS, EXAMPLES_PER_SECOND = "loss", "accuracy", "epochs", "examplesPerSecond"
MODEL_PATH, MODEL_VERSION = "modelPath", "modelVersion"
METRIC, METRICS = "metric", "metrics"  # the headline's name; every evaluation figure by name
STOPPED_EARLY, EPOCH, REASON = "stoppedEarly", "epoch", "reason"
MAX_REASON = 256  # characters of stoppedEarly's reason kept
_FLOATS = (LOSS, ACCURACY, EXAMPLES_PER_SECOND)
MAX_TEXT = 64 * 1024  # characters of a termination message read (the kubelet keeps 4 KiB; a log tail more)
MAX_FIGURES = 32  # evaluation figures kept, by name
MAX_INT = 2**53 - 1  # epochs and modelVersion beyond this are not taken (JSON's exact integers)
_NAME = re.compile(r"[A-Za-z_][\w./-]{0,63}", re.ASCII)  # a figure's or the headline's name


def default_metric(names: Iterable[str]) -> str:
    """The headline when the run names none: accuracy when the model reports it, else the loss."""
    return ACCURACY if ACCURACY in set(names) else LOSS


def _figure(value: float, digits: int) -> float | None:
    value = float(value)
    return round(value, digits) if math.isfinite(value) else None


def summary_json(evaluation: Mapping[str, float], metric: str, epochs: int, examples_per_second: float,
                 model_path: str, model_version: int, stopped_early: Mapping[str, Any] | None = None) -> str:
    """evaluation: every figure of the final evaluation by name, `loss` among them; metric: one of its names."""
    if LOSS not in evaluation or metric not in evaluation:
        raise ValueError(f"the evaluation {sorted(evaluation)} lacks {LOSS!r} or the headline {metric!r}")
    figures = {name: _figure(value, 6) for name, value in sorted(evaluation.items())}
    top = {LOSS: figures[LOSS], **({ACCURACY: figures[ACCURACY]} if ACCURACY in figures else {})}
    return json.dumps(
        {
            **top,
            EPOCHS: int(epochs),
            EXAMPLES_PER_SECOND: _figure(examples_per_second, 1),
            MODEL_PATH: model_path,
            MODEL_VERSION: int(model_version),
            METRIC: metric,
            METRICS: figures,
            **({STOPPED_EARLY: {EPOCH: int(stopped_early[EPOCH]), EPOCHS: int(stopped_early[EPOCHS]),
                                REASON: str(stopped_early[REASON])[:MAX_REASON]}} if stopped_early else {}),
        },
        separators=(",", ":"),
        allow_nan=False,
    )


@dataclass(frozen=True)
class Summary:
    """What a summary says; None (or empty) for each value it lacks or gives with the wrong type."""

    loss: float | None = None
    accuracy: float | None = None
    epochs: int | None = None
    examples_per_second: float | None = None
    model_path: str | None = None
    model_version: int | None = None
    metric: str | None = None
    evaluation: tuple[tuple[str, float], ...] = ()  # sorted by name; figures that are numbers only
    stopped_early: tuple[int, int, str] | None = None  # (epoch, epochs, reason): a callback ended it early

    def metrics(self) -> dict[str, float | int]:
        """The figures it gives, under the summary's own names (status.metrics takes them as they are):
        every evaluation figure, then loss, accuracy, examplesPerSecond and epochs."""
        figures = ((LOSS, self.loss), (ACCURACY, self.accuracy), (EXAMPLES_PER_SECOND, self.examples_per_second),
                   (EPOCHS, self.epochs))
        return {**dict(self.evaluation), **{key: value for key, value in figures if value is not None}}

    def headline(self) -> tuple[str, float] | None:
        """(name, value) of the run's headline figure: `metric`, or for a summary without one (the first
        format) default_metric of what it gives. None when that figure is missing."""
        figures = {**{k: v for k, v in ((LOSS, self.loss), (ACCURACY, self.accuracy)) if v is not None},
                   **dict(self.evaluation)}
        name = self.metric or default_metric(figures)
        return (name, figures[name]) if name in figures else None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_INT


def _float(value: Any) -> float | None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer too large for a float
        return None
    return number if math.isfinite(number) else None  # JSON's 1e999 reads as inf, which no status can hold


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def _evaluation(value: Any) -> tuple[tuple[str, float], ...]:
    figures = value.items() if isinstance(value, dict) else ()
    named = sorted((k, v) for k, v in ((k, _float(v)) for k, v in figures) if v is not None and _is_name(k))
    return tuple(named[:MAX_FIGURES])


def _from_object(data: Mapping[str, Any]) -> Summary:
    loss, accuracy, rate = (_float(data.get(key)) for key in _FLOATS)
    path, metric = data.get(MODEL_PATH), data.get(METRIC)
    return Summary(
        loss=loss, accuracy=accuracy, examples_per_second=rate,
        epochs=data[EPOCHS] if _is_int(data.get(EPOCHS)) else None,
        model_path=path if isinstance(path, str) and path else None,
        model_version=data[MODEL_VERSION] if _is_int(data.get(MODEL_VERSION)) else None,
        metric=metric if _is_name(metric) else None,
        evaluation=_evaluation(data.get(METRICS)),
        stopped_early=_stopped_early(data.get(STOPPED_EARLY)),
    )  # fmt: skip


def _stopped_early(value: Any) -> tuple[int, int, str] | None:
    """(epoch, epochs, reason) when whole and sane: 1 <= epoch < epochs, a reason of text (clipped)."""
    if not isinstance(value, dict):
        return None
    epoch, epochs, reason = value.get(EPOCH), value.get(EPOCHS), value.get(REASON)
    if not (_is_int(epoch) and _is_int(epochs) and isinstance(reason, str) and 1 <= epoch < epochs):
        return None
    return epoch, epochs, reason[:MAX_REASON]


def parse_summary(text: str) -> Summary | None:
    """The summary in a termination message: the whole text, else its last line that is JSON (a message
    that fell back to the log tail). None when no JSON object is found. Only the last MAX_TEXT characters
    are read."""
    stripped = text[-MAX_TEXT:].strip()
    for candidate in (stripped, *reversed(stripped.splitlines())):
        try:
            data = json.loads(candidate)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
            continue
        return _from_object(data) if isinstance(data, dict) else None
    return None
