"""The attack suite (issue 26): every attack of the security review tried for real on the real node, as a
user who may only create (and read) DistTrainingRuns and ConfigMaps in one namespace (impersonated), with
the operator installed as deploy/ ships it. Each must fail or be harmless, and is recorded in the ledger
(docs/reliability.md, "Attacks").

- the catalogue (tests/reliability/attacks/*.yaml, loaded by catalogue.py): specs the API server or the
  operator must refuse by name, before anything is created;
- another namespace's pod driving a worker's TensorFlow server (the review's H1 proof of concept),
  refused by the run's NetworkPolicy, while the run's own workers still reach each other;
- user code printing crafted progress lines and writing a crafted termination message: the operator keeps
  serving every run and the run's status stays bounded and clean;
- the run's code ConfigMap replaced (deleted and created again) and a worker restarted (the review's R9): the
  new code never runs under the digest in status.code; the run fails CodeChanged;
- a run publishing under a model name that another run of the namespace owns on a claim opened to runs (the
  review's R5): refused before it trains (ModelNameOwned), the owner's versions alone on the volume.

What a teammate with the `edit` role tries against a run (a forged chief pod, the run's NetworkPolicy taken away) is
test_attacks_api.py's, on the API server with the operator of the checkout: the real node runs the installed images.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from catalogue import Attack, flag_groups, load, merged
from dtr_operator.api import CONTAINER_NAME
from ledger import Ledger, Record

from support import node as node_support
from support import runs
from support.cluster import namespace_name
from support.node import RealNode
from support.runs import SLOW_EPOCHS_MODEL, digits_run
from support.wait import poll, wait_for

real_node = node_support.real_node

MALLORY = "mallory@example.com"
ATTACKS = load()
CHILDREN = ("tfjobs", "persistentvolumeclaims", "pods", "services")
VERDICT_SECONDS = 60


def role_for_author(namespace: str) -> list[dict[str, Any]]:
    """What a team's run author holds: runs and ConfigMaps (user code) in one namespace, nothing else."""
    rules = [{"apiGroups": ["distml.dev"], "resources": ["disttrainingruns"], "verbs": ["create", "get", "list"]},
             {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "get"]}]  # fmt: skip
    meta = {"name": "run-author", "namespace": namespace}
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "run-author"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": MALLORY}]},
    ]  # fmt: skip


@pytest.fixture(scope="module")
def team(real_node: RealNode) -> Iterator[str]:
    """The attacker's namespace (restricted Pod Security), with the author's role bound to MALLORY."""
    name = namespace_name("attacks")
    real_node.create_restricted_namespace(name)
    for doc in role_for_author(name):
        real_node.cluster.create(doc)
    yield name
    real_node.cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


def create_as_author(real_node: RealNode, namespace: str, doc: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return real_node.cluster.kubectl("create", "-n", namespace, "-f", "-", f"--as={MALLORY}",
                                     input=json.dumps(doc), check=False)  # fmt: skip


def run_name(attack: Attack) -> str:
    return f"a-{uuid.uuid4().hex[:6]}-{attack.id.lower()}"[:50].rstrip("-").replace("_", "-")


@dataclass
class Launched:
    name: str
    created: subprocess.CompletedProcess[str]


def launch(real_node: RealNode, namespace: str, attack: Attack) -> Launched:
    for obj in attack.objects:
        real_node.cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj))
    name = run_name(attack)
    base = digits_run(name, epochs=1, steps=2)
    base["spec"].pop("storage")  # the defaults: an attack's claimName may not come with a size
    return Launched(name, create_as_author(real_node, namespace, {**base, "spec": merged(base["spec"], attack.spec)}))


def configure_operator(real_node: RealNode, args: list[str]) -> None:
    """The installed operator's container args set to `args` (an admin's flags), rolled out and alone."""
    patch = [{"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": args}]
    real_node.cluster.kubectl("patch", "deployment", "dtr-operator", "-n", "dtr-system", "--type=json",
                              "-p", json.dumps(patch))  # fmt: skip
    real_node.cluster.kubectl("rollout", "status", "deployment/dtr-operator", "-n", "dtr-system",
                              "--timeout=180s", timeout=200)  # fmt: skip
    wait_for(lambda: len(real_node.names("pods", "dtr-system", node_support.OPERATOR_SELECTOR)) == 1,
             "the previous operator pod to be gone", timeout=120, interval=1)  # fmt: skip


