"""Attacks on the real API server (issue 39, item 8): what a teammate with the `edit` role (the role docs/operator.md
tells an admin to give a team) can try against a run in her namespace, with `dtr operator` of this checkout as a
process and the training-operator as in the integration tier. No kubelet runs: the test writes pods' statuses as one
would (what her container, and the run's workers, would have reported). Each attack is recorded in the ledger
(docs/reliability.md, "Attacks"), beside test_attacks.py's, which run on the real node with the installed images.

- R8, a forged chief: a finished pod labelled as the run's worker 0, owned by nothing, whose termination message
  claims accuracy 0.99 and a model path: the run's status must come from its own chief only.
- R3, the run's NetworkPolicy taken away: deleted, widened (`ingress: [{}]`), or its label taken off by her: the
  policy must be back within seconds.
- R2, a host-network pod beside the run: refused by the namespace's Pod Security; where none is enforced, the run
  says its isolation is weaker (IsolationWeakened, PodSecurityNotEnforced).
- R4, the operator's token stolen: what it may create of NetworkPolicies and TFJobs is held to the shapes the
  operator builds (deploy/base/operator-admission.yaml), so an allow-all policy or a host-network TFJob is refused,
  and of runs it deletes only a sweep's trials.
- R6, a run named like a teammate's claim: her `dtr data put NAME` names both and copies nothing.
- R1, metadata no schema bounds (kopf's and kubectl's annotations, finalizers, owner references) on a run or a
  sweep: refused by deploy/base/admission.yaml before the operator holds any of it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from dtr_operator.builders import build_network_policy, build_tfjob, network_policy_spec
from dtr_operator.podsecurity import ENFORCE_LABEL
from dtr_operator.spec import parse_run
from ledger import Ledger, Record

from support.api import Api
from support.cluster import Cluster
from support.operator import IMAGE, OperatorProcess
from support.runs import run_doc
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



# ---- R2: a host-network pod beside the run ---------------------------------------------------------------


def host_network_pod(name: str) -> dict[str, Any]:
    """A pod on its node's network: no pod selector picks it, so no NetworkPolicy stops it reaching the workers."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"hostNetwork": True, "containers": [{"name": "probe", "image": IMAGE, "command": ["sleep", "1"]}]}}


def isolation(api: Api, namespace: str, name: str) -> dict[str, Any] | None:
    return next((c for c in api.status(namespace, name).get("conditions") or [] if c["type"] == "IsolationWeakened"),
                None)  # fmt: skip


def test_a_host_network_pod_is_refused_where_pod_security_is_enforced_and_the_run_says_where_not(
    control_plane: Cluster, api: Api, namespace: str, operator: OperatorProcess, teammate: Callable[..., Any],
    ledger: Ledger,
) -> None:  # fmt: skip
    create(api, namespace, "open", {"workers": 2})
    said = wait_for(lambda: isolation(api, namespace, "open"), "the run's IsolationWeakened condition")
    ok_said = said["status"] == "True" and said["reason"] == "PodSecurityNotEnforced"
    ledger.add(Record(area="attack", case="R2-no-pod-security: a run in a namespace that enforces no Pod Security "
                      "(a teammate's host-network pod would reach its workers past its NetworkPolicy)", tried=1,
                      correct=int(ok_said), user_sees=f"condition IsolationWeakened {said['status']} "
                      f"{said['reason']}: {said['message']}",
                      detail={"finding": "R2", "refused_by": "operator (said, not refused)",
                              "reason": "PodSecurityNotEnforced", "where": WHERE}))  # fmt: skip
    control_plane.kubectl("label", "namespace", namespace, f"{ENFORCE_LABEL}=restricted")
    made = teammate("create", "-f", "-", input=json.dumps(host_network_pod("beside")))
    refused = made.returncode != 0 and "violates PodSecurity" in made.stderr and "hostNetwork" in made.stderr
    ledger.add(Record(area="attack", case="R2-host-network-pod: a teammate (`edit`) creates a host-network pod in "
                      "the run's namespace, which enforces Pod Security restricted", tried=1, correct=int(refused),
                      user_sees=made.stderr.strip()[:300] or "created",
                      detail={"finding": "R2", "refused_by": "API server (Pod Security admission)",
                              "reason": "restricted", "where": WHERE}))  # fmt: skip
    assert ok_said, said
    assert refused, made.stderr


