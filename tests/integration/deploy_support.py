"""Helpers for the deploy tests (test_deploy*.py): the rendered manifests, installing one mode, reading a
Dockerfile's stages, and driving one run to Succeeded against the local control plane.
"""

from __future__ import annotations

import json
import re
import string
import subprocess
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import yaml

from devcluster.controlplane import stop_child
from support.cluster import KUBECTL, Cluster
from support.wait import wait_for

REPO = Path(__file__).resolve().parents[2]
SA_NAMESPACE = "dtr-system"
SA_NAME = "dtr-operator"
SA_USER = f"system:serviceaccount:{SA_NAMESPACE}:{SA_NAME}"
SERVED_NAMESPACE = "dtr-runs"  # deploy/namespaced/
# The API's refusal names the user; in a JSON log line its quotes are escaped.
RBAC_DENIAL = re.compile(rf'User \\*"{re.escape(SA_USER)}\\*" cannot')


@dataclass(frozen=True)
class Mode:
    name: str
    kustomization: Path
    served_namespace: str | None  # None = all namespaces


CLUSTER_MODE = Mode("cluster", REPO / "deploy", None)
NAMESPACED_MODE = Mode("namespaced", REPO / "deploy" / "namespaced", SERVED_NAMESPACE)
MODES = (CLUSTER_MODE, NAMESPACED_MODE)


# ---------------------------------------------------------------- manifests


def render(kustomization: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize DIR` as a list of objects, in kustomize's output order."""
    proc = subprocess.run(
        [KUBECTL, "kustomize", str(kustomization)], capture_output=True, text=True, check=False, timeout=60
    )
    assert proc.returncode == 0, f"kubectl kustomize {kustomization} failed: {proc.stderr.strip()}"
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def only(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''} in the rendered manifests, found {len(found)}"
    return found[0]


def operator_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (container,) = only(docs, "Deployment", "dtr-operator")["spec"]["template"]["spec"]["containers"]
    return container


def as_yaml(docs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


def rbac_objects(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a mode's teardown removes: everything but the CRD and the Namespaces."""
    return [d for d in docs if d["kind"] not in ("CustomResourceDefinition", "Namespace")]


def can_i(cluster: Cluster, verb: str, resource: str, namespace: str | None, subresource: str = "") -> bool:
    """`kubectl auth can-i ... --as=<the operator's ServiceAccount>` (None = all namespaces)."""
    where = ["--all-namespaces"] if namespace is None else ["-n", namespace]
    extra = [f"--subresource={subresource}"] if subresource else []
    proc = cluster.kubectl("auth", "can-i", verb, resource, *where, *extra, f"--as={SA_USER}", check=False)
    answer = proc.stdout.strip()
    assert answer in ("yes", "no"), f"kubectl auth can-i {verb} {resource}: {proc.stdout}{proc.stderr}"
    return answer == "yes"


@contextmanager
def installed_mode(cluster: Cluster, mode: Mode) -> Iterator[Mode]:
    """`kubectl apply -k` of one mode, for real; its RBAC and Deployment are removed afterwards
    (the CRD and the namespaces stay: other tests of the session use the CRD)."""
    docs = render(mode.kustomization)
    cluster.kubectl("apply", "-k", str(mode.kustomization), timeout=120)
    for quota in [d for d in docs if d["kind"] == "ResourceQuota"]:
        settle_quota(cluster, quota)
    # The RBAC authorizer's caches follow the bindings within a moment.
    wait_for(lambda: can_i(cluster, "list", "tfjobs.kubeflow.org", mode.served_namespace or "default"),
             f"the {mode.name} RBAC to take effect")  # fmt: skip
    try:
        yield mode
    finally:
        cluster.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=as_yaml(rbac_objects(docs)))


RUNS_COUNTED = "count/disttrainingruns.distml.dev"


