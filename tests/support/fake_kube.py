"""One in-memory fake of the Kubernetes API as dtr_operator.kube.Kube presents it (the KubeApi Protocol), for the
unit tier: what kopf's kmock and controller-runtime's fake client are to their projects.

What it plays as the API server does:
- a store keyed by (apiVersion, kind, namespace, name) that issues uids and monotonic resourceVersions, and a
  generation that moves when a spec changes;
- kube.py's errors where the API server gives them: NotFound, AlreadyExists, Conflict on a stale resourceVersion
  precondition, ResourceMissing for a TFJob without its CRD (`tfjob_crd = False`);
- merge patches as application/merge-patch+json applies them (None deletes a key, a list is replaced), and JSON
  patches' add, replace and remove (a resourceVersion either sets is a precondition);
- a TFJob's pods by the training-operator's job-name label, and `request`'s GET of a collection (labelSelector).

What no API server does, a test plays (the kubelet, the controllers): `pod_statuses` (a pod the fake created
shows them on its reads), `set_log`, `add_event`, `on_create`, and `exec`/`portforward` (the sessions' far end).
Not modelled: watches, finalizers and grace periods (a delete is immediate), garbage collection by owner, admission
and schema validation, since_seconds (a test's log text is the window asked for).

Every call is kept in `calls` (its arguments as passed, the error it raised); `succeeded(method)` lists the
arguments of those that went through. `fail` makes calls raise before they reach the store: a 403, an outage, a
Conflict once. A test may subclass the fake for a behaviour of its own but keeps the API's semantics.
tests/unit/operator/test_kube_api.py holds the fake, Kube and the Protocol to the same signatures.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import itertools
import re
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, TypeVar

from dtr_operator.api import (
    API_VERSION,
    CONTAINER_NAME,
    JOB_NAME_LABEL,
    KIND,
    PLURALS,
    TFJOB_API_VERSION,
    TFJOB_CRD,
    TFJOB_KIND,
)
from dtr_operator.kube import AlreadyExists, ApiError, Conflict, NotFound, ResourceMissing
from dtr_operator.kube_streams import ExecStream, PortForwardStream

from support.runs import UNIT_NAMESPACE

Key = tuple[str, str, str, str]  # apiVersion, kind, namespace, name
LogKey = tuple[str, str, str, bool]  # namespace, pod, container, previous
# Every kind kube.py addresses by name (api.PLURALS), and two more only `request` and the tests reach.
_PLURALS = {**PLURALS, ("apps/v1", "Deployment"): "deployments", ("v1", "Event"): "events"}
API_VERSIONS = {kind: api_version for api_version, kind in _PLURALS}  # put(obj, kind="Pod") needs no apiVersion
# A session's far end: (pod, container, argv) for exec, (pod, port) for port-forward; each opens one stream.
ExecBehaviour = Callable[[str, str, Sequence[str]], AbstractAsyncContextManager[Any]]
ForwardBehaviour = Callable[[str, int], AbstractAsyncContextManager[Any]]


@dataclass
class Call:
    """One call of an API method: its arguments as the caller passed them (defaults not filled in, **fields
    flattened, copied as sent), and the error it raised (a stream's, from opening it, is not kept)."""

    method: str
    args: dict[str, Any]
    error: ApiError | None = None


@dataclass
class Fault:
    method: str
    error: ApiError
    times: int | None  # None: every call
    when: Callable[[dict[str, Any]], bool] | None


F = TypeVar("F", bound=Callable[..., Any])
B = TypeVar("B")


def api(method: F) -> F:
    """An API method: kept in `calls`, and failed when a test said so (`fail`), before it reaches the store."""
    signature = inspect.signature(method)
    spread = {p.name for p in signature.parameters.values() if p.kind is p.VAR_KEYWORD}

    @functools.wraps(method)
    def called(self: FakeKube, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs).arguments
        flat = {k: v for k, v in bound.items() if k != "self" and k not in spread}
        for name in spread:
            flat.update(bound.get(name) or {})
        call = Call(method.__name__, copy.deepcopy(flat))
        self.calls.append(call)
        try:
            self._fault(call)
            return method(self, *args, **kwargs)
        except ApiError as err:
            call.error = err
            raise

    return called  # type: ignore[return-value]


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386, as the API server applies a merge patch: a mapping merges key by key, None deletes the key,
    anything else (a list too) replaces what was there."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def selected(obj: Mapping[str, Any], selector: str | None) -> bool:
    """Whether the object's labels match a labelSelector of `key=value` and `key` terms (what the callers send)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (selector or "").split(",")):
        key, equals, value = term.partition("=")
        if key not in labels or (equals and labels[key] != value):
            return False
    return True


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj["metadata"]
    return obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]


class FakeKube:
    """The API of one cluster, in memory; see the module's docstring for what it plays and what a test does."""

    def __init__(self, namespace: str = UNIT_NAMESPACE) -> None:
        self.namespace = namespace  # what put() gives an object that names none
        self.objects: dict[Key, dict[str, Any]] = {}
        self.tfjob_crd = True  # False: the training-operator's CRD is not installed (ResourceMissing)
        # Every namespace the fake serves exists and enforces this Pod Security level, unless a test puts one of its
        # own (kind Namespace, namespace ""); None: no such namespace.
        self.pod_security: str | None = "restricted"
        self.calls: list[Call] = []
        self.pod_statuses: list[dict[str, Any]] = []  # a created pod's status at its 1st, 2nd... read; the last stays
        self.logs: dict[LogKey, str] = {}  # set_log
        self.on_create: Callable[[dict[str, Any]], None] | None = None  # a controller's or the kubelet's reaction
        self.exec: ExecBehaviour | None = None
        self.portforward: ForwardBehaviour | None = None
        self._faults: list[Fault] = []
        self._version = 0
        self._uids = itertools.count(1)
        self._reads: dict[Key, int] = {}  # the pods the fake created: how often each was read (pod_statuses)

    # ---- what a test does -------------------------------------------------------------------------

    def put(self, obj: Mapping[str, Any], kind: str | None = None, namespace: str | None = None) -> dict[str, Any]:
        """Store an object as another writer (kubectl, the training-operator, the kubelet) would, not kept in
        `calls`: its kind (and apiVersion) and namespace filled in when missing, a uid issued when it has none. A
        resourceVersion it carries is kept (a run as the operator read it at "7"), and later ones come after it."""
        stored = copy.deepcopy(dict(obj))
        stored.setdefault("kind", kind)
        stored.setdefault("apiVersion", API_VERSIONS[stored["kind"]])
        meta = stored.setdefault("metadata", {})
        meta.setdefault("namespace", namespace or self.namespace)
        meta.setdefault("uid", f"uid-{next(self._uids)}")
        if str(meta.get("resourceVersion", "")).isdigit():
            self._version = max(self._version, int(meta["resourceVersion"]))
        else:
            meta["resourceVersion"] = self._next_version()
        self.objects[key_of(stored)] = stored
        return copy.deepcopy(stored)

    def stored(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object as the store has it now (a copy), not kept in `calls`."""
        return copy.deepcopy(self.objects.get((API_VERSIONS[kind], kind, namespace or self.namespace, name)))

    def set_log(self, pod: str, text: str, container: str = CONTAINER_NAME, previous: bool = False,
                namespace: str | None = None) -> None:  # fmt: skip
        """The container's log as the kubelet keeps it (previous: the container before its last restart). Kept
        apart from the pod objects, so a test gives the log of a pod it does not build."""
        self.logs[(namespace or self.namespace, pod, container, previous)] = text

    def add_event(self, kind: str, name: str, reason: str, message: str, namespace: str | None = None,
                  **fields: Any) -> dict[str, Any]:  # fmt: skip
        """A core Event about the object (object_events, pod_events find it); fields: lastTimestamp, type..."""
        event = {"metadata": {"name": f"{name}.{next(self._uids)}"}, "involvedObject": {"kind": kind, "name": name},
                 "reason": reason, "message": message, **fields}  # fmt: skip
        return self.put(event, "Event", namespace)

    def fail(self, method: str, error: ApiError, times: int | None = 1,
             when: Callable[[dict[str, Any]], bool] | None = None) -> None:  # fmt: skip
        """Make the next `times` calls of `method` (None: all) whose arguments satisfy `when` raise `error`."""
        self._faults.append(Fault(method, error, times, when))

    def succeeded(self, method: str) -> list[dict[str, Any]]:
        """The arguments of each call of `method` that raised nothing, in order, as the caller passed them."""
        return [call.args for call in self.calls if call.method == method and call.error is None]

    # ---- objects ----------------------------------------------------------------------------------

    @api
    def request(self, method: str, path: str, body: Any = None, query: list[tuple[str, str]] | None = None,
                content_type: str = "application/json") -> dict[str, Any]:  # fmt: skip
        """What callers send through the raw call: GET a collection, in a namespace or cluster-wide."""
        parts = path.strip("/").split("/")
        api_version, rest = (parts[1], parts[2:]) if parts[0] == "api" else ("/".join(parts[1:3]), parts[3:])
        namespace = rest[1] if len(rest) == 3 and rest[0] == "namespaces" else None
        kinds = [k for (v, k), plural in _PLURALS.items() if v == api_version and [plural] == rest[-1:]]
        if method != "GET" or not kinds or len(rest) not in (1, 3):
            raise ApiError(405, "MethodNotAllowed", f"the fake serves GET of a collection, not {method} {path}")
        selector = dict(query or []).get("labelSelector")
        namespaces = [namespace] if namespace is not None else sorted({key[2] for key in self.objects})
        return {"items": [obj for ns in namespaces for obj in self._list(api_version, kinds[0], ns, selector)]}

    @api
    def create(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        key = self._served(key_of(manifest))
        if key in self.objects:
            raise AlreadyExists(409, "AlreadyExists", f'{_PLURALS[key[:2]]} "{key[3]}" already exists',
                                {"name": key[3], "kind": key[1]})  # fmt: skip
        stored = copy.deepcopy(dict(manifest))
        meta = stored["metadata"]
        meta.update(uid=f"uid-{next(self._uids)}", resourceVersion=self._next_version(), generation=1)
        self.objects[key] = stored
        if key[1] == "Pod":
            self._reads[key] = 0
        if self.on_create is not None:
            self.on_create(copy.deepcopy(stored))
        return copy.deepcopy(stored)

    @api
    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.objects.get(self._served((api_version, kind, namespace, name)))
        if found is None and kind == "Namespace" and self.pod_security is not None:
            return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {
                "pod-security.kubernetes.io/enforce": self.pod_security}}}  # fmt: skip
        return copy.deepcopy(found)

    @api
    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        self.objects.pop(_addressed((api_version, kind, namespace, name)), None)  # gone already is fine, as in Kube

    @api
    def patch(self, api_version: str, kind: str, namespace: str, name: str, body: Any,
              content_type: str = "application/merge-patch+json",
              subresource: str | None = None) -> dict[str, Any]:  # fmt: skip
        key = _addressed((api_version, kind, namespace, name))
        if content_type == "application/json-patch+json":
            return self._json_patch(key, body)
        return self._patch(key, body, str((body.get("metadata") or {}).get("resourceVersion") or "") or None)

    @api
    def list_objects(self, api_version: str, kind: str, namespace: str, selector: str | None = None
                     ) -> list[dict[str, Any]]:  # fmt: skip
        _addressed((api_version, kind, namespace, ""))
        return self._list(api_version, kind, namespace, selector)

    @api
    def set_owner(self, api_version: str, kind: str, namespace: str, name: str,
                  owner: Mapping[str, Any]) -> dict[str, Any]:  # fmt: skip
        return self._patch((api_version, kind, namespace, name), {"metadata": {"ownerReferences": [dict(owner)]}})

    # ---- a run and its children -------------------------------------------------------------------

    @api
    def get_run(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.objects.get((API_VERSION, KIND, namespace, name)))

    @api
    def list_runs(self, namespace: str) -> list[dict[str, Any]]:
        return self._list(API_VERSION, KIND, namespace)

    @api
    def patch_run_spec(self, namespace: str, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        return self._patch((API_VERSION, KIND, namespace, name), {"spec": dict(spec)})

    @api
    def patch_run_status(
        self, namespace: str, name: str, status: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any]:
        return self._patch((API_VERSION, KIND, namespace, name), {"status": dict(status)}, resource_version)

    @api
    def get_tfjob(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.objects.get(self._served((TFJOB_API_VERSION, TFJOB_KIND, namespace, name))))

    @api
    def delete_tfjob(self, namespace: str, name: str, uid: str) -> None:
        # Immediate, as every delete here (no foreground wait for the pods); a uid that differs leaves it, as in Kube.
        key = (TFJOB_API_VERSION, TFJOB_KIND, namespace, name)
        if (self.objects.get(key) or {}).get("metadata", {}).get("uid") == uid:
            del self.objects[key]

    @api
    def patch_tfjob_run_policy(self, namespace: str, name: str, annotations: Mapping[str, str | None] | None = None,
                               **fields: Any) -> dict[str, Any]:  # fmt: skip
        body: dict[str, Any] = {"spec": {"runPolicy": fields}}
        if annotations:
            body["metadata"] = {"annotations": dict(annotations)}
        return self._patch((TFJOB_API_VERSION, TFJOB_KIND, namespace, name), body)

    @api
    def get_pvc(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.objects.get(("v1", "PersistentVolumeClaim", namespace, name)))

    @api
    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.objects.get(("v1", "ConfigMap", namespace, name)))

    # ---- pods: their logs, events and streams ------------------------------------------------------

    @api
    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        key = ("v1", "Pod", namespace, name)
        stored = self.objects.get(key)
        if stored is not None and key in self._reads and self.pod_statuses:
            self._reads[key] += 1
            status = self.pod_statuses[min(self._reads[key], len(self.pod_statuses)) - 1]
            if stored.get("status") != status:  # the kubelet writes the whole status: a new resourceVersion
                meta = {**stored["metadata"], "resourceVersion": self._next_version()}
                self.objects[key] = {**stored, "metadata": meta, "status": copy.deepcopy(status)}
        return copy.deepcopy(self.objects.get(key))

    @api
    def delete_pod(self, namespace: str, name: str) -> None:
        self.objects.pop(("v1", "Pod", namespace, name), None)

    @api
    def list_pods(self, namespace: str) -> list[dict[str, Any]]:
        return self._list("v1", "Pod", namespace)

    @api
    def list_job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        return self._list("v1", "Pod", namespace, f"{JOB_NAME_LABEL}={job}")

    @api
    def pod_log(self, namespace: str, pod: str, container: str, tail_lines: int | None = None,
                limit_bytes: int | None = None, previous: bool = False, timestamps: bool = False,
                since_seconds: int | None = None) -> str | None:  # fmt: skip
        # No log set: no such pod, its container not started or (previous) not restarted; Kube says None to all.
        text = self.logs.get((namespace, pod, container, previous))
        if text is None:
            return None
        text = _tail(text, tail_lines)
        return text if limit_bytes is None else text.encode()[:limit_bytes].decode("utf-8", "replace")

    @api
    def follow_pod_log(self, namespace: str, pod: str, container: str, tail_lines: int | None) -> Iterator[str]:
        text = self.logs.get((namespace, pod, container, False))
        if text is None:  # what the API server says of a container that has not started
            raise ApiError(400, "BadRequest", f'container "{container}" in pod "{pod}" is waiting to start')
        yield from (line.removesuffix("\n") for line in _lines(_tail(text, tail_lines)))

    @api
    def pod_events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return self._events(namespace, "Pod", name)

    @api
    def object_events(self, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
        return self._events(namespace, kind, name)

    @api
    @contextlib.asynccontextmanager
    async def exec_stream(self, namespace: str, pod: str, container: str, argv: Sequence[str]
                          ) -> AsyncIterator[ExecStream]:  # fmt: skip
        far_end = self._stream_to(namespace, pod, container, "exec", self.exec)
        async with far_end(pod, container, argv) as stream:
            yield stream

    @api
    @contextlib.asynccontextmanager
    async def portforward_stream(self, namespace: str, pod: str, port: int) -> AsyncIterator[PortForwardStream]:
        far_end = self._stream_to(namespace, pod, None, "portforward", self.portforward)
        async with far_end(pod, port) as stream:
            yield stream

    # ---- the store ---------------------------------------------------------------------------------

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def _served(self, key: Key) -> Key:
        """The key of a kind the API serves: ResourceMissing for a TFJob without its CRD, as Kube's reads and
        creates raise it."""
        if key[0] == TFJOB_API_VERSION and not self.tfjob_crd:
            raise ResourceMissing(404, "NotFound", f"{TFJOB_CRD} is not installed")
        return _addressed(key)

    def _patch(self, key: Key, body: Mapping[str, Any], resource_version: str | None = None) -> dict[str, Any]:
        """A merge patch, guarded by the resourceVersion when given: NotFound, Conflict, or the object as patched."""
        stored = self.objects.get(key)
        if stored is None:
            raise NotFound(404, "NotFound", f'{_PLURALS[key[:2]]} "{key[3]}" not found', {"name": key[3]})
        if resource_version and resource_version != stored["metadata"]["resourceVersion"]:
            what = f'{_PLURALS[key[:2]]} "{key[3]}"'
            raise Conflict(409, "Conflict", f"Operation cannot be fulfilled on {what}: the object has been modified")
        patched = merge(stored, body)
        if patched.get("spec") != stored.get("spec"):
            patched["metadata"]["generation"] = int(stored["metadata"].get("generation") or 0) + 1
        patched["metadata"]["resourceVersion"] = self._next_version()
        self.objects[key] = patched
        return copy.deepcopy(patched)

    def _json_patch(self, key: Key, operations: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """A JSON patch (RFC 6902) of `add`, `replace` and `remove` at object paths, as the API server applies one: a
        resourceVersion it sets is a precondition (Conflict when stale), as in a merge patch."""
        stored = self.objects.get(key)
        if stored is None:
            raise NotFound(404, "NotFound", f'{_PLURALS[key[:2]]} "{key[3]}" not found', {"name": key[3]})
        patched = copy.deepcopy(stored)
        for op in operations:
            *parents, last = [part.replace("~1", "/").replace("~0", "~") for part in op["path"].split("/")[1:]]
            target = functools.reduce(lambda obj, part: obj[part], parents, patched)
            if op["op"] == "remove":
                del target[last]
            elif op["op"] == "replace" and last not in target:
                raise ApiError(422, "Invalid", f"replace {op['path']}: no such member")
            else:
                target[last] = copy.deepcopy(op["value"])
        version = patched["metadata"].get("resourceVersion")
        if version != stored["metadata"]["resourceVersion"]:
            what = f'{_PLURALS[key[:2]]} "{key[3]}"'
            raise Conflict(409, "Conflict", f"Operation cannot be fulfilled on {what}: the object has been modified")
        if patched.get("spec") != stored.get("spec"):
            patched["metadata"]["generation"] = int(stored["metadata"].get("generation") or 0) + 1
        patched["metadata"]["resourceVersion"] = self._next_version()
        self.objects[key] = patched
        return copy.deepcopy(patched)

    def _list(self, api_version: str, kind: str, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
        return [copy.deepcopy(obj) for (v, k, ns, _), obj in self.objects.items()
                if (v, k, ns) == (api_version, kind, namespace) and selected(obj, selector)]  # fmt: skip

    def _events(self, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
        involved = {"kind": kind, "name": name}
        return [event for event in self._list("v1", "Event", namespace) if event["involvedObject"] == involved]

    def _stream_to(self, namespace: str, pod: str, container: str | None, sub: str, behaviour: B | None) -> B:
        """The test's far end of the session, or the refusal the API server's handshake would give (Kube turns
        it into this ApiError)."""
        found = self.objects.get(("v1", "Pod", namespace, pod))
        containers = [c["name"] for c in ((found or {}).get("spec") or {}).get("containers") or []]
        refused = "ExecRefused" if sub == "exec" else "PortForwardRefused"
        if found is None:
            raise ApiError(404, refused, f'{sub} in pod {pod}: pods "{pod}" not found')
        if container is not None and container not in containers:
            raise ApiError(400, refused, f"{sub} in pod {pod}: container {container} is not valid for pod {pod}")
        if behaviour is None:
            raise ApiError(501, refused, f"{sub} in pod {pod}: the test gave the fake no {sub} behaviour")
        return behaviour

    def _fault(self, call: Call) -> None:
        for fault in self._faults:
            if fault.method == call.method and (fault.when is None or fault.when(call.args)):
                if fault.times is not None:
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove(fault)
                raise fault.error


def _addressed(key: Key) -> Key:
    """The key, if kube.py addresses its kind (api.PLURALS); KeyError otherwise, as Kube raises it."""
    PLURALS[key[:2]]
    return key


def _lines(text: str) -> list[str]:
    """The log's lines, each with its newline (the last may have none): the kubelet splits at newlines only."""
    return re.findall(r"[^\n]*\n|[^\n]+$", text)


def _tail(text: str, lines: int | None) -> str:
    """The last `lines` lines, as the kubelet's tailLines gives them (0: none)."""
    if lines is None:
        return text
    return "".join(_lines(text)[-lines:]) if lines > 0 else ""


CLUSTER_TRAINER_IMAGE = "registry.example:5000/ml/distml/trainer@sha256:" + "0" * 64


def operator_deployment(*watched: str, image: str = CLUSTER_TRAINER_IMAGE) -> dict[str, Any]:
    """An operator's Deployment as deploy/ installs it (dtr-system, label app.kubernetes.io/name=dtr-operator) watching
    these namespaces (none: all), its default trainer image DTR_TRAINER_IMAGE (a registry install's)."""
    args = [f"--namespace={ns}" for ns in watched] or ["--all-namespaces"]
    container = {"name": "operator", "args": ["--log-format=json", *args],
                 "env": [{"name": "DTR_TRAINER_IMAGE", "value": image}]}  # fmt: skip
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "dtr-operator", "namespace": "dtr-system",
                         "labels": {"app.kubernetes.io/name": "dtr-operator"}},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [container]}}}}  # fmt: skip
