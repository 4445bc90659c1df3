"""The only module that talks to the Kubernetes API (the operator's own calls; kopf makes its own). Plain JSON dicts in
and out over the official client's REST layer, so the manifests the pure builders make go to the API server exactly
as written (no model round trip), and every error becomes one of the few exceptions below."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import ssl
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import aiohttp
import urllib3
import yarl
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from . import __version__, metrics
from .api import API_VERSION, JOB_NAME_LABEL, KIND, PLURAL, PLURALS, TFJOB_API_VERSION, TFJOB_CRD, TFJOB_PLURAL
from .kube_streams import EXEC_CLOSE_TIMEOUT, EXEC_PROTOCOLS, PORTFORWARD_PROTOCOLS, ExecStream, PortForwardStream

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = (5, 30)  # connect, read (seconds)
FIELD_MANAGER = "dtr-operator"
USER_AGENT = f"dtr-operator/{__version__}"


class NoCredentials(Exception):
    """Neither a service account nor a usable kubeconfig; the message says which file was tried."""


DEFAULT_KUBECONFIG = "~/.kube/config"


def cli_kubeconfig(env: Mapping[str, str], default_exists: bool) -> str | None:
    """The kubeconfig a dtr command uses, in kubectl's order: KUBECONFIG (which `dtr --kubeconfig` sets), else
    ~/.kube/config when it exists; None: neither, so the pod's service account, if in a pod. A user's own
    credentials win over those of the pod (a notebook, a CI job) the command happens to run in. Pure."""
    if env.get("KUBECONFIG"):
        return env["KUBECONFIG"]
    return DEFAULT_KUBECONFIG if default_exists else None


class ApiError(Exception):
    """A failed API call: HTTP status (0 = no answer), the API's reason and message."""

    def __init__(self, status: int, reason: str, message: str, details: Mapping[str, Any] | None = None):
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.details = dict(details or {})

    @property
    def retryable(self) -> bool:
        # No answer, throttled, timeouts, server errors: try again later. 4xx otherwise: it will not fix itself.
        return self.status == 0 or self.status == 429 or self.status >= 500 or self.status == 408


class AlreadyExists(ApiError):
    pass


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    """The object changed since we read it (resourceVersion precondition failed)."""


class ResourceMissing(ApiError):
    """The resource type itself is not served (its CRD is not installed, or not Established yet)."""


def _api_path(api_version: str) -> str:
    return "/api/v1" if api_version == "v1" else f"/apis/{api_version}"


def _path(api_version: str, namespace: str, plural: str, name: str | None = None, sub: str | None = None) -> str:
    scope = f"/namespaces/{quote(namespace, safe='')}" if namespace else ""  # "": of no namespace (a Namespace)
    path = f"{_api_path(api_version)}{scope}/{plural}"
    if name is not None:
        path += f"/{quote(name, safe='')}"
    if sub is not None:
        path += f"/{sub}"
    return path


def _ssl_context(conf: client.Configuration) -> ssl.SSLContext:
    """The TLS settings of the client's configuration (the kubeconfig's or the service account's)."""
    context = ssl.create_default_context(cafile=conf.ssl_ca_cert or None)
    if not conf.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif conf.assert_hostname is False:
        context.check_hostname = False
    if conf.cert_file:
        context.load_cert_chain(conf.cert_file, conf.key_file)
    return context