def settle_quota(cluster: Cluster, quota: dict[str, Any], timeout: float = 120) -> None:
    """A run quota counted before any run is made, as deploy/install.sh's settle_run_quotas does it: made again every
    15 s until Kubernetes' quota controller, which discovered the CRD after the quota was made, counts it (else it
    would at its next full resync, 5 min, and refuse every run until then)."""
    meta = quota["metadata"]
    tries = 0

    def counted() -> bool:
        nonlocal tries
        tries += 1
        got = cluster.kubectl_json("get", "resourcequota", meta["name"], "-n", meta["namespace"])
        used = (got.get("status") or {}).get("used") or {}
        if RUNS_COUNTED in used and all(k in used for k in quota["spec"]["hard"]):  # runs and sweeps alike
            return True
        if tries % 15 == 0:
            cluster.kubectl("replace", "--force", "-f", "-", input=as_yaml([quota]))
        return False

    wait_for(counted, f"ResourceQuota {meta['namespace']}/{meta['name']} to count runs", timeout=timeout, interval=1)


def service_account_cluster(cluster: Cluster, where: Path) -> Cluster:
    """The cluster as the operator's ServiceAccount sees it: a token, no admin credentials."""
    token = cluster.kubectl("create", "token", SA_NAME, "-n", SA_NAMESPACE, "--duration=30m").stdout.strip()
    as_operator = cluster.as_token(token, where)
    whoami = json.loads(as_operator.kubectl("auth", "whoami", "-o", "json").stdout)
    assert whoami["status"]["userInfo"]["username"] == SA_USER
    return as_operator


# ---------------------------------------------------------------- Dockerfiles


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: FROM, RUN, COPY, ...
    args: str


@dataclass(frozen=True)
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction]

    def all(self, keyword: str) -> list[str]:
        return [i.args for i in self.instructions if i.keyword == keyword]