@pytest.fixture(scope="module")
def verdicts(real_node: RealNode, team: str) -> dict[str, tuple[bool, str]]:
    """Every catalogue attack sent, a group of the same operator flags at a time (the operator decides a
    group's runs side by side, as under a real tenant), the shipped flags first and restored after."""
    shipped = real_node.cluster.kubectl_json("get", "deployment", "dtr-operator", "-n", "dtr-system")
    shipped_args = list(shipped["spec"]["template"]["spec"]["containers"][0].get("args") or [])
    groups = flag_groups(ATTACKS)
    out: dict[str, tuple[bool, str]] = {}
    try:
        for extra, attacks in groups:
            if extra:
                configure_operator(real_node, [*shipped_args, *extra])
            sent = {a.id: launch(real_node, team, a) for a in attacks}
            out.update({a.id: verdict(real_node, team, a, sent[a.id]) for a in attacks})
    finally:
        if len(groups) > 1:
            configure_operator(real_node, shipped_args)
    return out

def children(real_node: RealNode, namespace: str, run: str) -> dict[str, list[str]]:
    return {kind: real_node.names(kind, namespace, f"distml.dev/run={run}") for kind in CHILDREN}


def verdict(real_node: RealNode, namespace: str, attack: Attack, sent: Launched) -> tuple[bool, str]:
    """(refused as the catalogue says, what the author saw)."""
    if attack.refused_by == "crd":
        said = " ".join((sent.created.stderr or sent.created.stdout).split())
        return sent.created.returncode != 0 and attack.reason in said, said or "created"
    if sent.created.returncode != 0:
        return False, f"refused by the API server, not the operator: {' '.join(sent.created.stderr.split())}"
    status = poll(lambda: _failed(real_node, namespace, sent.name), VERDICT_SECONDS, interval=1) or \
        real_node.run_status(namespace, sent.name)  # fmt: skip
    made = {kind: names for kind, names in children(real_node, namespace, sent.name).items() if names}
    seen = f"{status.get('phase')} {status.get('reason')}: {status.get('message')}" + (f"; made {made}" if made else "")
    return status.get("phase") == "Failed" and status.get("reason") == attack.reason and not made, seen


def _failed(real_node: RealNode, namespace: str, name: str) -> dict[str, Any] | None:
    status = real_node.run_status(namespace, name)
    return status if status.get("phase") == "Failed" else None


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.id for a in ATTACKS])
def test_the_attack_is_refused_by_name(verdicts: dict[str, tuple[bool, str]], attack: Attack, ledger: Ledger) -> None:
    ok, seen = verdicts[attack.id]
    flags = f" (operator {' '.join(attack.operator_args)})" if attack.operator_args else ""
    ledger.add(Record(area="attack", case=f"{attack.id}: {attack.attack}{flags}", tried=1, correct=int(ok),
                      user_sees=seen, detail={"finding": attack.finding, "refused_by": attack.refused_by,
                                              "reason": attack.reason, "file": attack.source}))  # fmt: skip
    assert ok, f"{attack.id} ({attack.attack}) was not refused by {attack.refused_by} as {attack.reason!r}: {seen}"


# -- H1: another namespace's pod drives a worker's TensorFlow server

POC = """
import sys, tensorflow as tf
tf.compat.v1.disable_eager_execution()
with tf.device("/job:worker/replica:0/task:0"):
    found = tf.io.matching_files("/mnt/dtr/*/*")
config = tf.compat.v1.ConfigProto(operation_timeout_in_ms=15000)
try:
    with tf.compat.v1.Session(sys.argv[1], config=config) as s:
        print("GOT", [p.decode() for p in s.run(found)])
except Exception as e:
    print("REFUSED", type(e).__name__, str(e).splitlines()[0][:200])
"""

PEER = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], 2222), timeout=10).close()
    print("CONNECTED")
except OSError as e:
    print("REFUSED", e)
