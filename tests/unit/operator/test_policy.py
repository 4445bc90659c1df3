"""policy.py: what a run may ask of the cluster beyond its pods, refused by default (security review H3, M1, M4).

Pure decisions on a parsed spec; reconcile.decide turns each into a Failed run before anything is created
(tests/unit/operator/test_reconcile_decide.py), and tests/integration/test_run_author.py shows it against the API
server.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
import yaml
from dtr_operator import policy, reasons
from dtr_operator import settings as cfg
from dtr_operator.policy import Policy, claim_refusal, run_refusal
from dtr_operator.spec import parse_run

from reliability.catalogue import merged
from support.repo import REPO
from support.runs import UNIT_NAMESPACE, make_run


def refusal(spec: dict[str, Any], **allowed: Any) -> policy.Refusal | None:
    return run_refusal(parse_run(make_run(spec)), Policy(**allowed))


def test_a_run_asking_nothing_of_the_cluster_passes_the_default_policy():
    assert refusal({"workers": 2, "nodeSelector": {"pool": "gpu"},
                    "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}) is None


# ---- labels and annotations ----------------------------------------------------------------------


@pytest.mark.parametrize("field, key, reason, flag", [
    ("podLabels", "team", reasons.POD_LABEL_NOT_ALLOWED, "--allowed-pod-labels (DTR_ALLOWED_POD_LABELS)"),
    ("podAnnotations", "example.com/note", reasons.POD_ANNOTATION_NOT_ALLOWED,
     "--allowed-pod-annotations (DTR_ALLOWED_POD_ANNOTATIONS)"),
])  # fmt: skip
def test_no_label_or_annotation_key_is_allowed_by_default(field, key, reason, flag):
    got = refusal({field: {key: "v"}})
    assert got is not None and got.reason == reason
    assert f"spec.{field} key {key}" in got.message and flag in got.message and ": none;" in got.message


def test_allowed_keys_are_globs():
    allowed = {"pod_labels": ("team", "example.com/*"), "pod_annotations": ("prometheus.io/*",)}
    assert refusal({"podLabels": {"team": "ml", "example.com/cost": "a1"},
                    "podAnnotations": {"prometheus.io/scrape": "true"}}, **allowed) is None  # fmt: skip
    assert refusal({"podLabels": {"teams": "ml"}}, **allowed).reason == reasons.POD_LABEL_NOT_ALLOWED


@pytest.mark.parametrize("key", [
    "sidecar.istio.io/inject", "sidecar.istio.io/proxyImage", "sidecar.istio.io/userVolume", "istio.io/rev",
    "container.apparmor.security.beta.kubernetes.io/tensorflow", "seccomp.security.alpha.kubernetes.io/pod",
    "k8s.v1.cni.cncf.io/networks", "v1.multus-cni.io/default-network", "cni.projectcalico.org/ipAddrs",
    "vault.hashicorp.com/agent-inject", "linkerd.io/inject", "config.linkerd.io/proxy-image",
    "azure.workload.identity/use", "kubernetes.io/egress-bandwidth", "cluster-autoscaler.kubernetes.io/safe-to-evict",
    "k8s.io/x", "scheduling.k8s.io/group-name", "kueue.x-k8s.io/queue-name", "dapr.io/sidecar-image",
    "scheduling.volcano.sh/queue-name",
    # Security review R11: what `*` used to admit.
    "iam.amazonaws.com/role", "eks.amazonaws.com/role-arn", "aadpodidbinding",
    "instrumentation.opentelemetry.io/inject-python", "sidecar.opentelemetry.io/inject",
    "consul.hashicorp.com/connect-inject", "kuma.io/sidecar-injection",
    "admission.datadoghq.com/enabled", "ad.datadoghq.com/tags", "gke-gcsfuse/volumes", "karpenter.sh/do-not-disrupt",
    "ovn.kubernetes.io/logical_switch",
])  # fmt: skip
def test_keys_that_steer_add_ons_or_belong_to_kubernetes_are_refused_even_when_allowed(key):
    for field, attr in (("podLabels", "pod_labels"), ("podAnnotations", "pod_annotations")):
        value = "true" if field == "podLabels" else '[{"name": "h", "hostPath": {"path": "/"}}]'
        got = refusal({field: {key: value}}, **{attr: ("*",)})
        assert got is not None and "refused whatever the operator's flags say" in got.message, (field, key)


def test_recommended_labels_may_be_allowed():
    assert refusal({"podLabels": {"app.kubernetes.io/part-of": "fraud"}}, pod_labels=("app.kubernetes.io/*",)) is None
    assert not policy.refused_key("app.kubernetes.io/name") and policy.refused_key("node.kubernetes.io/x")


# ---- priority classes ---------------------------------------------------------------------------


def test_no_priority_class_is_allowed_by_default():
    got = refusal({"priorityClassName": "batch-low"})
    assert got is not None and got.reason == reasons.PRIORITY_CLASS_NOT_ALLOWED
    assert "spec.priorityClassName batch-low" in got.message and "--allowed-priority-classes" in got.message


def test_system_priority_classes_need_their_exact_name():
    assert refusal({"priorityClassName": "batch-low"}, priority_classes=("batch-*",)) is None
    for pattern in ("*", "system-*", "system-node-*"):
        got = refusal({"priorityClassName": "system-node-critical"}, priority_classes=(pattern,))
        assert got is not None and got.reason == reasons.PRIORITY_CLASS_NOT_ALLOWED, pattern
    assert refusal({"priorityClassName": "system-node-critical"}, priority_classes=("system-node-critical",)) is None


def test_the_operators_own_priority_class_needs_its_exact_name():
    """deploy/ gives the operator this class so that a full node evicts tenants' pods first: a `*` must not let a
    run's pods rank with it."""
    shipped = yaml.safe_load((REPO / "deploy" / "base" / "priorityclass.yaml").read_text())
    assert shipped["metadata"]["name"] == policy.OPERATOR_PRIORITY_CLASS
    for pattern in ("*", "dtr-*"):
        got = refusal({"priorityClassName": policy.OPERATOR_PRIORITY_CLASS}, priority_classes=(pattern,))
        assert got is not None and got.reason == reasons.PRIORITY_CLASS_NOT_ALLOWED, pattern
        assert "(the operator's own class only by its exact name)" in got.message
    assert refusal({"priorityClassName": "dtr-batch"}, priority_classes=("dtr-*",)) is None
    assert refusal({"priorityClassName": "dtr-operator"}, priority_classes=("dtr-operator",)) is None