# ---- R4: the operator's token in other hands -----------------------------------------------------------------

OPERATOR_ACCOUNT = "system:serviceaccount:dtr-system:dtr-operator"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def stolen_token(control_plane: Cluster, namespace: str) -> Iterator[Callable[..., Any]]:
    """kubectl as the operator's ServiceAccount with its RBAC in the namespace (what its ClusterRole grants there)
    and the admission policy both installs ship, as on a cluster where it is installed."""
    policy = REPO / "deploy" / "base" / "operator-admission.yaml"
    control_plane.kubectl("apply", "-f", str(policy))
    control_plane.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                          "metadata": {"name": "operator-writes", "namespace": namespace},
                          "rules": [{"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
                                     "verbs": ["get", "create", "patch"]},
                                    {"apiGroups": ["kubeflow.org"], "resources": ["tfjobs"],
                                     "verbs": ["get", "create", "patch"]},
                                    {"apiGroups": ["distml.dev"], "resources": ["disttrainingruns"],
                                     "verbs": ["get", "create", "patch", "delete"]}]})  # fmt: skip
    control_plane.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                          "metadata": {"name": "operator-writes", "namespace": namespace},
                          "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                      "name": "operator-writes"},
                          "subjects": [{"kind": "ServiceAccount", "name": "dtr-operator",
                                        "namespace": "dtr-system"}]})  # fmt: skip

    def as_operator(*args: str, input: str | None = None) -> Any:
        return control_plane.kubectl(*args, "-n", namespace, f"--as={OPERATOR_ACCOUNT}", input=input, check=False)

    wait_for(lambda: as_operator("auth", "can-i", "create", "networkpolicies").stdout.strip() == "yes",
             "the RBAC to take effect")  # fmt: skip
    wait_for(lambda: policy_in_force(as_operator), "the admission policy to take effect", timeout=60, interval=0.5)
    try:
        yield as_operator
    finally:
        control_plane.kubectl("delete", "--ignore-not-found", "-f", str(policy), check=False)


def policy_in_force(as_operator: Callable[..., Any]) -> bool:
    """The API server applies a new ValidatingAdmissionPolicy within a moment, not at once: a policy owned by nothing
    (which none of the attacks below is) refused shows it is in force."""
    unowned = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "in-force"},
               "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}  # fmt: skip
    done = as_operator("create", "--dry-run=server", "-f", "-", input=json.dumps(unowned))
    return done.returncode != 0 and "operator-admission.yaml" in done.stderr


def test_a_stolen_operator_token_cannot_widen_a_runs_network_or_start_a_host_pod(
    control_plane: Cluster, api: Api, namespace: str, stolen_token: Callable[..., Any], ledger: Ledger,
) -> None:  # fmt: skip
    create(api, namespace, "target", {"workers": 2})
    run = parse_run(run_doc("target", namespace, {"workers": 2}, uid=api.run(namespace, "target")["metadata"]["uid"]))
    owner = {"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingRun", "name": "target",
             "uid": run.uid, "controller": True}  # fmt: skip
    # A policy of a name of its own, "owned" by a run of that name (the owner is only a reference), over every pod.
    wide = build_network_policy(run)
    wide["metadata"].update(name="target-open", ownerReferences=[{**owner, "name": "target-open"}])
    wide["spec"].update(podSelector={}, ingress=[{}])
    job = build_tfjob(run)
    job["metadata"].update(name="target", ownerReferences=[owner])
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["hostNetwork"] = True
    tries = [("R4-stolen-token-allow-all-policy", "creates an allow-all NetworkPolicy over the run's workers", wide),
             ("R4-stolen-token-host-network-tfjob", "creates a TFJob of the run's name whose pods use the host's "
              "network", job)]  # fmt: skip
    results = []
    attempts = [(case, what, ("create", "--dry-run=server", "-f", "-"), json.dumps(doc)) for case, what, doc in tries]
    attempts.append(("R4-stolen-token-deletes-a-run", "deletes a run that is not a sweep's trial (it may delete a "
                     "sweep's stopped trials)", ("delete", "--dry-run=server", "disttrainingrun", "target"), None))
    for case, what, argv, sent in attempts:
        done = stolen_token(*argv, input=sent)
        refused = done.returncode != 0 and "operator-admission.yaml" in done.stderr
        results.append((case, refused, done.stderr))
        ledger.add(Record(area="attack", case=f"{case}: the operator's ServiceAccount token, stolen, {what}", tried=1,
                          correct=int(refused), user_sees=done.stderr.strip()[:300] or "created",
                          detail={"finding": "R4", "refused_by": "API server (ValidatingAdmissionPolicy)",
                                  "reason": "operator-admission.yaml", "where": WHERE}))  # fmt: skip
    assert all(refused for _, refused, _ in results), results


