"""The chief's summary: one JSON line on stdout and in the termination message, which the operator reads
from the chief pod's status into status.metrics and status.model.

    {"loss":0.0712,"accuracy":0.9812,"epochs":3,"examplesPerSecond":5400.3,"modelPath":"/mnt/dtr/models/m/1","modelVersion":1}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LOSS, ACCURACY, EPOCHS, EXAMPLES_PER_SECOND = "loss", "accuracy", "epochs", "examplesPerSecond"
MODEL_PATH, MODEL_VERSION = "modelPath", "modelVersion"
_FLOATS = (LOSS, ACCURACY, EXAMPLES_PER_SECOND)


def summary_json(loss: float, accuracy: float, epochs: int, examples_per_second: float,
                 model_path: str, model_version: int) -> str:
    return json.dumps(
        {
            LOSS: round(float(loss), 6),
            ACCURACY: round(float(accuracy), 6),
            EPOCHS: int(epochs),
            EXAMPLES_PER_SECOND: round(float(examples_per_second), 1),
            MODEL_PATH: model_path,
            MODEL_VERSION: int(model_version),
        },
        separators=(",", ":"),
    )


@dataclass(frozen=True)
class Summary:
    """What a summary says; None for each value it lacks or gives with the wrong type."""

    loss: float | None = None
    accuracy: float | None = None
    epochs: int | None = None
    examples_per_second: float | None = None
    model_path: str | None = None
    model_version: int | None = None

    def metrics(self) -> dict[str, float | int]:
        """The figures it gives, under the summary's own names (status.metrics takes them as they are)."""
        figures = ((LOSS, self.loss), (ACCURACY, self.accuracy), (EXAMPLES_PER_SECOND, self.examples_per_second),
                   (EPOCHS, self.epochs))
        return {key: value for key, value in figures if value is not None}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _from_object(data: Mapping[str, Any]) -> Summary:
    loss, accuracy, rate = (_float(data.get(key)) for key in _FLOATS)
    path = data.get(MODEL_PATH)
    return Summary(
        loss=loss, accuracy=accuracy, examples_per_second=rate,
        epochs=data[EPOCHS] if _is_int(data.get(EPOCHS)) else None,
        model_path=path if isinstance(path, str) and path else None,
        model_version=data[MODEL_VERSION] if _is_int(data.get(MODEL_VERSION)) else None,
    )  # fmt: skip


def parse_summary(text: str) -> Summary | None:
    """The summary in a termination message: the whole text, else its last line that is JSON (a message
    that fell back to the log tail). None when no JSON object is found."""
    stripped = text.strip()
    for candidate in (stripped, *reversed(stripped.splitlines())):
        try:
            data = json.loads(candidate)
        except ValueError:
            continue
        return _from_object(data) if isinstance(data, dict) else None
    return None
