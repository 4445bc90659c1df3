"""The few kubectl commands the tests run most, answered in-process: `get ... -o json|name` of a known kind, `create
-f -` of one JSON object, `create namespace NAME`, `delete namespace NAME`, `patch`, `auth can-i`. Anything else, or
any flag not read here, goes to kubectl itself; so does a `create -f -` the server refused (`Request.retry`: kubectl
sends it again and says why in its own words, which tests check).

Why: a kubectl costs about 50 ms of CPU before it sends a request (the Go binary's start; `kubectl version --client`
alone is 46 ms here) and the API server a new TLS handshake. A warm CI run started 3823 of them (208 CPU seconds
of 2780, process accounting, 2026-12-07), half of them integration's. The answers keep kubectl's shape: its JSON,
its exit code, its `Error from server (Reason): ...` line.

`plan` is pure (argv -> the request, or None for kubectl); `Answer` turns an HTTP answer into kubectl's output.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

# kubectl's names for a kind -> (the API's group/version path, the plural, namespaced). Only kinds whose plural and
# group need no discovery; a kind missing here goes to kubectl.
_CORE = "api/v1"
KINDS: dict[str, tuple[str, str, bool]] = {}


def _kind(path: str, plural: str, namespaced: bool, *names: str) -> None:
    for name in (plural, *names):
        KINDS[name] = (path, plural, namespaced)


# (group/version path, namespaced, "plural singular short..."): Kubernetes' own kinds the tests name
BUILT_IN = (
    (_CORE, True, "pods pod po"), (_CORE, True, "configmaps configmap cm"), (_CORE, True, "secrets secret"),
    (_CORE, True, "services service svc"), (_CORE, True, "serviceaccounts serviceaccount sa"),
    (_CORE, True, "persistentvolumeclaims persistentvolumeclaim pvc"), (_CORE, True, "events event ev"),
    (_CORE, True, "resourcequotas resourcequota quota"), (_CORE, True, "limitranges limitrange limits"),
    (_CORE, True, "endpoints ep"), (_CORE, False, "namespaces namespace ns"), (_CORE, False, "nodes node no"),
    (_CORE, False, "persistentvolumes persistentvolume pv"),
    ("apis/apps/v1", True, "deployments deployment deploy"), ("apis/apps/v1", True, "replicasets replicaset rs"),
    ("apis/apps/v1", True, "daemonsets daemonset ds"), ("apis/apps/v1", True, "statefulsets statefulset sts"),
    ("apis/batch/v1", True, "jobs job"),
    ("apis/networking.k8s.io/v1", True, "networkpolicies networkpolicy netpol"),
    ("apis/policy/v1", True, "poddisruptionbudgets poddisruptionbudget pdb"),
    ("apis/coordination.k8s.io/v1", True, "leases lease"),
    ("apis/rbac.authorization.k8s.io/v1", True, "roles role"),
    ("apis/rbac.authorization.k8s.io/v1", True, "rolebindings rolebinding"),
    ("apis/rbac.authorization.k8s.io/v1", False, "clusterroles clusterrole"),
    ("apis/rbac.authorization.k8s.io/v1", False, "clusterrolebindings clusterrolebinding"),
    ("apis/apiextensions.k8s.io/v1", False, "customresourcedefinitions customresourcedefinition crd crds"),
    ("apis/scheduling.k8s.io/v1", False, "priorityclasses priorityclass pc"),
    ("apis/storage.k8s.io/v1", False, "storageclasses storageclass sc"),
)  # fmt: skip
for _path, _namespaced, _names in BUILT_IN:
    _kind(_path, _names.split()[0], _namespaced, *_names.split()[1:])


def project_kinds() -> None:
    """The project's kinds by every name their CRDs give (crds/), and the TFJob (the op environment's api module)."""
    import yaml
    from dtr_operator import api

    from support.repo import REPO

    for crd in sorted((REPO / "crds").glob("*.yaml")):
        spec = yaml.safe_load(crd.read_text())["spec"]
        names, (version, *_) = spec["names"], [v["name"] for v in spec["versions"] if v.get("served")]
        _kind(f"apis/{spec['group']}/{version}", names["plural"], spec["scope"] == "Namespaced", names["singular"],
              f"{names['plural']}.{spec['group']}", *names.get("shortNames", ()))  # fmt: skip
    _kind(f"apis/{api.TFJOB_GROUP}/{api.TFJOB_VERSION}", api.TFJOB_PLURAL, True, "tfjob", api.TFJOB_CRD)


with contextlib.suppress(ImportError):  # the trainer environment's pytest loads this module too: the core kinds
    project_kinds()


@dataclass(frozen=True)
class Request:
    method: str  # GET, POST, PATCH, DELETE
    path: str  # from the server's root, with a leading /
    query: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    listing: bool = False  # kubectl prints a List whose items carry apiVersion and kind
    ignore_not_found: bool = False
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    review: bool = False  # an access review: kubectl prints yes or no (exit 0 or 1)
    done: str = ""  # kubectl's line on success for create and delete ("namespace/x created")
    names: bool = False  # `-o name`: kind.group/name lines
    created: bool = False  # `create -f -`: kubectl's line names what the server made (`kind.group/name created`)
    retry: bool = False  # refused in-process: kubectl sends it again, for its own words


def _flags(rest: list[str], valued: set[str], bare: set[str]) -> dict[str, str] | None:
    """`--x=v`, `--x v` and `-x v` of `valued`, `--x` of `bare` (value ""); None at any other token."""
    out: dict[str, str] = {}
    i = 0
    while i < len(rest):
        token = rest[i]
        name, eq, value = token.partition("=")
        if name in valued:
            if not eq:
                if i + 1 >= len(rest):
                    return None
                i, value = i + 1, rest[i + 1]
            out[name] = value
        elif token in bare:
            out[token] = ""
        else:
            return None
        i += 1
    return out


_OUTPUT = {"-o", "--output"}
_NAMESPACE = {"-n", "--namespace"}
_SELECTOR = {"-l", "--selector"}


def plan(args: tuple[str, ...], stdin: str | None = None) -> Request | None:
    """The request kubectl `args` make (reading `stdin` for `-f -`), or None: kubectl runs them (a kind, a verb or a
    flag not read here)."""
    if len(args) < 2:
        return None
    verb, rest = args[0], list(args[1:])
    if stdin is not None:
        return _plan_create(rest, stdin) if verb == "create" else None
    if verb == "auth":
        return _plan_can_i(rest[1:]) if rest[0] == "can-i" else None
    if verb in ("create", "delete"):
        return _plan_namespace(verb, rest)
    planner = {"get": _plan_get, "patch": _plan_patch}.get(verb)
    return planner(rest) if planner else None


def _plan_namespace(verb: str, rest: list[str]) -> Request | None:
    """`create namespace NAME`, `delete namespace NAME --wait=false [--ignore-not-found]`."""
    if len(rest) < 2 or rest[0] not in ("namespace", "ns", "namespaces") or rest[1].startswith("-"):
        return None
    name = rest[1]
    if verb == "create":
        if rest[2:]:
            return None
        return Request("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace",
                                                            "metadata": {"name": name}},
                       done=f"namespace/{name} created")  # fmt: skip
    flags = _flags(rest[2:], set(), {"--wait=false", "--ignore-not-found", "--ignore-not-found=true"})
    if flags is None or "--wait=false" not in flags:  # --wait (the default) waits for it to go: kubectl's own loop
        return None
    return Request("DELETE", f"/api/v1/namespaces/{name}",
                   ignore_not_found=any(f.startswith("--ignore-not-found") for f in flags),
                   done=f'namespace "{name}" deleted')  # fmt: skip


def _plan_create(rest: list[str], stdin: str) -> Request | None:
    """`create [-n NS] -f -` of one JSON object of a known kind, validated as kubectl does by default (strict: the
    server refuses unknown fields; so refused, kubectl sends it again and says so in its words)."""
    flags = _flags(rest, _NAMESPACE | {"-f", "--filename"}, set())
    if flags is None or flags.get("-f", flags.get("--filename")) != "-":
        return None
    try:
        doc = json.loads(stdin)
    except json.JSONDecodeError:
        return None  # YAML: kubectl's
    if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
        return None
    kind = KINDS.get(str(doc.get("kind", "")).lower())
    if kind is None or _api_version(kind[0]) != doc.get("apiVersion"):
        return None
    group, plural, namespaced = kind
    given, inside = flags.get("-n", flags.get("--namespace")), doc["metadata"].get("namespace")
    if given and inside and given != inside:
        return None  # kubectl refuses it, in its words
    namespace = given or inside
    if namespaced and not namespace:
        return None  # the kubeconfig's namespace: kubectl knows it
    where = f"/namespaces/{namespace}" if namespaced else ""
    query = {"fieldManager": "kubectl-create", "fieldValidation": "Strict"}
    return Request("POST", f"/{group}{where}/{plural}", query, body=doc, created=True, retry=True)


def _api_version(path: str) -> str:
    """`apis/distml.dev/v1alpha1` -> `distml.dev/v1alpha1`, `api/v1` -> `v1`."""
    return path.split("/", 1)[1]


def _words(rest: list[str]) -> list[str]:
    """The leading arguments before the first flag, taken off `rest`; KIND/NAME as two."""
    words = []
    while rest and not rest[0].startswith("-"):
        words.append(rest.pop(0))
    return words[0].split("/", 1) if len(words) == 1 and "/" in words[0] else words


def _plan_get(rest: list[str]) -> Request | None:
    words = _words(rest)
    if not 1 <= len(words) <= 2 or words[0] not in KINDS:
        return None
    flags = _flags(rest, _OUTPUT | _NAMESPACE | _SELECTOR | {"--field-selector"},
                   {"-A", "--all-namespaces", "--ignore-not-found", "--ignore-not-found=true"})  # fmt: skip
    output = next((flags[o] for o in _OUTPUT if o in flags), None) if flags is not None else None
    if output not in ("json", "name"):
        return None
    group, plural, namespaced = KINDS[words[0]]
    if plural == "events":
        # kubectl's: the operator posts a run's event just after its status, and tests that read the status then its
        # events right away count on kubectl's 50 ms (tests/integration/operator_support.py `events`)
        return None
    namespace = flags.get("-n", flags.get("--namespace"))
    every = "-A" in flags or "--all-namespaces" in flags
    name = words[1] if len(words) == 2 else ""
    if namespaced and not namespace and not every:
        return None  # the kubeconfig's namespace: kubectl knows it
    if name and every:
        return None  # kubectl refuses it
    where = f"/namespaces/{namespace}" if namespaced and namespace and not every else ""
    query = {}
    if selector := flags.get("-l", flags.get("--selector")):
        query["labelSelector"] = selector
    if fields := flags.get("--field-selector"):
        query["fieldSelector"] = fields
    if name and query:
        return None
    path = f"/{group}{where}/{plural}" + (f"/{name}" if name else "")
    ignore = "--ignore-not-found" in flags or "--ignore-not-found=true" in flags
    if ignore and not name:
        return None  # a list found empty: kubectl then prints nothing, not an empty List
    return Request("GET", path, query, listing=not name, ignore_not_found=ignore, names=output == "name")


_PATCH_TYPES = {"merge": "application/merge-patch+json", "json": "application/json-patch+json"}


def _plan_patch(rest: list[str]) -> Request | None:
    """`patch KIND NAME [-n NS] --type=merge|json -p JSON [--subresource=status]` (kubectl's default type, strategic,
    needs the kind's schema: kubectl's)."""
    words = _words(rest)
    flags = _flags(rest, _NAMESPACE | {"--type", "-p", "--patch", "--subresource"}, set())
    if len(words) != 2 or words[0] not in KINDS or flags is None:
        return None
    group, plural, namespaced = KINDS[words[0]]
    namespace, kind_type = flags.get("-n", flags.get("--namespace")), flags.get("--type")
    body, sub = flags.get("-p", flags.get("--patch")), flags.get("--subresource", "")
    if kind_type not in _PATCH_TYPES or body is None or sub not in ("", "status") or (namespaced and not namespace):
        return None
    where = f"/namespaces/{namespace}" if namespaced else ""
    # its line names the kind as the caller did; kubectl's says kind.group (no test reads it)
    return Request("PATCH", f"/{group}{where}/{plural}/{words[1]}" + (f"/{sub}" if sub else ""),
                   body=json.loads(body), content_type=_PATCH_TYPES[kind_type],
                   done=f"{words[0]}/{words[1]} patched")  # fmt: skip


def _plan_can_i(rest: list[str]) -> Request | None:
    """`auth can-i VERB RESOURCE[.GROUP] (-n NS | --all-namespaces) [--subresource=S] [--as=USER]`: the
    SelfSubjectAccessReview kubectl sends (impersonating USER as it does: the API server adds a service account's
    groups)."""
    words = []
    while rest and not rest[0].startswith("-"):
        words.append(rest.pop(0))  # VERB RESOURCE: a slash is a URL path or TYPE/NAME here, kubectl's
    flags = _flags(rest, _NAMESPACE | {"--subresource", "--as"}, {"-A", "--all-namespaces"})
    if len(words) != 2 or flags is None or "/" in words[1]:
        return None
    verb, resource = words
    every = "-A" in flags or "--all-namespaces" in flags
    namespace = flags.get("-n", flags.get("--namespace"))
    if (namespace is None) == (not every):  # neither: the kubeconfig's namespace, kubectl's
        return None
    if "." in resource:
        resource, group = resource.split(".", 1)
    elif resource in KINDS:
        path, resource, _ = KINDS[resource]
        group = "" if path == _CORE else path.split("/")[1]
    else:
        return None
    attributes = {"verb": verb, "resource": resource, "group": group, "namespace": "" if every else namespace}
    if sub := flags.get("--subresource"):
        attributes["subresource"] = sub
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes}}  # fmt: skip
    headers = {"Impersonate-User": flags["--as"]} if "--as" in flags else {}
    return Request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=body, headers=headers,
                   review=True)  # fmt: skip


def answer(request: Request, status: int, body: str, warnings: tuple[str, ...] = ()) -> tuple[int, str, str]:
    """kubectl's (exit code, stdout, stderr) for the HTTP answer (status 0: no answer at all); `warnings`, the
    answer's Warning headers, go to stderr as kubectl prints them."""
    if 200 <= status < 300:
        said = "".join(f"Warning: {warning_text(w)}\n" for w in warnings)
        if request.review:
            allowed = bool((json.loads(body).get("status") or {}).get("allowed"))
            return (0, "yes\n", said) if allowed else (1, "no\n", said)
        if request.created:
            return 0, f"{kubectl_name(json.loads(body))} created\n", said
        if request.method != "GET":
            return 0, request.done + "\n", said
        doc = json.loads(body)
        if request.listing:
            version, kind = doc.get("apiVersion", "v1"), str(doc.get("kind", "")).removesuffix("List")
            items = [{"apiVersion": version, "kind": kind, **item} for item in doc.get("items") or []]
            doc = {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}
        if request.names:
            return 0, "".join(f"{kubectl_name(item)}\n" for item in doc.get("items", [doc])), said
        return 0, json.dumps(doc, indent=4) + "\n", said
    if status == 404 and request.ignore_not_found:
        return 0, "", ""
    if status == 0:
        return 1, "", f"Unable to connect to the server: {body}\n"
    try:
        error = json.loads(body)
        reason, message = error.get("reason") or "Unknown", error.get("message") or body
    except (json.JSONDecodeError, AttributeError):
        reason, message = "Unknown", body
    return 1, "", f"Error from server ({reason}): {message}\n"


def warning_text(header: str) -> str:
    """A Warning header's text, as kubectl prints it: `299 - "text"` -> text."""
    code, _, rest = header.partition(" ")
    agent, _, text = rest.partition(" ")
    if code.isdigit() and agent and len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return header


def kubectl_name(item: dict[str, Any]) -> str:
    """An object of a List as `kubectl get -o name` prints it: kind.group/name (kind/name in the core group)."""
    group = str(item["apiVersion"]).rpartition("/")[0]
    kind = str(item["kind"]).lower()
    return f"{kind}.{group}/{item['metadata']['name']}" if group else f"{kind}/{item['metadata']['name']}"