class Kube:
    """A handle on one API server, shared by kopf's thread pool (the API client is thread-safe)."""

    def __init__(self, api_client: client.ApiClient):
        self.api = api_client

    @classmethod
    def from_environment(cls) -> Kube:
        """In a pod: its service account; elsewhere: KUBECONFIG / ~/.kube/config. NoCredentials if neither."""
        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            # Read KUBECONFIG now: the client library only reads it once, when first imported.
            where = os.environ.get("KUBECONFIG")
            try:
                config.load_kube_config(config_file=where, client_configuration=configuration)
            except (config.ConfigException, OSError) as err:
                raise NoCredentials(
                    f"no Kubernetes credentials: not in a pod, and the kubeconfig "
                    f"({where or '~/.kube/config'}) cannot be used: {err}"
                ) from None
        return cls._from(configuration)

    @classmethod
    def for_cli(cls) -> Kube:
        """For dtr's commands: the user's kubeconfig before the pod's service account (cli_kubeconfig).
        NoCredentials if the kubeconfig chosen cannot be used (no quiet fall back to the service account), or
        there is neither."""
        configuration = client.Configuration()
        where = cli_kubeconfig(os.environ, os.path.exists(os.path.expanduser(DEFAULT_KUBECONFIG)))
        try:
            if where is None:
                config.load_incluster_config(client_configuration=configuration)
            else:
                config.load_kube_config(config_file=where, client_configuration=configuration)
        except (config.ConfigException, OSError) as err:
            tried = (f"the kubeconfig ({where}) cannot be used" if where is not None
                     else f"no kubeconfig (KUBECONFIG, {DEFAULT_KUBECONFIG}) and not in a pod")  # fmt: skip
            raise NoCredentials(f"no Kubernetes credentials: {tried}: {err}") from None
        return cls._from(configuration)

    @classmethod
    def _from(cls, configuration: client.Configuration) -> Kube:
        configuration.connection_pool_maxsize = 16
        api = client.ApiClient(configuration)
        api.user_agent = USER_AGENT
        return cls(api)

    # ---- transport --------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        return _decoded(self._counted(method, path, body, query, content_type, "application/json"))

    def _counted(
        self, method: str, path: str, body: Any, query: list[tuple[str, str]] | None, content_type: str, accept: str
    ) -> bytes:
        metrics.API_REQUESTS.inc()
        try:
            return self._request(method, path, body, query, content_type, accept)
        except ApiError as err:
            metrics.count_api_error(err.status)
            raise

    def _request(
        self, method: str, path: str, body: Any, query: list[tuple[str, str]] | None, content_type: str, accept: str
    ) -> bytes:
        headers = {"Accept": accept, "Content-Type": content_type}
        if method in ("POST", "PATCH", "PUT"):
            # Our writes show up as ours in managedFields.
            query = [*(query or []), ("fieldManager", FIELD_MANAGER)]
        status, raw = self._send(method, path, body, query or [], headers)
        if 200 <= status < 300:
            return raw
        data = _decoded(raw)
        raise _error(status, data if isinstance(data, Mapping) else {})

    def _send(
        self, method: str, path: str, body: Any, query: list[tuple[str, str]], headers: dict[str, str]
    ) -> tuple[int, bytes]:
        """The API server's answer (HTTP status, body), whatever the status; ApiError 0 when there is none."""
        try:
            method, url, headers, body, _ = self.api.param_serialize(
                method=method, resource_path=path, query_params=query, header_params=headers,
                body=body, auth_settings=["BearerToken"],
            )  # fmt: skip
            response = self.api.call_api(
                method, url, header_params=headers, body=body, _request_timeout=REQUEST_TIMEOUT
            )
            return response.status, response.read()
        except ApiException as err:  # no HTTP answer at all (connection refused, timeout)
            raise ApiError(0, "Unreachable", str(err.reason or err)) from None
        except (OSError, urllib3.exceptions.HTTPError) as err:
            # urllib3 gives up after its own retries with MaxRetryError, not an OSError.
            raise ApiError(0, "Unreachable", str(err)) from None

    # ---- objects ----------------------------------------------------------------------------

    def create(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Create a namespaced object; AlreadyExists on 409, ResourceMissing if its type is not served."""
        api_version, kind = manifest["apiVersion"], manifest["kind"]
        meta = manifest["metadata"]
        path = _path(api_version, meta["namespace"], PLURALS[(api_version, kind)])
        try:
            return self.request("POST", path, body=manifest)
        except NotFound as err:
            # POST to a collection is only 404 when the resource type (or the namespace) is missing.
            if api_version == TFJOB_API_VERSION and not self.tfjob_crd_served():
                raise ResourceMissing(404, "NotFound", f"{TFJOB_CRD} is not installed or not served yet") from None
            raise err from None

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None if it does not exist; ResourceMissing if its type is not served."""
        try:
            return self.request("GET", _path(api_version, namespace, PLURALS[(api_version, kind)], name))
        except NotFound as err:
            # The API names the object it did not find; a bare 404 means no such resource type.
            bare = not err.details.get("name")
            if api_version == TFJOB_API_VERSION and bare and not self.tfjob_crd_served():
                raise ResourceMissing(404, "NotFound", f"{TFJOB_CRD} is not installed or not served yet") from None
            return None

    def get_pvc(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get("v1", "PersistentVolumeClaim", namespace, name)

    def get_tfjob(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get(TFJOB_API_VERSION, "TFJob", namespace, name)

    def delete_tfjob(self, namespace: str, name: str, uid: str) -> None:
        """Delete the TFJob of this uid once its pods and services are gone (foreground); gone or replaced is fine."""
        options = {"propagationPolicy": "Foreground", "preconditions": {"uid": uid}}
        with contextlib.suppress(NotFound, Conflict):
            self.request("DELETE", _path(TFJOB_API_VERSION, namespace, "tfjobs", name), options)

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A run's code (spec.training.code.configMap); the operator's RBAC has get on configmaps, nothing more."""
        return self.get("v1", "ConfigMap", namespace, name)

    def patch(self, api_version: str, kind: str, namespace: str, name: str, body: Any,
              content_type: str = "application/merge-patch+json", subresource: str | None = None) -> dict[str, Any]:
        """A merge patch, or a JSON patch's operations (guard.py); NotFound, Conflict (a stale resourceVersion)."""
        path = _path(api_version, namespace, PLURALS[(api_version, kind)], name, subresource)
        return self.request("PATCH", path, body=body, content_type=content_type)

    def list_objects(self, api_version: str, kind: str, namespace: str, selector: str | None = None
                     ) -> list[dict[str, Any]]:  # fmt: skip
        """The objects of a kind in the namespace, those a labelSelector picks when given."""
        query = [("labelSelector", selector)] if selector else None
        path = _path(api_version, namespace, PLURALS[(api_version, kind)])
        return list(self.request("GET", path, query=query).get("items") or [])

    def set_owner(self, api_version: str, kind: str, namespace: str, name: str,
                  owner: Mapping[str, Any]) -> dict[str, Any]:  # fmt: skip
        """Merge-patch the object's ownerReferences to [owner] (dtr submit: the run owns its code's ConfigMap)."""
        return self.patch(api_version, kind, namespace, name, {"metadata": {"ownerReferences": [dict(owner)]}})

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        """Delete the object; gone already is fine (dtr submit: the ConfigMap of a run the API refused)."""
        with contextlib.suppress(NotFound):
            self.request("DELETE", _path(api_version, namespace, PLURALS[(api_version, kind)], name))

    def tfjob_crd_served(self) -> bool:
        """Exists and is Established: one just created, or whose names clash with another CRD's, is not served yet."""
        try:
            crd = self.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{TFJOB_CRD}")
        except NotFound:
            return False
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    def list_job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        return self.list_objects("v1", "Pod", namespace, f"{JOB_NAME_LABEL}={job}")

    def pod_log(
        self,
        namespace: str,
        pod: str,
        container: str,
        tail_lines: int | None = None,
        limit_bytes: int | None = None,
        previous: bool = False,
        timestamps: bool = False,
        since_seconds: int | None = None,
    ) -> str | None:
        """A container's log (its end, with tail_lines/limit_bytes; its last since_seconds), or None when there is
        none to read (400): no such pod, the container has not started, or (previous) it has not restarted."""
        query = _log_query(container, tail_lines, limit_bytes, previous, timestamps, follow=False)
        if since_seconds is not None:
            query.append(("sinceSeconds", str(since_seconds)))
        try:
            path = _path("v1", namespace, "pods", pod, "log")
            raw = self._counted("GET", path, None, query, "application/json", "*/*")
        except NotFound:
            return None
        except ApiError as err:
            if err.status == 400:
                return None
            raise
        return raw.decode("utf-8", "replace")

    def follow_pod_log(self, namespace: str, pod: str, container: str, tail_lines: int | None) -> Iterator[str]:
        """The container's log lines as they are written, until the container stops (or the call is dropped)."""
        query = _log_query(container, tail_lines, None, previous=False, timestamps=False, follow=True)
        method, url, headers, _, _ = self.api.param_serialize(
            method="GET", resource_path=_path("v1", namespace, "pods", pod, "log"), query_params=query,
            header_params={"Accept": "*/*"}, auth_settings=["BearerToken"],
        )  # fmt: skip
        metrics.API_REQUESTS.inc()
        try:
            # No read timeout: a quiet training step can take longer than any sensible one.
            response = self.api.call_api(method, url, header_params=headers, _request_timeout=(5, None))
        except (ApiException, OSError, urllib3.exceptions.HTTPError) as err:
            raise ApiError(0, "Unreachable", str(getattr(err, "reason", None) or err)) from None
        if response.status >= 300:
            raw = response.read()
            try:
                data = json.loads(raw)
            except ValueError:
                data = {"message": raw.decode("utf-8", "replace")[:300]}
            raise _error(response.status, data if isinstance(data, Mapping) else {})
        pending = b""
        try:
            for chunk in response.response.stream(64 * 1024, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line.decode("utf-8", "replace")
        except (OSError, urllib3.exceptions.HTTPError):
            pass  # the API server or the kubelet ended the stream: what was read is all there is
        finally:
            response.response.release_conn()
        if pending:
            yield pending.decode("utf-8", "replace")

    # ---- pods: dtr data put, dtr model get (dtr_client/volume.py) ---------------------------

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get("v1", "Pod", namespace, name)

    def delete_pod(self, namespace: str, name: str) -> None:
        """Delete the pod (its own grace period); gone already is fine."""
        with contextlib.suppress(NotFound):
            self.request("DELETE", _path("v1", namespace, "pods", name))

    def list_pods(self, namespace: str) -> list[dict[str, Any]]:
        return self.list_objects("v1", "Pod", namespace)

    def pod_events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return self.object_events(namespace, "Pod", name)

    def object_events(self, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
        """The core events about one object (the operator: a TFJob's, which tell of pods it could not create)."""
        selector = f"involvedObject.kind={kind},involvedObject.name={name}"
        data = self.request("GET", _path("v1", namespace, "events"), query=[("fieldSelector", selector)])
        return list(data.get("items") or [])

    @contextlib.asynccontextmanager
    async def exec_stream(self, namespace: str, pod: str, container: str, argv: Sequence[str]
                          ) -> AsyncIterator[ExecStream]:  # fmt: skip
        """An exec session of argv in the container, over the API server's WebSocket (what `kubectl exec`
        does), with this client's credentials and TLS settings. ApiError when the API server refuses it."""
        query = [("container", container), ("stdin", "true"), ("stdout", "true"), ("stderr", "true")]
        query += [("command", arg) for arg in argv]
        async with self._websocket(namespace, pod, "exec", query, EXEC_PROTOCOLS) as ws:
            yield ExecStream(ws)

    @contextlib.asynccontextmanager
    async def portforward_stream(self, namespace: str, pod: str, port: int) -> AsyncIterator[PortForwardStream]:
        """One TCP connection to the pod's port (its loopback, in its network namespace), over the API server's
        port-forward WebSocket: the API server hands it to the kubelet, no NetworkPolicy is in the path."""
        async with self._websocket(namespace, pod, "portforward", [("ports", str(port))], PORTFORWARD_PROTOCOLS) as ws:
            yield PortForwardStream(ws)

    @contextlib.asynccontextmanager
    async def _websocket(self, namespace: str, pod: str, sub: str, query: list[tuple[str, str]],
                         protocols: Sequence[str]) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:  # fmt: skip
        """A WebSocket to a pod's subresource (exec, portforward) with this client's credentials and TLS."""
        _, url, headers, _, _ = self.api.param_serialize(
            method="GET", resource_path=_path("v1", namespace, "pods", pod, sub),
            query_params=query, header_params={}, auth_settings=["BearerToken"],
        )  # fmt: skip
        conf = self.api.configuration
        headers = {**headers, "User-Agent": USER_AGENT}
        metrics.API_REQUESTS.inc()
        async with aiohttp.ClientSession() as session:
            try:
                ws = await session.ws_connect(
                    yarl.URL(url, encoded=True), protocols=protocols, headers=headers,
                    timeout=aiohttp.ClientWSTimeout(ws_close=EXEC_CLOSE_TIMEOUT),
                    ssl=_ssl_context(conf) if url.startswith("https:") else False,
                    server_hostname=conf.tls_server_name or None, proxy=conf.proxy or None,
                    proxy_headers=conf.proxy_headers or None, max_msg_size=0,
                )  # fmt: skip
            except aiohttp.WSServerHandshakeError as err:
                refused = "ExecRefused" if sub == "exec" else "PortForwardRefused"
                raise ApiError(err.status, refused, f"{sub} in pod {pod}: {err.message}") from None
            except (aiohttp.ClientError, OSError) as err:
                raise ApiError(0, "Unreachable", str(err)) from None
            async with ws:
                yield ws

    def patch_tfjob_run_policy(self, namespace: str, name: str, annotations: Mapping[str, str | None] | None = None,
                               **fields: Any) -> dict[str, Any]:  # fmt: skip
        """Merge-patch fields of the TFJob's runPolicy: suspend (the training-operator deletes or recreates
        its pods), cleanPodPolicy (a finished TFJob's pods are deleted as it says); and in the same write its
        annotations (None removes one)."""
        body: dict[str, Any] = {"spec": {"runPolicy": fields}}
        if annotations:
            body["metadata"] = {"annotations": dict(annotations)}
        return self.request(
            "PATCH",
            _path(TFJOB_API_VERSION, namespace, TFJOB_PLURAL, name),
            body=body,
            content_type="application/merge-patch+json",
        )

    def get_run(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", _path(API_VERSION, namespace, PLURAL, name))
        except NotFound:
            return None

    def list_runs(self, namespace: str) -> list[dict[str, Any]]:
        return self.list_objects(API_VERSION, KIND, namespace)

    def patch_run_spec(self, namespace: str, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Merge-patch the run's spec (spec.suspend: the only field that may change); NotFound if it is gone."""
        return self.patch(API_VERSION, KIND, namespace, name, {"spec": dict(spec)})

    def patch_run_status(
        self, namespace: str, name: str, status: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any]:
        """Merge-patch the run's status; with resource_version, Conflict if the run changed meanwhile."""
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        return self.request(
            "PATCH",
            _path(API_VERSION, namespace, PLURAL, name, "status"),
            body=body,
            content_type="application/merge-patch+json",
        )


def _log_query(
    container: str, tail_lines: int | None, limit_bytes: int | None, previous: bool, timestamps: bool, follow: bool
) -> list[tuple[str, str]]:
    query = [("container", container)]
    for key, value in (("tailLines", tail_lines), ("limitBytes", limit_bytes)):
        if value is not None:
            query.append((key, str(value)))
    for key, flag in (("previous", previous), ("timestamps", timestamps), ("follow", follow)):
        if flag:
            query.append((key, "true"))
    return query


def current_namespace() -> str:
    """The namespace of the kubeconfig's current context ("default" when it names none), as kubectl uses."""
    try:
        _, active = config.list_kube_config_contexts(config_file=os.environ.get("KUBECONFIG"))
    except (config.ConfigException, OSError):
        return "default"
    return str((active or {}).get("context", {}).get("namespace") or "default")


def _decoded(raw: bytes) -> Any:
    """An answer's JSON ({} when empty), or its first 300 characters as {"message": ...} when not JSON."""
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        return {"message": raw.decode("utf-8", "replace")[:300]}


def _error(status: int, data: Mapping[str, Any]) -> ApiError:
    reason = str(data.get("reason") or status)
    message = str(data.get("message") or reason)
    details = data.get("details") if isinstance(data.get("details"), Mapping) else None
    if status == 404:
        return NotFound(status, reason, message, details)
    if status == 409 and reason == "AlreadyExists":
        return AlreadyExists(status, reason, message, details)
    if status == 409:
        return Conflict(status, reason, message, details)
    return ApiError(status, reason, message, details)
