"""Attacks on the real API server (issue 39, item 8): what a teammate with the `edit` role (the role docs/operator.md
tells an admin to give a team) can try against a run in her namespace, with `dtr operator` of this checkout as a
process and the training-operator as in the integration tier. No kubelet runs: the test writes pods' statuses as one
would (what her container, and the run's workers, would have reported). Each attack is recorded in the ledger
(docs/reliability.md, "Attacks"), beside test_attacks.py's, which run on the real node with the installed images.

- R8, a forged chief: a finished pod labelled as the run's worker 0, owned by nothing, whose termination message
  claims accuracy 0.99 and a model path: the run's status must come from its own chief only.
- R3, the run's NetworkPolicy taken away: deleted, widened (`ingress: [{}]`), or its label taken off by her: the
  policy must be back within seconds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from dtr_operator.builders import network_policy_spec
from ledger import Ledger, Record

from support.api import Api
from support.cluster import Cluster
from support.operator import IMAGE, OperatorProcess
from support.wait import poll, wait_for, wait_status

TEAMMATE = "eve@example.com"
RESTORE_SECONDS = 10
HONEST = {"loss": 0.31, "accuracy": 0.91, "epochs": 3, "examplesPerSecond": 120.0,
          "modelPath": "/mnt/dtr/models/victim/1", "modelVersion": 1}  # fmt: skip
FORGED = {"loss": 0.01, "accuracy": 0.99, "epochs": 3, "examplesPerSecond": 9999.0,
          "modelPath": "/mnt/dtr/models/victim/7", "modelVersion": 7}  # fmt: skip
WHERE = "the real API server; the operator as a process, the test as the kubelet"


@pytest.fixture
def api(control_plane: Cluster) -> Api:
    return Api.from_kubeconfig(str(control_plane.kubeconfig))


@pytest.fixture
def operator(control_plane: Cluster, namespace: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    op = OperatorProcess(namespace, tmp_path / "operator.log", control_plane.kubeconfig)
    op.start()
    yield op
    code = op.stop()
    assert "Traceback" not in op.text(), op.tail(80)
    assert code in (0, None), f"the operator exited with {code}:\n{op.tail()}"


@pytest.fixture
def teammate(control_plane: Cluster, namespace: str) -> Callable[..., Any]:
    """kubectl as TEAMMATE, who holds the `edit` ClusterRole in the namespace (a RoleBinding, as docs/operator.md's
    "Access for the people who use runs" has an admin give it)."""
    control_plane.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                          "metadata": {"name": "team-edit", "namespace": namespace},
                          "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                          "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                        "name": TEAMMATE}]})  # fmt: skip

    def as_teammate(*args: str, input: str | None = None) -> Any:
        return control_plane.kubectl(*args, "-n", namespace, f"--as={TEAMMATE}", input=input, check=False)

    return as_teammate


def create(api: Api, namespace: str, name: str, spec: dict[str, Any]) -> None:
    code, message = api.create_run(namespace, name, spec)
    assert code == 201, message


# ---- R8: a pod labelled as the run's chief -----------------------------------------------------------------


def forged_chief(name: str, run: str) -> dict[str, Any]:
    """Worker 0 as the teammate makes it: the labels the operator used to find the chief by, no owner, the container
    named as the trainer's (whose termination message the status reads); restricted, as her namespace may demand."""
    labels = {"training.kubeflow.org/job-name": run, "training.kubeflow.org/replica-type": "worker",
              "training.kubeflow.org/replica-index": "0", "distml.dev/run": run}  # fmt: skip
    write = f"open('/dev/termination-log', 'w').write({json.dumps(json.dumps(FORGED))})"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                         "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{"name": "tensorflow", "image": IMAGE, "command": ["python", "-c", write],
                                     "securityContext": {"allowPrivilegeEscalation": False,
                                                         "capabilities": {"drop": ["ALL"]}}}]}}  # fmt: skip