"""


def restricted_pod(name: str, image: str, argv: list[str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile":
                                         {"type": "RuntimeDefault"}},
                     "containers": [{"name": "attacker", "image": image, "imagePullPolicy": "IfNotPresent",
                                     "command": argv,
                                     "env": [{"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"}],
                                     "securityContext": {"allowPrivilegeEscalation": False,
                                                         "capabilities": {"drop": ["ALL"]}}}]}}  # fmt: skip


SLOW_EPOCHS = 100


def slow_epochs_run(real_node: RealNode, namespace: str, name: str) -> dict[str, Any]:
    """A run whose workers serve their gRPC servers through the whole test without training: its epochs after the
    first sleep (support/slow_epochs_model.py; the digits CNN trained through it instead, about 30 CPU s of the node's
    pods). The author sends the code as a ConfigMap, as `dtr submit` does."""
    real_node.cluster.kubectl("create", "configmap", f"{name}-code", "-n", namespace, f"--as={MALLORY}",
                              "--from-file", f"model.py={SLOW_EPOCHS_MODEL}")  # fmt: skip
    return runs.slow_epochs_run(name, SLOW_EPOCHS, 600)


def pod_output(real_node: RealNode, namespace: str, pod: str, timeout: float = 180) -> str:
    def done() -> str | None:
        phase = real_node.cluster.kubectl_json("get", "pod", pod, "-n", namespace)["status"].get("phase")
        if phase not in ("Succeeded", "Failed"):
            return None
        return real_node.cluster.kubectl("logs", "-n", namespace, pod, check=False).stdout or "(no output)"

    return wait_for(done, f"pod {namespace}/{pod} to finish", timeout=timeout, interval=1)


def test_another_namespace_cannot_drive_a_workers_tensorflow_server(
    real_node: RealNode, team: str, ledger: Ledger
) -> None:
    victim = "victim"
    assert create_as_author(real_node, team, slow_epochs_run(real_node, team, victim)).returncode == 0
    real_node.wait_log(team, f"{victim}-worker-0", f"epoch 1/{SLOW_EPOCHS} end", timeout=300)
    image = real_node.pod(team, f"{victim}-worker-0")["spec"]["containers"][0]["image"]
    target = f"{victim}-worker-0.{team}.svc"
    other = namespace_name("attacker")
    real_node.create_restricted_namespace(other)
    try:
        t0 = time.monotonic()
        pod = restricted_pod("poc", image, ["python", "-c", POC, f"grpc://{target}:2222"])
        real_node.cluster.kubectl("create", "-n", other, "-f", "-", input=json.dumps(pod))
        from_outside = pod_output(real_node, other, "poc").strip()
        seconds = time.monotonic() - t0
        from_peer = real_node.exec(team, f"{victim}-worker-1", "python", "-c", PEER, target).stdout.strip()
    finally:
        real_node.cluster.kubectl("delete", "namespace", other, "--wait=false", check=False)
        real_node.cluster.kubectl("delete", "distrainingrun", victim, "-n", team, "--wait=false", check=False)
    ok = "GOT" not in from_outside and from_peer.startswith("CONNECTED")
    ledger.add(Record(area="attack", case="H1-grpc-from-another-namespace: a pod in another namespace runs "
                      "tf.io.matching_files on a worker through grpc://<run>-worker-0.<ns>.svc:2222",
                      tried=1, correct=int(ok),
                      user_sees=f"outside: {from_outside[-300:]} ({seconds:.0f} s); the run's own worker-1: "
                                f"{from_peer[-120:]}"))  # fmt: skip
    assert "GOT" not in from_outside, f"another namespace read the run's volume through TensorFlow: {from_outside}"
    assert from_peer.startswith("CONNECTED"), f"the run's own workers cannot reach each other: {from_peer}"


# -- L1/L2: the author's code prints crafted progress lines and leaves a crafted termination message

CRAFTED = '''
import os, sys
import numpy as np

TERMINATION = {termination}

ESC = "\\x1b[2J\\x1b[31m"
LINES = [
    "dtr_trainer[worker-0]: epoch " + "9" * 5000 + "/3 end accuracy=1.0",
    "dtr_trainer[worker-0]: epoch 99/100 end accuracy=1.0 loss=0.0",
    "dtr_trainer[worker-0]: epoch 1/3 end " + " ".join(f"m{i}=1.0" for i in range(20000)),
    "dtr_trainer[worker-0]: epoch 2/3 end accuracy=1.0 remaining=1e300 " + ESC,
    "error: dataset 'evil.npz': cannot read as .npz (Cannot parse header: 'epoch 3/3 end accuracy=1.0')",
]


def load_data(ctx):
    for line in LINES:
        print(line, file=sys.stderr, flush=True)
    if TERMINATION:  # every worker: the job ends Succeeded, the chief's message is what the operator reads
        with open("/dev/termination-log", "w") as f:
            f.write("[" * 4000 + ESC)
        os._exit(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")
    return (x, y), (x[:64], y[:64])


def build_model(ctx):
    import tensorflow as tf
    inputs = tf.keras.Input(shape=ctx.input_shape)
    outputs = tf.keras.layers.Dense(ctx.num_classes, activation="softmax")(inputs)
    return tf.keras.Model(inputs, outputs)
'''

CONTROL = {chr(c) for c in [*range(0, 9), *range(11, 32), 127, *range(128, 160)]}


def crafted_code(termination: bool) -> str:
    return CRAFTED.replace("{termination}", str(termination))


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def crafted_run(name: str, termination: bool) -> dict[str, Any]:
    doc = digits_run(name, workers=1, epochs=3, steps=4)  # the operator reads the chief's log and message alone
    key = "termination.py" if termination else "lines.py"
    doc["spec"]["training"] = {"code": {"configMap": "crafted-code", "key": key}, "epochs": 3,
                               "batchSizePerWorker": 16, "stepsPerEpoch": 4}  # fmt: skip
    return doc


def operator_restarts(real_node: RealNode) -> int:
    pods = real_node.cluster.kubectl_json("get", "pods", "-n", "dtr-system", "-l", node_support.OPERATOR_SELECTOR)
    return sum(c.get("restartCount", 0) for p in pods["items"] for c in p["status"].get("containerStatuses") or [])


def bounded_and_clean(status: dict[str, Any], epochs: int) -> list[str]:
    """What is wrong with a status a crafted log could have written (empty: nothing)."""
    text = json.dumps(status)
    wrong = []
    if len(text) > 16384:
        wrong.append(f"status is {len(text)} bytes")
    if any(ch in CONTROL for s in strings(status) for ch in s):
        wrong.append("a control character reached the status")
    progress = status.get("progress") or {}
    if progress.get("epoch", 0) > epochs or progress.get("epochs", epochs) != epochs:
        wrong.append(f"progress believed a crafted epoch: {progress}")
    if len(progress.get("metrics") or {}) > 16:
        wrong.append(f"{len(progress['metrics'])} metrics kept")
    return wrong


def test_crafted_progress_lines_and_termination_message_mislead_nothing(
    real_node: RealNode, team: str, ledger: Ledger
) -> None:
    before = operator_restarts(real_node)
    real_node.cluster.kubectl("create", "configmap", "crafted-code", "-n", team, f"--as={MALLORY}",
                              "--from-literal", f"lines.py={crafted_code(False)}",
                              "--from-literal", f"termination.py={crafted_code(True)}")  # fmt: skip
    for name, termination in (("crafted-lines", False), ("crafted-message", True)):
        assert create_as_author(real_node, team, crafted_run(name, termination)).returncode == 0
    bystander = digits_run("bystander", workers=1, epochs=2, steps=4)
    assert create_as_author(real_node, team, bystander).returncode == 0
    seen = {name: real_node.wait_terminal(team, name, timeout=420)
            for name in ("crafted-lines", "crafted-message", "bystander")}  # fmt: skip
    restarts = operator_restarts(real_node) - before
    wrong = {name: bounded_and_clean(st, 2 if name == "bystander" else 3) for name, st in seen.items()}
    print(json.dumps(seen, indent=1)[:6000])
    ok = restarts == 0 and seen["bystander"].get("phase") == "Succeeded" and not any(wrong.values())
    ledger.add(Record(area="attack", case="L1/L2-crafted-output: the run's own code prints forged epoch lines "
                      "(a 5000-digit epoch, 99/100, 20000 metrics, ESC, remaining=1e300, the crafted .npz error) "
                      "and leaves a 4000-deep JSON termination message", tried=1, correct=int(ok),
                      user_sees="; ".join(f"{n}: {st.get('phase')} {st.get('reason')}: "
                                          f"{str(st.get('message'))[:120]}" for n, st in seen.items())
                      + f"; operator restarts {restarts}", detail={"wrong": wrong}))  # fmt: skip
    assert restarts == 0, f"the operator restarted {restarts} times"
    assert seen["bystander"].get("phase") == "Succeeded", seen["bystander"]
    assert not any(wrong.values()), wrong


# -- R9: the code's ConfigMap replaced under a running run, then a worker restarted

# The recorded code: it says it was loaded, then waits in load_data (for a file nobody creates), so the run stays
# Running with no epoch and no peer to lose while its ConfigMap is replaced.
WAITING_CODE = '''
import os, sys, time

def load_data(ctx):
    print("RECORDED CODE LOADED", file=sys.stderr, flush=True)
    while not os.path.exists(os.path.join(ctx.data_dir, "never")):
        time.sleep(1)

def build_model(ctx):
    raise RuntimeError("not reached")
'''
# What replaces it: code whose import alone would act (here, a line in the log).
REPLACED_CODE = '''
import sys
print("REPLACED CODE RUNNING", file=sys.stderr, flush=True)

def load_data(ctx):
    raise RuntimeError("not reached")

def build_model(ctx):
    raise RuntimeError("not reached")
'''


def code_configmap(code: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "r9-code"}, "data": {"model.py": code},
            "immutable": True}  # as `dtr submit` makes it: immutability stops an edit, not a delete and create


def _restarted_chief_met(real_node: RealNode, team: str, before: str) -> tuple[str, str]:
    """Once worker 0's pod is a new one (another uid than `before`): which code it met, and its log."""
    met = {"the code changed": "refused", "RECORDED CODE LOADED": "recorded", "REPLACED CODE RUNNING": "replaced"}

    def probe() -> tuple[str, str] | None:
        proc = real_node.cluster.kubectl("get", "pod", "r9-worker-0", "-n", team, "-o", "jsonpath={.metadata.uid}",
                                         check=False)  # fmt: skip
        if proc.returncode != 0 or proc.stdout in ("", before):
            return None
        text = real_node.logs(team, "r9-worker-0")
        return next(((what, text) for marker, what in met.items() if marker in text), None)

    return wait_for(probe, "worker 0's new pod to meet its code", timeout=300, interval=1)


