"""The API's fields for data and models in an object store (S3; issue 40), declared as fields.py declares the rest
(fields.py imports them into SPEC). Pure data.

spec.objectStore says which store and which Secret holds its keys; spec.training.dataset and spec.export.storageUri
may then name s3:// URIs. The rules hold both directions: an s3:// URI needs spec.objectStore, and spec.objectStore
needs an s3:// URI (a run is given an object store's keys only when it names something there). Which endpoints a
run may name at all is the operator's --allowed-object-stores (policy.py; docs/object-storage.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from dtr_contract import env, flags

from . import grammar
from .schema import Field, Pattern, Rule, To, cel_regex

DEFAULT_REGION = "us-east-1"  # what S3 clients assume without one; SeaweedFS and MinIO accept any
S3_SCHEME = "s3://"
_DNS_SUBDOMAIN = "a DNS subdomain: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
URI_WHY = ("must be an s3:// URI: s3://<bucket>[/<key or prefix>], a bucket name of 3..63 lower-case letters, "
           "digits, '-' and '.', keys of letters, digits and '._=+-' joined by single '/', no '.' or '..' segment")


def s3_uri_cel(of: str) -> str:
    """The CEL twin of grammar.s3_uri, on the field of `self` named `of`."""
    return (f"self.{of}.matches('^{cel_regex(grammar.S3_URI)}$') && "
            f"!self.{of}.matches('{cel_regex(grammar.S3_DOT_SEGMENT)}')")


def is_s3(value: Any) -> bool:
    """Whether a value names something in an object store (the rules' test; grammar.s3_uri checks the rest)."""
    return isinstance(value, str) and value.startswith(S3_SCHEME)


OBJECT_STORE = Field("objectStore", "object",
    "The S3-compatible object store that spec.training.dataset and spec.export.storageUri name with s3:// URIs: "
    "its endpoint, the Secret with its keys, its region, and a CA of your own for HTTPS. Required with an s3:// "
    "URI, refused without one. The endpoint must be one the operator's --allowed-object-stores lists, or the run "
    "fails (ObjectStoreNotAllowed) before anything is created.",
    attr="object_store", doc="[object-storage.md](object-storage.md)", fields=(
    Field("endpoint", "string",
          "scheme://host[:port] of the store's S3 API, http or https; no path, no user:password@ (the keys come "
          "from credentialsSecret).",
          attr="object_store.endpoint", min_length=1, max_length=262,
          pattern=Pattern(grammar.ENDPOINT, "must be scheme://host[:port]: http or https, a lower-case host name or "
                          "IP address, an optional port; no path, no user:password@", cel=True)),
    Field("credentialsSecret", "string",
          f"A Secret in the run's namespace with the keys {env.AWS_ACCESS_KEY_ID} and {env.AWS_SECRET_ACCESS_KEY}. "
          "The workers "
          "read them from the Secret (secretKeyRef): they never appear in the TFJob, the run's status or events.",
          attr="object_store.credentials_secret", min_length=1, max_length=253,
          pattern=Pattern(grammar.DNS1123_SUBDOMAIN, f"must be a Secret name, {_DNS_SUBDOMAIN}", cel=True)),
    Field("region", "string", "The region requests are signed for (default {default}).",
          attr="object_store.region", default=DEFAULT_REGION, schema_default=False, min_length=1, max_length=63,
          pattern=Pattern(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", "must be a region name such as us-east-1", cel=True)),
    Field("caConfigMap", "string",
          "A ConfigMap in the run's namespace with the key ca.crt: the CA (PEM) that signed an https endpoint's "
          "certificate, when it is not one the image trusts. Mounted read-only in every worker.",
          attr="object_store.ca_config_map", min_length=1, max_length=253,
          pattern=Pattern(grammar.DNS1123_SUBDOMAIN, f"must be a ConfigMap name, {_DNS_SUBDOMAIN}", cel=True)),
), rules=(
    Rule("has(self.endpoint) && has(self.credentialsSecret)",
         "must set both endpoint and credentialsSecret", lambda o: "endpoint" in o and "credentialsSecret" in o),
))  # fmt: skip

STORAGE_URI = Field("storageUri", "string",
    "Where model versions go instead of the volume: an s3:// prefix in spec.objectStore, each version at "
    "<storageUri>/<N>/ (TF Serving's layout). Not with modelName.",
    attr="storage_uri", min_length=1, max_length=1024, to=To("trainer", flags.EXPORT_DIR),
    pattern=Pattern(grammar.S3_URI.removesuffix("/?"), URI_WHY + ", no trailing '/'"),
    doc="[models.md](models.md)")  # fmt: skip
# The schema's pattern cannot say "no dot segment": a rule on export does.
STORAGE_URI_RULE = Rule(f"!has(self.storageUri) || !self.storageUri.matches('{cel_regex(grammar.S3_DOT_SEGMENT)}')",
                        "must have no '.' or '..' segment",
                        lambda e: re.search(grammar.S3_DOT_SEGMENT, e.get("storageUri", "")) is None,
                        subject="storageUri", field_path=True)  # fmt: skip


def _uses_s3(spec: Mapping[str, Any]) -> bool:
    return (
        is_s3((spec.get("training") or {}).get("dataset"))
        or "storageUri" in (spec.get("export") or {})
        or "backupUri" in (spec.get("storage") or {})
    )


_USES_S3_CEL = (
    "((has(self.training) && has(self.training.dataset) && self.training.dataset.startsWith('s3://')) "
    "|| (has(self.export) && has(self.export.storageUri)) "
    "|| (has(self.storage) && has(self.storage.backupUri)))"
)
# spec's rules: an s3:// URI needs the store it is in, and a store is given only to a run that names something there.
SPEC_RULES = (
    Rule(f"has(self.objectStore) || !{_USES_S3_CEL}",
         "is required with an s3:// URI in spec.training.dataset, spec.export.storageUri or "
         "spec.storage.backupUri: it says which store and which Secret holds its keys",
         lambda s: "objectStore" in s or not _uses_s3(s), subject="objectStore"),
    Rule(f"!has(self.objectStore) || {_USES_S3_CEL}",
         "is only for a run that names an s3:// URI in spec.training.dataset, spec.export.storageUri or "
         "spec.storage.backupUri",
         lambda s: "objectStore" not in s or _uses_s3(s), subject="objectStore"),
)  # fmt: skip
