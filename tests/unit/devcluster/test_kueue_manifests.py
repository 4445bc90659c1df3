"""devcluster.kueue.node_manifests: upstream's config/default changed only where the node needs it (the node
tier installs the real thing: tests/node/test_kueue.py)."""

from __future__ import annotations

from typing import Any

import yaml

from devcluster import kueue

IMAGE = "registry.k8s.io/kueue/kueue:v0.17.0"


def webhook(name: str, group: str, resource: str) -> dict[str, Any]:
    return {"name": name, "failurePolicy": "Fail",
            "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "resources": [resource]}]}  # fmt: skip


def upstream() -> list[dict[str, Any]]:
    config = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
              "webhook": {"port": 9443}, "integrations": {"frameworks": ["batch/job", "pod", "kubeflow.org/tfjob",
                                                                         "ray.io/rayjob"]}}  # fmt: skip
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": kueue.DEPLOYMENT},
         "spec": {"template": {"spec": {"containers": [
             {"name": "manager", "image": "us-central1-docker.pkg.dev/k8s-staging-images/kueue/kueue:main",
              "imagePullPolicy": "Always", "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}]}}}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": kueue.CONFIG_MAP},
         "data": {kueue.CONFIG_KEY: yaml.safe_dump(config)}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": kueue.WEBHOOK_SECRET}},
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
         "metadata": {"name": "v1beta2.visibility.kueue.x-k8s.io"}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
         "metadata": {"name": "kueue-mutating-webhook-configuration"},
         "webhooks": [webhook("mpod.kb.io", "", "pods"), webhook("mjob.kb.io", "batch", "jobs"),
                      webhook("mtfjob.kb.io", "kubeflow.org", "tfjobs"),
                      webhook("mpytorchjob.kb.io", "kubeflow.org", "pytorchjobs"),
                      webhook("mworkload.kb.io", "kueue.x-k8s.io", "workloads")]},
        None,  # an empty document between two `---`
    ]  # fmt: skip


def test_the_image_is_ours_never_pulled_and_the_manager_asks_for_less_cpu():
    docs = kueue.node_manifests(upstream(), IMAGE)
    [manager] = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"]
    assert (manager["image"], manager["imagePullPolicy"]) == (IMAGE, "IfNotPresent")
    assert manager["resources"]["requests"] == {"cpu": kueue.MANAGER_CPU_REQUEST, "memory": "512Mi"}


def test_only_the_tfjob_and_job_integrations_and_their_webhooks_stay_with_kueues_own():
    docs = kueue.node_manifests(upstream(), IMAGE)
    [config_map] = [d for d in docs if d["kind"] == "ConfigMap"]
    config = yaml.safe_load(config_map["data"][kueue.CONFIG_KEY])
    assert config["integrations"]["frameworks"] == ["batch/job", "kubeflow.org/tfjob"]
    assert config["webhook"] == {"port": 9443}, "the rest of upstream's configuration stays"
    [hooks] = [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
    assert [w["name"] for w in hooks["webhooks"]] == ["mjob.kb.io", "mtfjob.kb.io", "mworkload.kb.io"]


def test_the_visibility_apiservice_and_empty_documents_are_left_out_the_rest_kept_in_order():
    docs = kueue.node_manifests(upstream(), IMAGE)
    assert [d["kind"] for d in docs] == ["Namespace", "Deployment", "ConfigMap", "Secret",
                                         "MutatingWebhookConfiguration"]  # fmt: skip


def test_the_webhook_secret_is_seeded_with_the_certificates_given_else_left_as_upstream_ships_it():
    certs = {key: f"b64-{key}" for key in kueue.CERT_KEYS}
    [seeded] = [d for d in kueue.node_manifests(upstream(), IMAGE, certs=certs) if d["kind"] == "Secret"]
    assert seeded["data"] == certs
    [empty] = [d for d in kueue.node_manifests(upstream(), IMAGE) if d["kind"] == "Secret"]
    assert "data" not in empty
