"""`dtr data put --create SIZE`: a PersistentVolumeClaim of your own for your data, made with the label that opens
it to runs (policy.CLAIM_LABEL: the operator's default --claims=labelled mounts no other claim a run names in
spec.storage.claimName), so the data goes in and `dtr submit --claim` works without writing any YAML. The same
claim as YAML: docs/trainer.md#a-claim-for-your-data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dtr_operator.fields import find
from dtr_operator.policy import CLAIM_LABEL, CLAIM_LABEL_VALUE

ACCESS_MODE = str(find("storage.accessMode").default)  # the operator's own default for the claims it creates


def claim_manifest(namespace: str, name: str, size: str) -> dict[str, Any]:
    """The claim --create makes: the cluster's default StorageClass, the runs' default access mode, the label."""
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace, "labels": {CLAIM_LABEL: CLAIM_LABEL_VALUE}},
        "spec": {"accessModes": [ACCESS_MODE], "resources": {"requests": {"storage": size}}},
    }  # fmt: skip


def existing_note(pvc: Mapping[str, Any]) -> str:
    """What to say when --create finds the claim there already: it is used as it is, and a claim without the label
    is named with the command that adds it."""
    meta = pvc.get("metadata") or {}
    name, namespace = meta.get("name"), meta.get("namespace")
    said = f"claim {name} exists in namespace {namespace}: the data goes into it as it is"
    if (meta.get("labels") or {}).get(CLAIM_LABEL) == CLAIM_LABEL_VALUE:
        return said
    return (f"{said}; it lacks the label {CLAIM_LABEL}={CLAIM_LABEL_VALUE}, without which runs may not mount it: "
            f"kubectl label pvc {name} -n {namespace} {CLAIM_LABEL}={CLAIM_LABEL_VALUE}")  # fmt: skip


# ---- the shell --------------------------------------------------------------------------------


def ensure(kube: Any, namespace: str, name: str, size: str) -> str:
    """Create the claim unless it exists; the line that says which."""
    from dtr_operator.kube import AlreadyExists

    found = kube.get_pvc(namespace, name)
    if found is None:
        try:
            kube.create(claim_manifest(namespace, name, size))
        except AlreadyExists:  # made between the read and the create: use it, as if read
            found = kube.get_pvc(namespace, name) or claim_manifest(namespace, name, size)
        else:
            return (f"claim {name} created in namespace {namespace}: {size}, {ACCESS_MODE}, labelled "
                    f"{CLAIM_LABEL}={CLAIM_LABEL_VALUE} (runs name it with --claim {name})")  # fmt: skip
    return existing_note(found)
