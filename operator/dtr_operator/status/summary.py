"""The chief's summary (its termination message: metrics, headline, model) as the status holds it. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dtr_contract import layout, objectstore, published
from dtr_contract import summary as chief_summary

from .state import clean_text


@dataclass(frozen=True)
class Summary:
    """The chief's final summary, or why there is none."""

    metrics: dict[str, Any] | None
    model: dict[str, Any] | None
    problem: str | None
    headline: tuple[str, float] | None = None  # the run's headline metric: (name, value)
    stopped_early: tuple[int, int, str] | None = None  # (epoch, epochs, reason): a callback of the run's code ended it

    def stopped_text(self) -> str:
        """`; stopped early at epoch 4 of 10: <reason>` for the status's message, or nothing."""
        if self.stopped_early is None:
            return ""
        epoch, epochs, reason = self.stopped_early
        return f"; stopped early at epoch {epoch} of {epochs}: {clean_text(reason, MAX_REASON)}"


def parse_summary(message: str | None, claim: str | None) -> Summary:
    """The trainer's termination message (dtr_contract.summary) -> metrics, the headline and the model."""
    if not message or not message.strip():
        return Summary(None, None, "the chief worker left no termination message, so no metrics")
    try:
        found = chief_summary.parse_summary(message)
    except Exception:  # any text may be there (a custom image's): it must not stop the run's status
        return Summary(None, None, "the chief worker's termination message cannot be read, so no metrics")
    if found is None:
        return Summary(None, None, "the chief worker's termination message is not a JSON object, so no metrics")
    model = _summary_model(found, claim)
    headline = found.headline()
    wanted = found.metric or chief_summary.default_metric(found.metrics())
    lacking = [f"its headline metric {wanted}"] * (headline is None) + [chief_summary.MODEL_PATH] * (model is None)
    problem = f"the chief worker's summary lacks {' and '.join(lacking)}" if lacking else None
    # status.metrics are the summary's figures under the summary's own names (docs/api.md).
    return Summary(found.metrics() or None, model, problem, headline, found.stopped_early)


def headline_text(headline: tuple[str, float]) -> str:
    """status.headline, the METRIC column: `mae=0.1234`."""
    name, value = headline
    return f"{name}={value:.4f}"


MAX_MODEL_PATH = 1024
MAX_REASON = 200  # characters of a stop's reason in the status's message


def _summary_model(found: chief_summary.Summary, claim: str | None) -> dict[str, Any] | None:
    """status.model, or None: no model path, or one that is not a clean line (clean_text) of MAX_MODEL_PATH."""
    if found.model_path is None or clean_text(found.model_path, MAX_MODEL_PATH) != found.model_path:
        return None
    model: dict[str, Any] = {"path": found.model_path, **({"claim": claim} if claim else {})}
    if found.model_version is not None:
        model["version"] = found.model_version
    if uri := storage_uri(claim, found.model_path):
        model["storageUri"] = uri
    return model


def storage_uri(claim: str | None, model_path: str) -> str | None:
    """KServe's storageUri of the model: the directory of numbered versions that TF Serving (and KServe's
    TensorFlow runtime) watches. pvc://<claim>/<its base directory inside the volume> for a version on the
    volume; s3://bucket/<base> for a version published in a bucket (s3://bucket/<base>/<N>,
    docs/models.md#versions-in-a-bucket); None for anything else."""
    if objectstore.is_s3_uri(model_path):
        try:
            return published.split_version_uri(model_path)[0].uri
        except ValueError:
            return None
    base = layout.model_base(model_path)
    return None if base is None or claim is None else f"pvc://{claim}/{base}"