# ---- R6: a run named like a teammate's claim ------------------------------------------------------------------


def test_a_run_named_like_a_teammates_claim_receives_nothing_she_puts(
    control_plane: Cluster, api: Api, namespace: str, teammate: Callable[..., Any], tmp_path: Path, ledger: Ledger
) -> None:
    """The teammate (`edit`) makes a run named as the victim's claim; the victim's `dtr data put NAME` then names both
    and copies nothing: no transfer pod is made (security review R6; `--claim`/`--run`: tests/unit/client)."""
    control_plane.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                          "metadata": {"name": "team-data", "namespace": namespace},
                          "spec": {"accessModes": ["ReadWriteOnce"],
                                   "resources": {"requests": {"storage": "1Mi"}}}})  # fmt: skip
    squat = run_doc("team-data", spec={"workers": 1, "suspend": True})
    users = str(Path(__file__).resolve().parents[2] / "deploy" / "users")  # `edit` creates runs once these aggregate
    control_plane.kubectl("apply", "-k", users)
    try:
        made = wait_for(lambda: (p := teammate("create", "-f", "-", input=json.dumps(squat))).returncode == 0 and p,
                        "`edit` (with deploy/users) to create the run", timeout=30, interval=1)  # fmt: skip
    finally:
        control_plane.kubectl("delete", "-k", users, "--ignore-not-found", "--wait=false", check=False)
    assert made.returncode == 0
    (tmp_path / "secret.csv").write_text("label,value\n1,2\n")
    dtr = Path(sys.executable).parent / "dtr"
    put = subprocess.run([str(dtr), "--kubeconfig", str(control_plane.kubeconfig), "data", "put", "-n", namespace,
                          "team-data", str(tmp_path / "secret.csv")],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip
    said = " ".join((put.stderr + put.stdout).split())
    pods = api.core.list_namespaced_pod(namespace).items
    ok = put.returncode != 0 and "both a DistTrainingRun" in said and "--claim team-data" in said and not pods
    ledger.add(Record(area="attack", case="R6-run-named-like-a-claim: a teammate (`edit`) makes a run named as the "
                      "victim's claim, then the victim runs `dtr data put team-data ./secret.csv`", tried=1,
                      correct=int(ok), user_sees=f"exit {put.returncode}: {said[:300]}; transfer pods {len(pods)}",
                      detail={"finding": "R6", "refused_by": "dtr (client)", "reason": "say which: --run or --claim",
                              "where": "the real API server; dtr as the victim"}))  # fmt: skip
    assert ok, (put.returncode, said, [p.metadata.name for p in pods])


# ---- R1: metadata the operator would hold ------------------------------------------------------------------------

ADMISSION = REPO / "deploy" / "base" / "admission.yaml"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# What the API server itself admits beyond the CRD's schema (annotations up to 256 KiB in all; finalizers and owner
# references without a bound): each about 200 KB, so that a few hundred would cost the shared operator its memory.
HEAVY = {
    "kopf-annotations": ("200 KB of annotations under kopf.zalando.org/ (the operator's own prefix)",
                         {"annotations": {"kopf.zalando.org/last-handled-configuration": "v" * 200_000}}),
    "last-applied": ("200 KB of kubectl's last-applied-configuration",
                     {"annotations": {LAST_APPLIED: "v" * 200_000}}),
    "finalizers": ("1000 finalizers (200 KB)", {"finalizers": [f"f{i:04d}.{'.'.join(['x' * 60] * 3)}.example.com/f"
                                                               for i in range(1000)]}),
    "owner-references": ("1000 ownerReferences (200 KB)", {"ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": f"owner-{i:04d}-{'o' * 100}",
         "uid": f"00000000-0000-0000-0000-{i:012d}"} for i in range(1000)]}),
}  # fmt: skip