def test_a_teammates_pod_labelled_as_the_chief_changes_nothing(
    control_plane: Cluster, api: Api, namespace: str, operator: OperatorProcess, teammate: Callable[..., Any],
    ledger: Ledger,
) -> None:  # fmt: skip
    create(api, namespace, "victim", {"workers": 2})
    workers = wait_for(lambda: len(p := api.pods(namespace, "victim")) == 2 and p, "the run's two worker pods")
    made = teammate("create", "-f", "-", input=json.dumps(forged_chief("victim-chief", "victim")))
    assert made.returncode == 0, f"the `edit` role may create pods: {made.stderr}"
    # Her container ran and exited with its message (the kubelet's report); it lists before the workers, by name.
    api.set_pod_terminated(namespace, "victim-chief", 0, json.dumps(FORGED))
    api.set_pod_terminated(namespace, workers[0].metadata.name, 0, json.dumps(HONEST))
    api.set_pod_terminated(namespace, workers[1].metadata.name, 0, None)
    st = wait_status(lambda: api.status(namespace, "victim"), "run victim to succeed", 120, phase="Succeeded")
    seen = json.dumps(st)
    ok = (st.get("metrics", {}).get("accuracy") == HONEST["accuracy"] and (st.get("model") or {}).get("path") ==
          HONEST["modelPath"] and FORGED["modelPath"] not in seen and "0.99" not in seen)  # fmt: skip
    ledger.add(Record(area="attack", case="R8-forged-chief: a teammate (`edit`) makes a finished pod labelled as the "
                      "run's worker 0, owned by nothing, whose termination message claims accuracy 0.99 and model "
                      "version 7", tried=1, correct=int(ok),
                      user_sees=f"{st.get('phase')} {st.get('reason')}: {st.get('message')}; metrics.accuracy "
                                f"{st.get('metrics', {}).get('accuracy')}",
                      detail={"finding": "R8", "refused_by": "operator", "reason": "own pods only",
                              "where": WHERE}))  # fmt: skip
    assert ok, st


# ---- R3: the run's NetworkPolicy taken away ----------------------------------------------------------------


def policy(control_plane: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    proc = control_plane.kubectl("get", "networkpolicy", name, "-n", namespace, "-o", "json", "--ignore-not-found")
    return json.loads(proc.stdout) if proc.stdout.strip() else None


def held(control_plane: Cluster, namespace: str, name: str, not_uid: str = "") -> dict[str, Any] | None:
    found = policy(control_plane, namespace, name)
    ok = found is not None and found["spec"] == network_policy_spec(name) and found["metadata"]["uid"] != not_uid
    return found if ok and found["metadata"].get("labels", {}).get("distml.dev/run") == name else None


ATTEMPTS = [  # (id, what she does, kubectl args)
    ("R3-policy-deleted", "deletes the run's NetworkPolicy", ("delete", "networkpolicy", "guarded")),
    ("R3-policy-widened", "widens the run's NetworkPolicy to `ingress: [{}]` (everything from everywhere)",
     ("patch", "networkpolicy", "guarded", "--type=merge", "-p", '{"spec":{"ingress":[{}]}}')),
    ("R3-policy-unlabelled", "takes the run label off its NetworkPolicy (out of the operator's watch) and, in the "
     "same write, widens it to every pod of the namespace (`podSelector: {}`)",
     ("patch", "networkpolicy", "guarded", "--type=json", "-p",
      '[{"op":"remove","path":"/metadata/labels/distml.dev~1run"},{"op":"replace","path":"/spec/podSelector",'
      '"value":{}}]')),
]  # fmt: skip


def test_a_teammate_cannot_take_the_runs_network_policy_away(
    control_plane: Cluster, api: Api, namespace: str, operator: OperatorProcess, teammate: Callable[..., Any],
    ledger: Ledger,
) -> None:  # fmt: skip
    create(api, namespace, "guarded", {"workers": 2})
    first = wait_for(lambda: held(control_plane, namespace, "guarded"), "the run's NetworkPolicy")
    results = []
    for case, what, args in ATTEMPTS:
        before = policy(control_plane, namespace, "guarded") or first
        seen = {e.metadata.name for e in api.events_for(namespace, "guarded")}
        done = teammate(*args)
        t0 = time.monotonic()
        assert done.returncode == 0, f"the `edit` role may write NetworkPolicies: {done.stderr}"
        gone = before["metadata"]["uid"] if args[0] == "delete" else ""
        back = poll(lambda gone=gone: held(control_plane, namespace, "guarded", gone), RESTORE_SECONDS + 20, 0.05)
        seconds = time.monotonic() - t0
        ok = bool(back) and seconds < RESTORE_SECONDS
        said = poll(lambda seen=seen: [e.message for e in api.events_for(namespace, "guarded")
                                       if e.reason == "NetworkPolicyRestored" and e.metadata.name not in seen], 10)
        results.append((case, ok, seconds))
        ledger.add(Record(area="attack", case=f"{case}: a teammate (`edit`) {what}", tried=1, correct=int(ok),
                          user_sees=(f"back as the operator makes it {seconds:.2f} s after her kubectl returned; "
                                     f"the run's event: {said[-1] if said else 'none'}") if back else
                                    f"not back within {RESTORE_SECONDS + 20} s",
                          detail={"finding": "R3", "refused_by": "operator", "reason": "NetworkPolicyRestored",
                                  "where": WHERE, "seconds": round(seconds, 2)}))  # fmt: skip
    job = api.tfjob(namespace, "guarded")
    assert job is not None and not job["spec"]["runPolicy"].get("suspend"), "restored: the workers went on"
    assert all(ok for _, ok, _ in results), results