def test_a_replaced_configmap_never_runs_under_the_recorded_digest(
    real_node: RealNode, team: str, ledger: Ledger
) -> None:
    """The run's immutable code ConfigMap deleted and created again with other code, then every worker stopped with a
    retryable exit so that the training-operator makes their pods anew (restartPolicy ExitCode; a pod deleted instead
    fails the TFJob at once: training-operator v1.9.4 recreates none). The new code must never run: on this node the
    kubelet still holds the immutable ConfigMap's recorded content (it keeps it while the run's pods use it) and the
    new pods get that; a pod that meets the new bytes (another node, the kubelet's cache gone) exits 10 before any of
    it runs and the run fails CodeChanged (that path with real trainer processes: tests/trainer/test_code_digest.py)."""
    import hashlib

    recorded = hashlib.sha256(WAITING_CODE.encode()).hexdigest()
    assert create_as_author(real_node, team, code_configmap(WAITING_CODE)).returncode == 0
    doc = digits_run("r9", epochs=3, steps=4)
    doc["spec"]["training"] = {"code": {"configMap": "r9-code"}, "epochs": 3, "batchSizePerWorker": 16,
                               "stepsPerEpoch": 4}  # fmt: skip
    doc["spec"]["restartPolicy"] = "ExitCode"
    assert create_as_author(real_node, team, doc).returncode == 0
    try:
        real_node.wait_log(team, "r9-worker-0", "RECORDED CODE LOADED", timeout=300)
        assert real_node.run_status(team, "r9")["code"]["sha256"] == recorded
        before = real_node.pod(team, "r9-worker-0")["metadata"]["uid"]
        # Someone with `edit` in the namespace (the author's role has no delete), then SIGTERM (143) through pods/exec.
        real_node.cluster.kubectl("delete", "configmap", "r9-code", "-n", team)
        real_node.cluster.kubectl("create", "-n", team, "-f", "-", input=json.dumps(code_configmap(REPLACED_CODE)))
        for pod in ("r9-worker-0", "r9-worker-1"):
            real_node.cluster.kubectl("exec", pod, "-n", team, "-c", CONTAINER_NAME, "--", "python", "-c",
                                      "import os, signal; os.kill(1, signal.SIGTERM)", check=False)  # fmt: skip
        met, logs = _restarted_chief_met(real_node, team, before)
        wait = met == "refused"  # a refused chief fails the run: its status says so once it has
        status = real_node.wait_terminal(team, "r9", timeout=420) if wait else real_node.run_status(team, "r9")
    finally:
        real_node.cluster.kubectl("delete", "distrainingrun", "r9", "-n", team, "--wait=false", check=False)
    refused = (status.get("phase"), status.get("reason")) == ("Failed", "CodeChanged")
    ok = met == "recorded" or (met == "refused" and refused)
    digest = str(status.get("code", {}).get("sha256"))[:12]
    ledger.add(Record(area="attack", case="R9-code-replaced: the run's immutable code ConfigMap deleted and created "
                      "again with other code, then its workers restarted in new pods", tried=1, correct=int(ok),
                      user_sees=f"the restarted chief met the {met} code; run {status.get('phase')} "
                                f"{status.get('reason')}; status.code {digest}"))
    assert met != "replaced", f"the replaced code ran under the recorded digest: {logs[-2000:]}"
    assert ok and status.get("code", {}).get("sha256") == recorded, (met, status)


