"""The generated specs the reliability suite draws, shared by its two property tests, and how to draw them
again.

- test_generated_specs.py drives each spec the API server accepts to its end with the operator running;
- test_generated_specs_dry_run.py sends a thousand with server-side dry-run and checks that the operator's
  own parser (operator/dtr_operator/spec.py, what `dtr render` and `dtr run` use) accepts and refuses the same.

Reproducible: both draw with `@seed(SEED)`, derandomized, no example database, no shrinking, and with
hypothesis' "local constants" pinned off (`pinned_draws`): hypothesis (6.170 here) also draws, now and then,
literals it finds in the source of the local modules already imported (here: dtr_operator), so without the
pin the sequence changed with any edit to the operator's code and with which tests ran before. What the
ledger records (`draw_settings`) is all it takes to draw the same specs again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import hypothesis
from dtr_operator.fields import BUILTIN_DATASETS, find
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis import strategies as st

IMAGE = "localhost/distml/trainer:0.1.0-test"
PRIORITY_CLASS = "dtr-generated-low"  # created by the harness: pods naming a missing class are refused
# The operator's policy (docs/operator.md#what-a-run-may-ask-of-the-cluster) allows what the valid draws ask:
# the suite tests admission and the runs' paths, tests/reliability/attacks/policy.yaml the refusals.
POLICY_ENV = {"DTR_ALLOWED_POD_LABELS": "team,example.com/*", "DTR_ALLOWED_POD_ANNOTATIONS": "note",
              "DTR_ALLOWED_PRIORITY_CLASSES": PRIORITY_CLASS,
              "DTR_ALLOWED_STORAGE_CLASSES": "standard,fast"}  # fmt: skip
SEED = 18  # issue 18: a fixed seed, stated in the report

# ---- the generator: each field valid most of the time, out of bounds or malformed sometimes ----------


def enum(path: str) -> st.SearchStrategy[str]:
    """The values the field table (operator/dtr_operator/fields.py) allows, in its order."""
    return st.sampled_from(find(path).enum)


def spec_strategy(bad: bool) -> st.SearchStrategy[dict[str, Any]]:
    """Specs from the CRD's domain; with bad, any field may also take an out-of-bounds or malformed value."""

    def mostly(valid: st.SearchStrategy[Any], invalid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(*[valid] * 5, invalid) if bad else valid

    training = st.fixed_dictionaries(
        {},
        optional={
            "model": mostly(enum("training.model"), st.sampled_from(["resnet", "CNN", ""])),
            "dataset": mostly(
                st.sampled_from([*BUILTIN_DATASETS, "sets/d.npz", "a.npz"]),
                st.sampled_from(["../x.npz", "/etc/x.npz", "x.csv", "./a.npz", "imagenet"]),
            ),
            "epochs": mostly(st.integers(1, 1000), st.integers(-3, 0) | st.integers(1001, 5000)),
            "batchSizePerWorker": mostly(st.integers(1, 4096), st.sampled_from([0, 4097, -1])),
            "stepsPerEpoch": mostly(st.integers(1, 1000000), st.sampled_from([0, 1000001])),
            "learningRate": mostly(
                st.floats(1e-6, 10, allow_nan=False, allow_infinity=False), st.sampled_from([0, -0.5, 10.5])
            ),
            "seed": mostly(st.integers(0, 2**31 - 1), st.sampled_from([-1, 2**31])),
        },
    )
    storage = st.fixed_dictionaries(
        {},
        optional={
            "claimName": mostly(st.sampled_from(["shared-data", "vol.1"]), st.sampled_from(["Bad_Claim", ""])),
            "size": mostly(st.sampled_from(["1Gi", "500Mi", "2G"]), st.sampled_from(["0", "lots", "-1Gi"])),
            "storageClassName": mostly(st.sampled_from(["standard", "fast"]), st.just("")),
            "accessMode": mostly(enum("storage.accessMode"), st.just("ReadOnlyMany")),
            "reclaimPolicy": mostly(enum("storage.reclaimPolicy"), st.just("Recycle")),
        },
    )
    specs = st.fixed_dictionaries(
        {},
        optional={
            # Few workers: the suite plays the kubelet for each worker pod.
            "workers": mostly(st.integers(1, 3), st.sampled_from([0, 65, -1])),
            "image": mostly(st.just(IMAGE), st.just("")),
            "imagePullPolicy": mostly(enum("imagePullPolicy"), st.just("Sometimes")),
            "training": training,
            "storage": storage,
            "export": st.fixed_dictionaries(
                {}, optional={"modelName": mostly(st.sampled_from(["m", "mnist_v1.2"]), st.sampled_from(["../m", "M"]))}
            ),
            "resources": mostly(
                st.sampled_from([{}, {"limits": {"cpu": "1", "memory": "2Gi"}}, {"requests": {"cpu": "500m"}}]),
                st.just({"limits": {"cpu": "two"}}),
            ),
            "restartPolicy": mostly(enum("restartPolicy"), st.just("Always")),
            "backoffLimit": mostly(st.integers(0, 100), st.just(-1)),
            "activeDeadlineSeconds": mostly(st.integers(1, 10**6), st.just(0)),
            "ttlSecondsAfterFinished": mostly(st.integers(60, 3600), st.just(-1)),
            # Placement, queueing, gang scheduling and suspend (docs/scheduling.md).
            "suspend": mostly(st.sampled_from([False, False, True]), st.just("yes")),
            "nodeSelector": mostly(st.sampled_from([{}, {"pool": "gpu"}, {"kubernetes.io/arch": "amd64"}]),
                                   st.sampled_from([{"pool": 1}, {"bad key": "x"}, {"pool": "x" * 64}])),
            "tolerations": mostly(
                st.sampled_from([[], [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                                 [{"key": "k", "value": "v", "effect": "NoExecute", "tolerationSeconds": 30}]]),
                st.sampled_from([[{"operator": "Maybe"}], [{"operator": "Exists", "value": "v"}], {"key": "gpu"}]),
            ),
            "affinity": mostly(
                st.just({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1,
                         "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}]}}),
                st.sampled_from(["near", {"topology": {}}]),
            ),
            "priorityClassName": mostly(st.just(PRIORITY_CLASS), st.sampled_from(["High_Priority", ""])),
            "podLabels": mostly(st.sampled_from([{}, {"team": "ml"}, {"example.com/cost": "a1"}]),
                                st.sampled_from([{"distml.dev/run": "x"}, {"team": "not ok"}])),
            "podAnnotations": mostly(st.sampled_from([{}, {"note": "free text, any length"}]), st.just({"/x": "v"})),
            "queueName": mostly(st.sampled_from(["team-a"]), st.sampled_from(["Team_A", ""])),
            "schedulingPolicy": mostly(
                st.fixed_dictionaries({}, optional={"minAvailable": st.integers(1, 1), "queue": st.just("q"),
                                                    "scheduleTimeoutSeconds": st.integers(1, 600)}),
                st.sampled_from([{"minAvailable": 0}, {"minAvailable": 99}, {"gang": True}]),
            ),
        },
    )  # fmt: skip
    return specs


# Two in three specs draw valid values only; the rest may break any field.
specs = st.one_of(spec_strategy(False), spec_strategy(False), spec_strategy(True))

# What the suite does once the children of a run that trains exist: test_generated_specs.py assigns them in
# turn to the accepted specs that train, so each ending gets an equal share of them (a stratified sample).
ENDINGS = ("succeed", "succeed-no-summary", "fail-worker", "delete-tfjob", "watch")


# ---- drawing them again ---------------------------------------------------------------------------------

PHASES = (Phase.explicit, Phase.generate)  # no shrinking: a failure names its spec, and CI stays bounded


def reproducible(examples: int) -> Callable[[Any], Any]:
    """@seed(SEED) and the settings both property tests draw with (apply below @given)."""

    def apply(test: Any) -> Any:
        test = settings(
            max_examples=examples,
            derandomize=True,  # overridden by the seed below; kept so that removing the seed stays deterministic
            database=None,
            deadline=None,
            phases=PHASES,
            # filter_too_much: the driven test rejects the specs the API server refused (they are not its examples)
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                   HealthCheck.filter_too_much],
        )(test)
        return seed(SEED)(test)

    return apply


def draw_settings(examples: int) -> dict[str, Any]:
    """What reproduces the draw, for the ledger (and the report)."""
    return {
        "hypothesis": hypothesis.__version__,
        "seed": SEED,
        "max_examples": examples,
        "derandomize": True,
        "database": None,
        "phases": [p.name for p in PHASES],
        "local_constants": "pinned off",
    }


@contextmanager
def pinned_draws() -> Iterator[None]:
    """Hypothesis without the constants of local modules: the draw depends on the seed, the strategies and
    the hypothesis version only (not on dtr_operator's source, nor on which modules earlier tests imported)."""
    from hypothesis.internal.conjecture import providers

    if not hasattr(providers, "_get_local_constants") or not hasattr(providers, "CONSTANTS_CACHE"):
        raise RuntimeError(
            f"hypothesis {hypothesis.__version__} no longer has providers._get_local_constants/CONSTANTS_CACHE: "
            "see how it draws local constants now, or the recorded seed may not reproduce the specs"
        )
    original = providers._get_local_constants
    empty = providers.Constants()
    providers.CONSTANTS_CACHE.cache.clear()  # choices cached with the constants of earlier draws
    providers._get_local_constants = lambda: empty
    try:
        yield
    finally:
        providers._get_local_constants = original
        providers.CONSTANTS_CACHE.cache.clear()


# ---- reading refusals and sorting specs into strata -------------------------------------------------------

# A field path in the API server's (or the parser's) message: spec.training.epochs, spec.tolerations[0].operator.
_FIELD = re.compile(r"\bspec(?:\.[A-Za-z][A-Za-z0-9_]*|\[\d+\])+")
# Maps whose keys are the user's data: a refusal of spec.podLabels.team counts as spec.podLabels.
MAPS = ("spec.nodeSelector", "spec.podLabels", "spec.podAnnotations", "spec.resources.limits",
        "spec.resources.requests")  # fmt: skip


def field_of(path: str) -> str:
    """A named path as a stratum: list indices dropped, map keys cut off."""
    path = re.sub(r"\[\d+\]", "", path)
    return next((m for m in MAPS if path.startswith(m + ".")), path)


def named_fields(message: str) -> list[str]:
    """The `spec.` fields a refusal names, in order, once each (empty: it names none)."""
    return list(dict.fromkeys(field_of(f) for f in _FIELD.findall(message)))


def stratum(spec: dict[str, Any]) -> str:
    """What an accepted spec leads to before the suite does anything: the run's path."""
    if (spec.get("storage") or {}).get("claimName"):
        return "waits for its claim (storage.claimName)"
    if spec.get("suspend") is True:
        return "created suspended"
    if spec.get("queueName"):
        return "queued (queueName)"
    return "trains"