def parse_dockerfile(text: str) -> list[Stage]:
    """Stages of a Dockerfile: continuation lines joined, comments and blank lines dropped."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):  # also a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    stages: list[Stage] = []
    global_args: dict[str, str] = {}  # ARGs before the first FROM: only FROM lines may use them
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "ARG" and not stages:
            name, _, default = args.strip().partition("=")
            global_args[name] = string.Template(default).safe_substitute(global_args)
        elif keyword == "FROM":
            words = string.Template(args).safe_substitute(global_args).split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name, []))
        else:
            assert stages, f"instruction before FROM: {line}"
            stages[-1].instructions.append(Instruction(keyword, args.strip()))
    return stages


SUMMARY = {"loss": 0.08, "accuracy": 0.975, "epochs": 2, "examplesPerSecond": 812.5,
           "modelPath": "/mnt/dtr/models/{name}/1", "modelVersion": 1}  # fmt: skip


def operator_flags(docs: list[dict[str, Any]], liveness: int, metrics: int) -> tuple[list[str], dict[str, str]]:
    """The rendered Deployment's args for `dtr operator` (ports moved to free ones) and its env."""
    container = operator_container(docs)
    ports = {"--liveness-port": liveness, "--metrics-port": metrics}
    args = []
    for arg in container["args"]:
        flag = arg.split("=")[0]
        args.append(f"{flag}={ports[flag]}" if flag in ports else arg)
    return args, {e["name"]: e["value"] for e in container.get("env", [])}


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def finish_pod(cluster: Cluster, namespace: str, pod: str, image: str, message: str) -> None:
    """What a kubelet writes when the tensorflow container exits 0 (no kubelet runs here)."""
    terminated = {"exitCode": 0, "reason": "Completed", "message": message, "startedAt": utc_now(),
                  "finishedAt": utc_now()}
    container = {"name": "tensorflow", "image": image, "imageID": "", "restartCount": 0, "ready": False,
                 "state": {"terminated": terminated}}  # fmt: skip
    body = {"status": {"phase": "Succeeded", "startTime": utc_now(), "containerStatuses": [container]}}
    cluster.kubectl("patch", "pod", pod, "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", json.dumps(body))  # fmt: skip


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def operator_completes_a_run(
    cluster: Cluster,
    start: Callable[[IO[str]], subprocess.Popen[bytes]],
    ports: tuple[int, int],
    run_ns: str,
    image: str,
    log_path: Path,
) -> str:
    """Starts the operator (start(log) -> process), checks its health and metrics endpoints, creates a
    run (as admin), waits for the TFJob and PVC, finishes the worker pods as a kubelet would, and
    waits for the run to be Succeeded with the chief's metrics. Returns the operator's log."""
    k = cluster.kubectl
    liveness, metrics = ports
    name = f"deploy-{uuid.uuid4().hex[:6]}"
    with log_path.open("w") as log:
        proc = start(log)
    try:
        wait_for(lambda: http_ok(f"http://127.0.0.1:{liveness}/healthz") or proc.poll() is not None,
                 "the operator's liveness endpoint", timeout=60)  # fmt: skip
        assert proc.poll() is None, f"the operator exited ({proc.returncode}):\n{log_path.read_text()[-4000:]}"
        assert http_ok(f"http://127.0.0.1:{metrics}/metrics")

        run_doc = {"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingRun",
                   "metadata": {"name": name, "namespace": run_ns},
                   "spec": {"workers": 2, "training": {"dataset": "digits", "epochs": 2},
                            "disruption": {"protect": True}}}  # fmt: skip
        cluster.create(run_doc)
        uid = k("get", "dtr", name, "-n", run_ns, "-o", "jsonpath={.metadata.uid}").stdout

        def children() -> tuple[dict[str, Any], dict[str, Any]] | None:
            job = k("get", "tfjob", name, "-n", run_ns, "-o", "json", "--ignore-not-found").stdout
            pvc = k("get", "pvc", f"{name}-data", "-n", run_ns, "-o", "json", "--ignore-not-found").stdout
            return (json.loads(job), json.loads(pvc)) if job.strip() and pvc.strip() else None

        job, pvc = wait_for(children, f"TFJob and PVC of {name}", timeout=60)
        assert job["metadata"]["ownerReferences"][0]["uid"] == uid
        assert pvc["metadata"]["labels"]["distml.dev/run"] == name
        (container,) = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
        assert container["image"] == image

        # The training-operator makes the worker pods; finish them as a kubelet would.
        def pods() -> list[str] | None:
            names = k("get", "pods", "-n", run_ns, "-l", f"training.kubeflow.org/job-name={name}",
                      "-o", "jsonpath={.items[*].metadata.name}").stdout.split()  # fmt: skip
            return sorted(names) if len(names) == 2 else None

        summary = json.dumps({**SUMMARY, "modelPath": SUMMARY["modelPath"].format(name=name)})
        for pod in wait_for(pods, f"the 2 worker pods of TFJob {name}", timeout=60):
            finish_pod(cluster, run_ns, pod, image, summary if pod.endswith("-worker-0") else "")

        def succeeded() -> dict[str, Any] | None:
            status = json.loads(k("get", "dtr", name, "-n", run_ns, "-o", "json").stdout).get("status") or {}
            return status if status.get("phase") == "Succeeded" else None

        status = wait_for(succeeded, f"run {name} to reach Succeeded", timeout=90)
        assert status["metrics"]["accuracy"] == SUMMARY["accuracy"]
        assert status["model"]["path"] == f"/mnt/dtr/models/{name}/1"
        assert status["tfJob"] == name and status["pvc"] == f"{name}-data"
        # Its PodDisruptionBudget (spec.disruption.protect), made and then let go as the ServiceAccount.
        budget = json.loads(k("get", "pdb", name, "-n", run_ns, "-o", "json").stdout)
        assert budget["metadata"]["ownerReferences"][0]["uid"] == uid
        wait_for(lambda: json.loads(k("get", "pdb", name, "-n", run_ns, "-o", "json").stdout)["spec"]["minAvailable"]
                 == 0, f"the budget of finished run {name} let go", timeout=30)  # fmt: skip
        reasons = k("get", "events", "-n", run_ns, "--field-selector", f"involvedObject.name={name}",
                    "-o", "jsonpath={.items[*].reason}").stdout.split()  # fmt: skip
        assert "Created" in reasons, f"no Created event on the run (the operator posts events): {reasons}"
        assert proc.poll() is None, "the operator died during the run"
    finally:
        stop_child(proc)
        k("delete", "dtr", name, "-n", run_ns, "--ignore-not-found", "--wait=false", check=False)
    output = log_path.read_text()
    denials = [line for line in output.splitlines() if RBAC_DENIAL.search(line)]
    assert not denials, "RBAC refused the operator something:\n" + "\n".join(denials[:5])
    assert "Traceback" not in output, output[-5000:]
    return output
