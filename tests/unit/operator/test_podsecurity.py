"""Pod Security as a precondition of a run's isolation (podsecurity.py) and how the run says it (the IsolationWeakened
condition, netpolicy.exposed_status); the shell's copy of the label and levels (deploy/podsecurity.sh) agrees."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from dtr_operator import netpolicy, podsecurity
from dtr_operator.reasons import ISOLATION_CONDITION

REPO = Path(__file__).resolve().parents[3]
NOW = "2026-12-05T05:00:00Z"


def ns(level: str | None) -> dict:
    return {"metadata": {"name": "team-a", "labels": {podsecurity.ENFORCE_LABEL: level} if level else {}}}


@pytest.mark.parametrize("level", ["baseline", "restricted"])
def test_a_namespace_that_keeps_host_network_pods_out_weakens_nothing(level: str) -> None:
    assert podsecurity.weakness("team-a", ns(level)) is None


@pytest.mark.parametrize(("level", "words"), [(None, "enforces no Pod Security level"),
                                               ("privileged", "enforces Pod Security 'privileged' only"),
                                               ("Restricted", "'Restricted' only")])  # fmt: skip
def test_a_namespace_without_baseline_or_restricted_is_named_with_what_to_do(level: str | None, words: str) -> None:
    said = podsecurity.weakness("team-a", ns(level))
    assert said is not None and words in said and "team-a" in said and "hostNetwork" in said
    assert f"{podsecurity.ENFORCE_LABEL}=baseline or restricted" in said


def test_a_namespace_with_no_labels_at_all_is_weak() -> None:
    assert podsecurity.weakness("team-a", {"metadata": {"name": "team-a"}}) is not None
    assert podsecurity.weakness("team-a", {}) is not None


def condition(status: dict) -> dict | None:
    return next((c for c in status.get("conditions") or [] if c["type"] == ISOLATION_CONDITION), None)


def test_the_run_says_its_namespace_enforces_no_pod_security() -> None:
    weak = podsecurity.weakness("team-a", ns(None))
    st = netpolicy.exposed_status({}, [], NOW, 1, weak)
    cond = condition(st)
    assert cond is not None and cond["status"] == "True" and cond["reason"] == "PodSecurityNotEnforced"
    assert "team-a" in cond["message"]


def test_another_policy_and_no_pod_security_are_both_said_the_policy_as_the_reason() -> None:
    weak = podsecurity.weakness("team-a", ns("privileged"))
    st = netpolicy.exposed_status({}, ["NetworkPolicy wide admits TCP 2222 from other pods of the namespace"], NOW, 1,
                                  weak)  # fmt: skip
    cond = condition(st)
    assert cond is not None and cond["reason"] == "OtherPolicyAdmits"
    assert "NetworkPolicy wide" in cond["message"] and "'privileged'" in cond["message"]


def test_the_condition_clears_once_the_namespace_is_labelled_and_is_never_written_for_a_sound_one() -> None:
    weak = netpolicy.exposed_status({}, [], NOW, 1, podsecurity.weakness("team-a", ns(None)))
    cleared = condition(netpolicy.exposed_status(weak, [], NOW, 1, podsecurity.weakness("team-a", ns("baseline"))))
    assert cleared is not None and cleared["status"] == "False" and cleared["reason"] == "NoOtherPolicyAdmits"
    assert netpolicy.exposed_status({"phase": "Running"}, [], NOW, 1, None) == {"phase": "Running"}


def test_the_shell_lists_by_the_same_label_and_levels() -> None:
    shell = (REPO / "deploy" / "podsecurity.sh").read_text()
    label = re.search(r'PSA_ENFORCE_LABEL="([^"]+)"', shell)
    levels = re.search(r'PSA_HOLDING_LEVELS="([^"]+)"', shell)
    assert label and label.group(1) == podsecurity.ENFORCE_LABEL
    assert levels and tuple(levels.group(1).split()) == podsecurity.HOLDING_LEVELS
    # The jsonpath reads the same label (dots escaped as kubectl wants them).
    assert podsecurity.ENFORCE_LABEL.replace(".", "\\\\.") in shell


def test_the_shell_names_each_namespace_without_baseline_or_restricted(tmp_path: Path) -> None:
    """deploy/podsecurity.sh against a kubectl that answers as the API server would (its jsonpath output)."""
    kubectl = tmp_path / "kubectl"
    kubectl.write_text("#!/bin/bash\nprintf 'default\\t\\nteam-a\\trestricted\\nteam-b\\tprivileged\\n"
                       "team-c\\tbaseline\\nteam-d\\tRestricted\\n'\n")  # fmt: skip
    kubectl.chmod(0o755)
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", "source deploy/podsecurity.sh; weak_namespaces"],
                          cwd=REPO, capture_output=True, text=True, timeout=30, check=False,
                          env={"PATH": f"{tmp_path}:/usr/bin:/bin"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "default(-) team-b(privileged) team-d(Restricted)"
    weak = {n for n in ("default", "team-a", "team-b", "team-c", "team-d")
            if podsecurity.weakness(n, ns({"default": None, "team-a": "restricted", "team-b": "privileged",
                                           "team-c": "baseline", "team-d": "Restricted"}[n])) is not None}  # fmt: skip
    assert weak == {"default", "team-b", "team-d"}, "the operator's verdict is the shell's"


def test_a_refused_namespace_read_is_not_asked_again_at_once_and_says_nothing_on_the_run() -> None:
    """An older install's RBAC has no get on namespaces: the run is not told (no condition), and a second attempt
    within the read interval asks the API no second time."""
    from dtr_operator.kube import ApiError

    from support.fake_kube import FakeKube
    from support.reconciler import reconciler
    from support.runs import make_run

    kube = FakeKube()
    kube.fail("get", ApiError(403, "Forbidden", "namespaces is forbidden"), times=None,
              when=lambda args: args.get("kind") == "Namespace")  # fmt: skip
    run = make_run({"workers": 2}, uid="u-1", generation=1, resourceVersion="1")
    kube.put(run)
    rec, _ = reconciler(kube)
    rec.reconcile_run(run)
    rec.reconcile_run(kube.stored("DistTrainingRun", "mnist-cnn"))
    asked = [c for c in kube.calls if c.method == "get" and c.args.get("kind") == "Namespace"]
    assert len(asked) == 1, asked
    st = kube.stored("DistTrainingRun", "mnist-cnn").get("status") or {}
    assert not [c for c in st.get("conditions") or [] if c["type"] == "IsolationWeakened"]
