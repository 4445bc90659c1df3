"""Kueue on the real node, from its own manifests: what a shared cluster runs beside the training-operator.

build.sh builds sigs.k8s.io/kueue at KUEUE_VERSION (versions.env) and copies the module's config/ into the
cache; build_node.sh makes the image KUEUE_IMAGE from that binary, which the node imports with the others.
`install` renders upstream's config/default with kubectl's kustomize and changes only what the node needs:

- the image is ours, imported, never pulled (imagePullPolicy IfNotPresent);
- the integrations are the two this project uses, `batch/job` and `kubeflow.org/tfjob` (upstream enables
  every framework Kueue knows, whose CRDs are not installed here);
- the webhooks of the frameworks left out are left out too (as upstream's Helm chart renders only the
  enabled ones): otherwise every pod, Deployment and StatefulSet created anywhere but kube-system
  would wait on Kueue's no-op webhook, failing when Kueue is down (failurePolicy Fail);
- the two visibility APIServices are left out: an aggregated API that is not ready makes every
  discovery (kubectl, kopf) report an error, and admission does not use it;
- the manager asks for 100m CPU, not 500m: the node has two cores, which the tests' quotas divide;
- the webhook Secret comes with a CA and serving certificate made here, which Kueue's cert rotator finds
  valid and keeps: left empty, the rotator writes them and the manager waits for the kubelet to bring the
  updated Secret into its volume, about 100 s on this node (controlplane.py seeds the training-operator's
  rotator the same way).

Everything else (CRDs, RBAC, the webhooks with their internal certificates, leader election) is
upstream's, unchanged.

    python -m devcluster.kueue install|uninstall [--kubeconfig FILE]
"""

from __future__ import annotations

import argparse
import base64
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from devcluster import controlplane as cp
from devcluster.node import pinned

HERE = Path(__file__).resolve().parent
NAMESPACE = "kueue-system"
DEPLOYMENT = "kueue-controller-manager"
CONFIG_MAP = "kueue-manager-config"
CONFIG_KEY = "controller_manager_config.yaml"
WEBHOOK_SECRET = "kueue-webhook-server-cert"
# What Kueue's rotator checks the Secret against (pkg/util/cert/cert.go: caName, and the webhook Service's name).
CA_NAME = "kueue-ca"
WEBHOOK_DNS = f"kueue-webhook-service.{NAMESPACE}.svc"
CERT_KEYS = ("ca.crt", "ca.key", "tls.crt", "tls.key")
FRAMEWORKS = ("batch/job", "kubeflow.org/tfjob")
KUEUE_GROUP = "kueue.x-k8s.io"
# (API group, resource) of each framework's webhooks, for the ones FRAMEWORKS may name.
FRAMEWORK_RESOURCES = {"batch/job": ("batch", "jobs"), "kubeflow.org/tfjob": ("kubeflow.org", "tfjobs")}
MANAGER_CPU_REQUEST = "100m"
READY_TIMEOUT = 300  # seconds for the manager's rollout and its webhooks to answer


class KueueError(RuntimeError):
    """Kueue could not be installed: what failed, with kubectl's words."""


# ---- pure: upstream's manifests, adjusted for the node ---------------------------------------------