# -- R5: another run's model name on a claim opened to runs


def claimed_run(name: str, claim: str, model: str, workers: int = 2) -> dict[str, Any]:
    doc = digits_run(name, epochs=1, steps=2, workers=workers)
    doc["spec"]["storage"] = {"claimName": claim}
    doc["spec"]["export"] = {"modelName": model}
    return doc


def test_a_run_cannot_publish_under_a_model_name_another_run_owns(
    real_node: RealNode, team: str, ledger: Ledger
) -> None:
    """The author's run names a teammate's model on the team's claim (opened to runs by its label): a served model's
    next version would be hers. The first run to export there owns the name; hers fails ModelNameOwned before it
    trains, and only the owner's version is on the volume (what a model server serves)."""
    from dtr_operator.policy import CLAIM_LABEL, CLAIM_LABEL_VALUE

    real_node.apply(team, {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                           "metadata": {"name": "team-models", "labels": {CLAIM_LABEL: CLAIM_LABEL_VALUE}},
                           "spec": {"accessModes": ["ReadWriteOnce"],
                                    "resources": {"requests": {"storage": "64Mi"}}}})  # fmt: skip
    # The teammate's run (an admin here), one worker: it only has to export; hers keeps two, each refused.
    real_node.apply(team, claimed_run("r5-owner", "team-models", "served", workers=1))
    owner = real_node.wait_terminal(team, "r5-owner", timeout=420)
    assert owner.get("phase") == "Succeeded", owner
    assert create_as_author(real_node, team, claimed_run("r5-other", "team-models", "served")).returncode == 0
    other = real_node.wait_terminal(team, "r5-other", timeout=300)
    models = real_node.volume(team, "team-models") / "models" / "served"
    versions = sorted(p.name for p in models.iterdir() if p.name.isdigit())  # beside them: the owner's record
    ok = (other.get("phase"), other.get("reason")) == ("Failed", "ModelNameOwned") and versions == ["1"]
    ledger.add(Record(area="attack", case="R5-model-name-owned: the author's run exports under a model name that "
                      "another run of the namespace owns on a claim opened to runs", tried=1, correct=int(ok),
                      user_sees=f"{other.get('phase')} {other.get('reason')}: {str(other.get('message'))[:200]}; "
                                f"versions on the claim {versions}",
                      detail={"finding": "R5", "refused_by": "trainer (every worker before training)"}))  # fmt: skip
    assert ok, (other, versions)
