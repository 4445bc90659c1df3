"""spec.storage, declared as fields.py declares the rest (fields.py imports it into SPEC). Pure data.

The run's volume: a claim of the user's (claimName) or one the operator creates (size, class, access mode,
reclaim policy); or, with volume false, none at all: each worker a directory of its own, the epoch backups in a
bucket (backupUri), the model too (spec.export.storageUri): docs/object-storage.md#a-run-with-no-volume.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from dtr_contract import flags, layout

from . import grammar
from .fields_objectstore import URI_WHY, is_s3
from .schema import Field, Pattern, Rule, To, cel_regex

VOLUME = Field("volume", "boolean",
    "false: no PersistentVolumeClaim at all. Each worker gets a directory of its own instead (an emptyDir of "
    "spec.storage.size), gone with its pod; the epoch backups live in the bucket (backupUri, then required), the "
    "model too (spec.export.storageUri, required), and the data is read from the bucket or is a built-in data "
    "set. The workers may then run on any nodes, and a worker whose pod is made again elsewhere resumes from "
    "the bucket. Default true.",
    attr="storage.volume", default=True, schema_default=False,
    doc="Without a volume nothing the workers write outlives their pods but what goes to the bucket: no "
        "TensorBoard logs or worker log files to read afterwards (the pod logs are there while the pods are). "
        "[object-storage.md](object-storage.md#a-run-with-no-volume)")  # fmt: skip
BACKUP_URI = Field("backupUri", "string",
    "Where the epoch backups live: an s3:// prefix in spec.objectStore. Each worker resumes from there, on any "
    "node. Only with volume false (with a volume the backups stay on it).",
    attr="storage.backup_uri", min_length=1, max_length=1024, to=To("trainer", flags.BACKUP_URI),
    pattern=Pattern(grammar.S3_URI.removesuffix("/?"), URI_WHY + ", no trailing '/'"),
    rules=(Rule(f"!self.matches('{cel_regex(grammar.S3_DOT_SEGMENT)}')", "must have no '.' or '..' segment",
                lambda v: re.search(grammar.S3_DOT_SEGMENT, v) is None),),
    doc="[object-storage.md](object-storage.md#backups-in-a-bucket)")  # fmt: skip


def _no_volume(storage: Mapping[str, Any]) -> bool:
    return storage.get("volume") is False


_NO_VOLUME_CEL = "has(self.volume) && !self.volume"
# spec.storage's rules for a run with no volume: the backups must go somewhere, and no claim is made or named.
STORAGE_RULES = (
    Rule(f"({_NO_VOLUME_CEL}) == has(self.backupUri)",
         "backupUri and volume false go together: a run with no volume keeps its backups in the bucket, and a "
         "run with a volume keeps them on it",
         lambda s: _no_volume(s) == ("backupUri" in s), subject="backupUri"),
    Rule(f"!({_NO_VOLUME_CEL}) || (!has(self.claimName) && !has(self.storageClassName))",
         "claimName and storageClassName are for a volume: not with volume false",
         lambda s: not _no_volume(s) or ("claimName" not in s and "storageClassName" not in s), subject="volume"),
)  # fmt: skip


def _no_volume_needs(spec: Mapping[str, Any], builtins: tuple[str, ...]) -> bool:
    if not _no_volume(spec.get("storage") or {}):
        return True
    dataset = (spec.get("training") or {}).get("dataset")
    return "storageUri" in (spec.get("export") or {}) and (dataset is None or is_s3(dataset) or dataset in builtins)


def no_volume_rule(builtins: tuple[str, ...]) -> Rule:
    """spec's rule: a run with no volume exports to the bucket and reads its data from there (or a built-in)."""
    listed = ", ".join(f"'{b}'" for b in builtins)
    return Rule(f"!has(self.storage) || !has(self.storage.volume) || self.storage.volume || "
                f"(has(self.export) && has(self.export.storageUri) && (!has(self.training) || "
                f"!has(self.training.dataset) || self.training.dataset.startsWith('s3://') || "
                f"self.training.dataset in [{listed}]))",
                "volume false needs spec.export.storageUri (the model goes to the bucket) and a spec.training.dataset "
                f"that is an s3:// URI or one of {', '.join(builtins)}: nothing is on a volume",
                lambda s: _no_volume_needs(s, builtins), subject="storage.volume")  # fmt: skip


STORAGE = Field("storage", "object",
                f"The volume mounted at {layout.MOUNT_PATH} in every worker (data cache, backups, TensorBoard logs, "
                "exported models). Either an existing PVC (claimName) or one the operator creates, named "
                "\"<name>-data\"; or, with volume false, none: each worker its own emptyDir, the backups in the "
                "bucket.",
                attr="storage", default={}, fields=(
    Field("claimName", "string",
          "Name of an existing PersistentVolumeClaim in the run's namespace to use. Unset: the operator creates "
          "\"<name>-data\".",
          attr="storage.claim_name", min_length=1, max_length=253,
          to=To("pod", "spec.volumes.0.persistentVolumeClaim.claimName"),
          pattern=Pattern(grammar.PVC_NAME, "must be a PVC name: lower-case letters, digits, '-' and '.', starting and "
                          "ending with a letter or digit", cel=True),
          doc_default="unset: the operator creates `<name>-data`",
          doc="Never created, owned or deleted by the operator."),
    Field("size", "string",
          "Size of the PVC the operator creates, a Kubernetes quantity such as 1Gi (default {default}). Not "
          "allowed with claimName.",
          attr="storage.size", default="1Gi", schema_default=False, max_length=64,
          to=To("pvc", "spec.resources.requests.storage"),
          not_with=("claimName", "is only for the PVC the operator creates"),
          rules=(Rule("isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))",
                      "must be a positive Kubernetes quantity, such as 500Mi or 1Gi", grammar.positive_quantity),),
          doc="Defaulted by the operator rather than the schema, so that the API server can refuse it with "
              "`claimName`."),
    Field("storageClassName", "string",
          "StorageClass of the PVC the operator creates (default: the cluster's default class). Not allowed with "
          "claimName.",
          attr="storage.storage_class_name", min_length=1, max_length=253, to=To("pvc", "spec.storageClassName"),
          not_with=("claimName", "is only for the PVC the operator creates"), doc_default="the cluster's default"),
    Field("accessMode", "string",
          "Access mode of the PVC the operator creates: ReadWriteOnce (one node) or ReadWriteMany (workers on "
          "several nodes). Ignored with claimName.",
          attr="storage.access_mode", default="ReadWriteOnce", enum=("ReadWriteOnce", "ReadWriteMany"),
          to=To("pvc", "spec.accessModes.0"),
          doc="Not with a required anti-affinity term that puts the workers on separate nodes: "
              "[below](#storage-and-pod-anti-affinity)."),
    Field("reclaimPolicy", "string",
          "What happens to the PVC the operator created when the run is deleted: Retain keeps it (and the model on "
          "it); Delete removes it with the run.",
          attr="storage.reclaim_policy", default="Retain", enum=("Retain", "Delete")),
    VOLUME,
    BACKUP_URI,
), rules=(
    *STORAGE_RULES,
    Rule("!has(self.claimName) || self.reclaimPolicy != 'Delete'",
         "Delete cannot be set with spec.storage.claimName: the operator never deletes a PVC it did not create",
         lambda s: "claimName" not in s or s.get("reclaimPolicy") != "Delete", subject="reclaimPolicy",
         field_path=True),
))  # fmt: skip