def node_manifests(docs: Iterable[dict[str, Any]], image: str, frameworks: Sequence[str] = FRAMEWORKS,
                   certs: Mapping[str, str] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Upstream's config/default documents with the changes the module docstring lists, nothing else; certs:
    the webhook Secret's data (base64, CERT_KEYS), else it stays empty as upstream ships it."""
    out = []
    for doc in docs:
        if not doc:
            continue
        kind = doc.get("kind")
        if kind == "APIService":
            continue
        if kind == "Deployment" and doc["metadata"]["name"] == DEPLOYMENT:
            doc = _manager(doc, image)
        elif kind == "ConfigMap" and doc["metadata"]["name"] == CONFIG_MAP:
            doc = _config(doc, frameworks)
        elif kind == "Secret" and doc["metadata"]["name"] == WEBHOOK_SECRET and certs:
            doc["data"] = dict(certs)
        elif kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            kept = {FRAMEWORK_RESOURCES[f] for f in frameworks}
            doc["webhooks"] = [w for w in doc["webhooks"] if _serves(w, kept)]
        out.append(doc)
    return out


def _manager(doc: dict[str, Any], image: str) -> dict[str, Any]:
    [container] = [c for c in doc["spec"]["template"]["spec"]["containers"] if c["name"] == "manager"]
    container["image"] = image
    container["imagePullPolicy"] = "IfNotPresent"
    container.setdefault("resources", {}).setdefault("requests", {})["cpu"] = MANAGER_CPU_REQUEST
    return doc


def _serves(webhook: dict[str, Any], kept: set[tuple[str, str]]) -> bool:
    """Whether a webhook is Kueue's own (its API group) or one of the kept frameworks'."""
    for rule in webhook.get("rules") or []:
        for group in rule.get("apiGroups") or []:
            if group == KUEUE_GROUP or any((group, r) in kept for r in rule.get("resources") or []):
                return True
    return False


def _config(doc: dict[str, Any], frameworks: Sequence[str]) -> dict[str, Any]:
    config = yaml.safe_load(doc["data"][CONFIG_KEY])
    config.setdefault("integrations", {})["frameworks"] = list(frameworks)
    doc["data"][CONFIG_KEY] = yaml.safe_dump(config, sort_keys=False)
    return doc


# ---- the shell ----------------------------------------------------------------------------------------


def config_dir(cache: Path, version: str) -> Path:
    """The module's config/ that build.sh copied, at the pinned version."""
    root = cache / "kueue"
    have = (root / "version").read_text().strip() if (root / "version").exists() else ""
    if have != version or not (root / "config" / "default").is_dir():
        raise KueueError(f"{root}/config is missing or not {version}: run `bash devcluster/build.sh kueue`")
    return root / "config"


def kubectl(kubeconfig: Path, *args: str, input: str | None = None, timeout: float = 300, check: bool = True
            ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    proc = subprocess.run([cp.KUBECTL, *args], input=input, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip
    if check and proc.returncode != 0:
        raise KueueError(f"kubectl {' '.join(args[:3])} failed: {proc.stderr.strip()[-1500:]}")
    return proc


def install(kubeconfig: Path, cache: Path | None = None, log=print) -> float:
    """Apply Kueue and wait until its webhooks answer; the seconds it took."""
    t0 = time.monotonic()
    docs = _manifests(kubeconfig, cache, _certs(kubeconfig))
    # Server-side: the CRDs are too big for client-side apply's last-applied annotation.
    kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", "-",
            input=yaml.safe_dump_all(docs, sort_keys=False))  # fmt: skip
    kubectl(kubeconfig, "-n", NAMESPACE, "rollout", "status", f"deployment/{DEPLOYMENT}",
            f"--timeout={READY_TIMEOUT}s", timeout=READY_TIMEOUT + 30)  # fmt: skip
    _wait_for_webhooks(kubeconfig, t0 + READY_TIMEOUT)
    seconds = time.monotonic() - t0
    log(f"kueue {_pins()['KUEUE_VERSION']} ready in {seconds:.0f}s (integrations: {', '.join(FRAMEWORKS)})")
    return seconds


def _pins() -> dict[str, str]:
    return pinned(HERE / "versions.env")


def _manifests(kubeconfig: Path, cache: Path | None, certs: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Upstream's config/default of the pinned version, rendered by kubectl's kustomize, adjusted for the node."""
    pins = _pins()
    config = config_dir(cp.default_cache(cache), pins["KUEUE_VERSION"])
    rendered = kubectl(kubeconfig, "kustomize", str(config / "default")).stdout
    return node_manifests(yaml.safe_load_all(rendered), pins["KUEUE_IMAGE"], certs=certs)


def _certs(kubeconfig: Path) -> dict[str, str]:
    """The webhook Secret's data: what a running Kueue already has (a second install keeps it), else new."""
    proc = kubectl(kubeconfig, "-n", NAMESPACE, "get", "secret", WEBHOOK_SECRET, "-o", "json", check=False)
    data = (yaml.safe_load(proc.stdout) or {}).get("data") or {} if proc.returncode == 0 else {}
    if all(data.get(k) for k in CERT_KEYS):
        return {k: data[k] for k in CERT_KEYS}
    with tempfile.TemporaryDirectory(prefix="dtr-kueue-pki.") as tmp:
        pki = Path(tmp)
        cp.make_ca(pki, "ca", CA_NAME, rsa_pkcs1=True, san=f"DNS:{CA_NAME}")
        cp.make_leaf(pki, "ca", "tls", f"/CN={WEBHOOK_DNS}", "serverAuth", [f"DNS:{WEBHOOK_DNS}"])
        return {k: base64.b64encode((pki / k).read_bytes()).decode() for k in CERT_KEYS}


def _wait_for_webhooks(kubeconfig: Path, deadline: float) -> None:
    """Until the webhooks admit an object: the manager is Ready before its certificates reach the webhook
    configurations (internal cert management), and a create in that window is refused."""
    probe = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
             "metadata": {"name": "dtr-kueue-probe"}}  # fmt: skip
    last = ""
    while time.monotonic() < deadline:
        try:
            kubectl(kubeconfig, "apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(probe), timeout=30)
            return
        except KueueError as err:
            last = str(err)
        time.sleep(2)
    raise KueueError(f"Kueue's webhooks did not answer within {READY_TIMEOUT}s: {last}")


def uninstall(kubeconfig: Path, cache: Path | None = None) -> None:
    docs = _manifests(kubeconfig, cache)
    kubectl(kubeconfig, "delete", "--ignore-not-found", "--wait=false", "-f", "-",
            input=yaml.safe_dump_all(docs, sort_keys=False))  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster.kueue", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("install", "uninstall"))
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG", ""),
                        help="the cluster's kubeconfig (default: $KUBECONFIG)")  # fmt: skip
    args = parser.parse_args(argv)
    if not args.kubeconfig:
        print("kueue: no kubeconfig: pass --kubeconfig or set KUBECONFIG", file=sys.stderr)
        return 2
    try:
        if args.command == "install":
            install(Path(args.kubeconfig), log=lambda msg: print(msg, file=sys.stderr))
        else:
            uninstall(Path(args.kubeconfig))
    except KueueError as err:
        print(f"kueue: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