def test_the_gang_schedulers_priority_class_is_held_to_the_same_list():
    got = refusal({"schedulingPolicy": {"priorityClass": "system-cluster-critical"}}, priority_classes=("*",))
    assert got is not None and "spec.schedulingPolicy.priorityClass system-cluster-critical" in got.message


def test_kueues_workload_priority_class_is_held_to_the_same_list():
    queued = {"queueName": "team-a", "workloadPriorityClass": "urgent"}
    got = refusal(queued)
    assert got is not None and "spec.workloadPriorityClass urgent" in got.message
    assert refusal(queued, priority_classes=("urgent",)) is None


# ---- tolerations --------------------------------------------------------------------------------


@pytest.mark.parametrize("toleration, words", [
    ({"operator": "Exists"}, "no key (it tolerates every taint)"),
    ({"key": "", "operator": "Exists", "effect": "NoSchedule"}, "no key"),
    ({"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
     "key node-role.kubernetes.io/control-plane"),
    ({"key": "node-role.kubernetes.io/master", "operator": "Exists"}, "key node-role.kubernetes.io/master"),
    ({"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}, "key node.kubernetes.io/unschedulable"),
    # A node's lifecycle (review R11).
    ({"key": "node.kubernetes.io/not-ready", "operator": "Exists"}, "key node.kubernetes.io/not-ready"),
    ({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
     "key node.kubernetes.io/unreachable"),
    ({"key": "node.kubernetes.io/disk-pressure", "operator": "Exists"}, "key node.kubernetes.io/disk-pressure"),
    ({"key": "node.kubernetes.io/out-of-service", "operator": "Exists"}, "key node.kubernetes.io/out-of-service"),
])  # fmt: skip
def test_tolerations_of_the_control_plane_or_every_taint_are_refused_by_default(toleration, words):
    got = refusal({"tolerations": [{"key": "gpu", "operator": "Exists"}, toleration]})
    assert got is not None and got.reason == reasons.TOLERATION_NOT_ALLOWED
    assert f"spec.tolerations[1] with {words}" in got.message and "--allowed-toleration-keys" in got.message


def test_a_node_label_of_the_node_kubernetes_io_prefix_stays_free_to_select():
    assert refusal({"nodeSelector": {"node.kubernetes.io/instance-type": "g4dn.xlarge"}}) is None


def test_tolerations_allowed_by_key_and_the_keyless_one_only_by_star():
    control_plane = {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}
    assert refusal({"tolerations": [control_plane]}, toleration_keys=("node-role.kubernetes.io/*",)) is None
    assert refusal({"tolerations": [{"operator": "Exists"}]}, toleration_keys=("node-role.kubernetes.io/*",))
    assert refusal({"tolerations": [{"operator": "Exists"}]}, toleration_keys=("*",)) is None


# ---- affinity -----------------------------------------------------------------------------------


def _term(**extra: Any) -> dict[str, Any]:
    return {"topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchExpressions": [{"key": "app.kubernetes.io/name", "operator": "Exists"}]}, **extra}


@pytest.mark.parametrize("affinity, path", [
    ({"podAntiAffinity": {policy.REQUIRED: [_term(namespaceSelector={})]}}, f"podAntiAffinity.{policy.REQUIRED}[0]"),
    ({"podAffinity": {policy.REQUIRED: [_term(), _term(namespaces=["kube-system"])]}},
     f"podAffinity.{policy.REQUIRED}[1]"),
    ({"podAntiAffinity": {policy.PREFERRED: [{"weight": 1, "podAffinityTerm": _term(namespaceSelector={
        "matchLabels": {"team": "b"}})}]}}, f"podAntiAffinity.{policy.PREFERRED}[0].podAffinityTerm"),
])  # fmt: skip
def test_affinity_terms_reaching_other_namespaces_are_refused_by_default(affinity, path):
    got = refusal({"affinity": affinity})
    assert got is not None and got.reason == reasons.AFFINITY_NOT_ALLOWED
    assert f"spec.affinity.{path} reaches other namespaces" in got.message
    assert "--cross-namespace-affinity (DTR_CROSS_NAMESPACE_AFFINITY)" in got.message
    assert refusal({"affinity": affinity}, cross_namespace_affinity=True) is None


def test_affinity_within_the_runs_namespace_is_fine():
    own = {"podAntiAffinity": {policy.REQUIRED: [_term(namespaces=[UNIT_NAMESPACE])],
                               policy.PREFERRED: [{"weight": 1, "podAffinityTerm": _term()}]},
           "nodeAffinity": {policy.REQUIRED: {"nodeSelectorTerms": []}}}  # fmt: skip
    assert refusal({"affinity": own}) is None


# ---- claims -------------------------------------------------------------------------------------


def _pvc(labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "shared", "labels": labels or {}}}


def test_only_claims_labelled_for_runs_may_be_named():
    run = parse_run(make_run({"storage": {"claimName": "shared"}}))
    got = claim_refusal(run, _pvc(), Policy())
    assert got is not None and got.reason == reasons.CLAIM_NOT_ALLOWED
    assert "spec.storage.claimName shared" in got.message and "--claims (DTR_CLAIMS)=labelled" in got.message
    assert f"kubectl label pvc shared {policy.CLAIM_LABEL}={policy.CLAIM_LABEL_VALUE}" in got.message
    assert claim_refusal(run, _pvc({policy.CLAIM_LABEL: "no"}), Policy()) is not None
    assert claim_refusal(run, _pvc({policy.CLAIM_LABEL: policy.CLAIM_LABEL_VALUE}), Policy()) is None
    assert claim_refusal(run, _pvc(), Policy(claims=policy.ANY)) is None


def test_the_claim_label_is_the_one_docs_operator_md_tells_admins_to_set():
    text = (REPO / "docs" / "operator.md").read_text()
    assert f"{policy.CLAIM_LABEL}={policy.CLAIM_LABEL_VALUE}" in text


# ---- the flags ----------------------------------------------------------------------------------


def test_the_policy_flags_default_to_refusing_and_read_env_then_flags():
    assert cfg.from_env({}).policy == Policy()
    env = {"DTR_ALLOWED_POD_LABELS": "team, example.com/*", "DTR_ALLOWED_PRIORITY_CLASSES": "batch-low",
           "DTR_CROSS_NAMESPACE_AFFINITY": "allowed", "DTR_CLAIMS": "any"}  # fmt: skip
    from_env = cfg.from_env(env).policy
    assert from_env == Policy(pod_labels=("team", "example.com/*"), priority_classes=("batch-low",),
                              cross_namespace_affinity=True, claims=policy.ANY)  # fmt: skip
    parser = cfg.argparse.ArgumentParser()
    cfg.add_arguments(parser)
    args = parser.parse_args(["--allowed-pod-labels", "", "--allowed-toleration-keys", "*", "--claims", "labelled",
                              "--cross-namespace-affinity", "refused"])  # fmt: skip
    assert cfg.from_args(args, env).policy == Policy(priority_classes=("batch-low",), toleration_keys=("*",))


@pytest.mark.parametrize("env", [{"DTR_CLAIMS": "some"}, {"DTR_CROSS_NAMESPACE_AFFINITY": "yes"}])
def test_a_bad_policy_value_names_its_variable(env):
    with pytest.raises(cfg.SettingsError, match=next(iter(env))):
        cfg.from_env(env)


def test_settings_refuse_as_the_policy_does():
    s = cfg.from_env({"DTR_ALLOWED_POD_LABELS": "team"})
    assert s.run_refusal(parse_run(make_run({"podLabels": {"team": "ml"}}))) is None
    assert s.run_refusal(parse_run(make_run({"podLabels": {"sidecar.istio.io/inject": "true"}}))) is not None
    assert s.claim_refusal(parse_run(make_run({"storage": {"claimName": "shared"}})), _pvc()) is not None


# ---- the attack catalogue (tests/reliability/attacks/policy*.yaml) ------------------------------


def _shipped_env() -> dict[str, str]:
    """The operator's environment as deploy/ ships it."""
    docs = yaml.safe_load_all((REPO / "deploy" / "base" / "deployment.yaml").read_text())
    deployment = next(d for d in docs if d and d.get("kind") == "Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def _operator_refusal(attack: dict[str, Any]) -> str | None:
    """The reason the operator, as shipped plus the attack's flags, gives the attack's run (None: none)."""
    parser = cfg.argparse.ArgumentParser()
    cfg.add_arguments(parser)
    settings = cfg.from_args(parser.parse_args(attack.get("operator_args", [])), _shipped_env())
    run = parse_run(make_run(merged({"workers": 1}, attack["spec"])))
    if settings.image_refusal(run.image) is not None:
        return reasons.IMAGE_NOT_ALLOWED
    refused = settings.run_refusal(run)
    claims = [o for o in attack.get("objects", []) if o["kind"] == "PersistentVolumeClaim"
              and o["metadata"]["name"] == run.storage.claim_name]  # fmt: skip
    if refused is None and claims:
        refused = settings.claim_refusal(run, claims[0])
    return None if refused is None else refused.reason


ATTACKS = [attack for part in ("policy.yaml", "policy2.yaml")
           for attack in yaml.safe_load((REPO / "tests" / "reliability" / "attacks" / part).read_text())]


@pytest.mark.parametrize("attack", ATTACKS, ids=[a["id"] for a in ATTACKS])
def test_every_policy_attack_is_refused_by_the_operator_with_its_reason(attack: dict[str, Any]):
    assert attack["refused_by"] == "operator" and attack["reason"] in {r.name for r in reasons.REASONS}
    assert _operator_refusal(attack) == attack["reason"]


def test_the_attack_ids_are_unique():
    ids = [a["id"] for a in ATTACKS]
    assert len(ids) == len(set(ids))


# ---- node selection by role (M1) ----------------------------------------------------------------

NODE_AFFINITY = "spec.affinity.nodeAffinity"


def _node_affinity(key: str, operator: str = "Exists", preferred: bool = False) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                                 {"key": key, "operator": operator}]}
    if preferred:
        return {"nodeAffinity": {policy.PREFERRED: [{"weight": 1, "preference": term}]}}
    return {"nodeAffinity": {policy.REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": []}, term]}}}


@pytest.mark.parametrize("spec, field", [
    ({"nodeSelector": {"pool": "gpu", "node-role.kubernetes.io/control-plane": ""}}, "spec.nodeSelector"),
    ({"nodeSelector": {"node-role.kubernetes.io/gpu-team-a": "true"}}, "spec.nodeSelector"),
    ({"affinity": _node_affinity("node-role.kubernetes.io/master")},
     f"{NODE_AFFINITY}.{policy.REQUIRED}.nodeSelectorTerms[1].matchExpressions[1]"),
    ({"affinity": _node_affinity("node-role.kubernetes.io/control-plane", "In", preferred=True)},
     f"{NODE_AFFINITY}.{policy.PREFERRED}[0].preference.matchExpressions[1]"),
])  # fmt: skip
def test_selecting_nodes_by_their_role_is_refused_by_default(spec, field):
    got = refusal(spec)
    assert got is not None and got.reason == reasons.NODE_SELECTOR_NOT_ALLOWED
    assert f"{field} selects nodes by node-role.kubernetes.io/" in got.message
    assert "--allowed-toleration-keys (DTR_ALLOWED_TOLERATION_KEYS) does not allow: none" in got.message
    assert refusal(spec, toleration_keys=("node-role.kubernetes.io/*",)) is None


def test_the_toleration_flag_allows_node_roles_by_key():
    spec = {"nodeSelector": {"node-role.kubernetes.io/control-plane": ""}}
    assert refusal(spec, toleration_keys=("node-role.kubernetes.io/gpu-*",)).reason == \
        reasons.NODE_SELECTOR_NOT_ALLOWED
    assert refusal(spec, toleration_keys=("node-role.kubernetes.io/control-plane",)) is None


@pytest.mark.parametrize("operator", ["NotIn", "DoesNotExist"])
def test_keeping_a_run_off_role_nodes_is_fine(operator):
    assert refusal({"affinity": _node_affinity("node-role.kubernetes.io/control-plane", operator)}) is None


def test_malformed_node_affinity_is_refused_by_the_schema_or_passed_by_the_policy():
    """The affinity schema (fields.py) refuses most of these first, as the API server does; what it admits,
    the policy copes with without raising, leaving it to the API server."""
    from dtr_operator.spec import SpecError

    refused = 0
    for affinity in ({"nodeAffinity": {"x": [1]}}, {"nodeAffinity": {policy.REQUIRED: {"nodeSelectorTerms": [1]}}},
                     {"nodeAffinity": {policy.REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": ["x"]}]}}},
                     {"nodeAffinity": {policy.PREFERRED: [{"weight": 1}]}}):  # fmt: skip
        try:
            assert refusal({"affinity": affinity}) is None, affinity
        except SpecError:
            refused += 1
    assert refused >= 1


# ---- required anti-affinity over wide topologies (M1) --------------------------------------------


def test_required_anti_affinity_over_a_zone_is_refused_by_default():
    spec = {"affinity": {"podAntiAffinity": {policy.REQUIRED: [
        _term(), _term(topologyKey="topology.kubernetes.io/zone")]}}}  # fmt: skip
    got = refusal(spec)
    assert got is not None and got.reason == reasons.AFFINITY_NOT_ALLOWED
    assert f"spec.affinity.podAntiAffinity.{policy.REQUIRED}[1] has topologyKey topology.kubernetes.io/zone" \
        in got.message
    assert "--allowed-anti-affinity-topologies (DTR_ALLOWED_ANTI_AFFINITY_TOPOLOGIES) does not allow: it allows " \
        "kubernetes.io/hostname; use" in got.message
    assert refusal(spec, anti_affinity_topologies=("topology.kubernetes.io/*",)) is None


def test_hostname_preferred_and_affinity_terms_spread_as_they_like():
    wide = _term(topologyKey="topology.kubernetes.io/region")
    assert refusal({"affinity": {"podAntiAffinity": {policy.REQUIRED: [_term()]}}}) is None
    assert refusal({"affinity": {"podAffinity": {policy.REQUIRED: [wide]}}}) is None
    assert refusal({"affinity": {"podAntiAffinity": {policy.PREFERRED: [{"weight": 1, "podAffinityTerm": wide}]}}}) \
        is None


# ---- storage (L6) -------------------------------------------------------------------------------


@pytest.mark.parametrize("text, value", [
    ("100Gi", 100 * 2**30), ("2G", 2 * 10**9), ("1.5e9", 15 * 10**8), ("500Mi", 500 * 2**20), ("1E", 10**18),
    ("1Ei", 2**60), ("100m", 0.1), (7, 7), (".5Ki", 512), ("lots", None), ("1Gb", None), ("", None),
])  # fmt: skip
def test_quantities_are_read_as_kubernetes_reads_them(text, value):
    got = policy.quantity(text)
    assert (got is None and value is None) or got == Decimal(str(value))


def test_storage_over_the_limit_is_refused():
    got = refusal({"storage": {"size": "101Gi"}})
    assert got is not None and got.reason == reasons.STORAGE_TOO_LARGE
    assert "spec.storage.size 101Gi" in got.message and "--max-storage (DTR_MAX_STORAGE): 100Gi" in got.message
    assert refusal({"storage": {"size": "100Gi"}}) is None and refusal({"storage": {"size": "107374182400"}}) is None
    assert refusal({"storage": {"size": "1Ti"}}, max_storage="2T") is None
    assert refusal({"storage": {"size": "1e16"}}, max_storage="1Pi").reason == reasons.STORAGE_TOO_LARGE


SOURCE = {"url": "https://data.example/t.npz", "sha256": "ab" * 32}


def test_a_download_cap_over_the_storage_limit_is_refused_whatever_the_volume():
    """spec.training.datasetSource.maxSize is held to --max-storage too: on a claim of the user's (whose size the
    flag does not bound) and on classes that ignore a claim's size, it is what bounds the download."""
    for storage in ({}, {"claimName": "shared"}):
        got = refusal({"training": {"datasetSource": {**SOURCE, "maxSize": "101Gi"}}, "storage": storage})
        assert got is not None and got.reason == reasons.STORAGE_TOO_LARGE, storage
        assert "spec.training.datasetSource.maxSize 101Gi" in got.message
        assert "--max-storage (DTR_MAX_STORAGE): 100Gi" in got.message
    assert refusal({"training": {"datasetSource": {**SOURCE, "maxSize": "100Gi"}}}) is None
    assert refusal({"training": {"datasetSource": SOURCE}}, max_storage="1Gi") is None  # the default, 1Gi
    assert refusal({"training": {"datasetSource": SOURCE}}, max_storage="1023Mi").reason == reasons.STORAGE_TOO_LARGE


def test_storage_classes_only_when_listed():
    got = refusal({"storage": {"storageClassName": "premium-ssd"}})
    assert got is not None and got.reason == reasons.STORAGE_CLASS_NOT_ALLOWED
    assert "spec.storage.storageClassName premium-ssd" in got.message
    assert "--allowed-storage-classes (DTR_ALLOWED_STORAGE_CLASSES): none" in got.message
    assert refusal({"storage": {"storageClassName": "standard"}}, storage_classes=("standard", "fast-*")) is None
    assert refusal({"storage": {"storageClassName": "premium-ssd"}}, storage_classes=("standard",)) is not None
    assert refusal({"storage": {"size": "1Gi"}}) is None  # no class: the cluster's default


def test_a_named_claim_is_not_held_to_the_storage_flags():
    assert refusal({"storage": {"claimName": "shared"}}, max_storage="1Mi") is None


def test_the_storage_flags_read_env_then_flags():
    env = {"DTR_MAX_STORAGE": "10Gi", "DTR_ALLOWED_STORAGE_CLASSES": "standard",
           "DTR_ALLOWED_ANTI_AFFINITY_TOPOLOGIES": "topology.kubernetes.io/zone"}  # fmt: skip
    assert cfg.from_env(env).policy == Policy(max_storage="10Gi", storage_classes=("standard",),
                                              anti_affinity_topologies=("topology.kubernetes.io/zone",))
    parser = cfg.argparse.ArgumentParser()
    cfg.add_arguments(parser)
    args = parser.parse_args(["--max-storage", "1Ti", "--allowed-storage-classes", ""])
    assert cfg.from_args(args, env).policy == Policy(max_storage="1Ti",
                                                     anti_affinity_topologies=("topology.kubernetes.io/zone",))


@pytest.mark.parametrize("value", ["0", "-1Gi", "lots", "1GB"])
def test_a_bad_max_storage_names_its_flag(value):
    with pytest.raises(cfg.SettingsError, match="DTR_MAX_STORAGE"):
        cfg.from_env({"DTR_MAX_STORAGE": value})
    parser = cfg.argparse.ArgumentParser()
    cfg.add_arguments(parser)
    with pytest.raises(cfg.SettingsError, match="--max-storage"):
        cfg.from_args(parser.parse_args([f"--max-storage={value}"]), {})


def test_every_operator_attack_keeps_its_reason_under_the_flags_of_its_group_on_the_node():
    """The node's attack suite tries the attacks a group of flags at a time (catalogue.flag_groups): more flags
    than an attack names must not change the reason it is refused with."""
    from reliability.catalogue import flag_groups, load

    for flags, attacks in flag_groups(load()):
        for a in (a for a in attacks if a.refused_by == "operator"):
            got = _operator_refusal({"spec": a.spec, "objects": list(a.objects), "operator_args": list(flags)})
            assert got == a.reason, (a.id, flags)