@pytest.fixture(scope="module")
def metadata_policy(control_plane: Cluster) -> Iterator[None]:
    """Applied once for both kinds: deleted and applied again between them, the API server's policy cache may still
    hold the old policy when the probe is refused, then drop it (kubernetes/kubernetes#132502)."""
    control_plane.kubectl("apply", "-f", str(ADMISSION))
    users = str(REPO / "deploy" / "users")  # `edit` creates runs and sweeps once these aggregate
    control_plane.kubectl("apply", "-k", users)
    try:
        yield
    finally:
        control_plane.kubectl("delete", "-k", users, "--ignore-not-found", "--wait=false", check=False)
        control_plane.kubectl("delete", "--ignore-not-found", "-f", str(ADMISSION), check=False)


def refused_by_policy(done: subprocess.CompletedProcess[str]) -> bool:
    return done.returncode != 0 and "deploy/base/admission.yaml" in done.stderr


def heavy_doc(kind: str, name: str, metadata: dict[str, Any]) -> dict[str, Any]:
    if kind == "DistTrainingRun":
        return run_doc(name, spec={"workers": 1, "suspend": True}, **metadata)
    return {"apiVersion": "distml.dev/v1alpha1", "kind": kind, "metadata": {"name": name, **metadata},
            "spec": {"template": {"spec": {}}, "space": {"width": {"choice": [8, 16]}},
                     "objective": {"metric": "val_accuracy"}}}  # fmt: skip


@pytest.mark.parametrize("kind", ["DistTrainingRun", "DistTrainingSweep"])
def test_a_teammates_heavy_metadata_is_refused_before_the_operator_holds_it(
    control_plane: Cluster, namespace: str, teammate: Callable[..., Any], metadata_policy: None, kind: str,
    ledger: Ledger,
) -> None:  # fmt: skip
    """The teammate (`edit`) creates runs and sweeps whose metadata, which no schema bounds, is each about 200 KB:
    deploy/base/admission.yaml refuses every one (review R1; the bounds themselves, at and over: the integration
    tier's test_operator_crd_bounds). Sent as she would with `kubectl create --raw` (plain `kubectl create` writes
    its own last-applied-configuration)."""
    plural = {"DistTrainingRun": "disttrainingruns", "DistTrainingSweep": "disttrainingsweeps"}[kind]
    path = f"/apis/distml.dev/v1alpha1/namespaces/{namespace}/{plural}"

    def send(name: str, metadata: dict[str, Any]) -> Any:
        return teammate("create", "--raw", path, "-f", "-", input=json.dumps(heavy_doc(kind, name, metadata)))

    # Her rights first (deploy/users aggregates into `edit` a moment after it is applied), with light metadata.
    wait_for(lambda: send(f"light-{uuid.uuid4().hex[:6]}", {}).returncode == 0, f"`edit` to create a {kind}",
             timeout=30, interval=1)  # fmt: skip
    # A new name each time: a probe created before the policy is in force would make the next one's AlreadyExists
    # look like a refusal (CI, 1 run in 4).
    wait_for(lambda: refused_by_policy(send(f"probe-{uuid.uuid4().hex[:6]}",
                                            {"finalizers": [f"example.com/f{i}" for i in range(9)]})),
             "the admission policy to take effect", timeout=60, interval=0.5)  # fmt: skip
    results = []
    for what, (said, metadata) in HEAVY.items():
        done = send(f"heavy-{what}", metadata)
        refused = refused_by_policy(done)
        results.append((what, refused, done.stderr[-300:]))
        ledger.add(Record(area="attack", case=f"R1-{kind[len('DistTraining'):].lower()}-{what}: a teammate (`edit`) "
                          f"creates a {kind} carrying {said}, which no schema bounds and the operator would hold",
                          tried=1, correct=int(refused), user_sees=done.stderr.strip()[:300] or "created",
                          detail={"finding": "R1", "refused_by": "API server (ValidatingAdmissionPolicy)",
                                  "reason": "admission.yaml", "where": WHERE}))  # fmt: skip
    assert all(refused for _, refused, _ in results), results
