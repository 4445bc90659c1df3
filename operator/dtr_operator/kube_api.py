"""The calls the operator, the client and the CLI make on the Kubernetes API: the KubeApi Protocol.

kube.Kube is the one implementation that talks to an API server; the unit tier's
in-memory fake (tests/support/fake_kube.py) is the other. A unit test holds both to these signatures, so a Kube
method renamed or changed fails there, not silently in a hand-written test double. Its own module because kube.py
is near its size limit; the errors named below are kube.py's (NotFound, AlreadyExists, Conflict, ResourceMissing,
ApiError).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from .kube_streams import ExecStream, PortForwardStream


class KubeApi(Protocol):
    """What callers may ask of the API; each method's meaning is in its docstring on kube.Kube."""

    # The raw call, for the few reads no method below covers (dtr namespaces: the operators' Deployments).
    def request(self, method: str, path: str, body: Any = None, query: list[tuple[str, str]] | None = None,
                content_type: str = "application/json") -> dict[str, Any]: ...  # fmt: skip

    # Objects by apiVersion and kind (api.PLURALS names the kinds).
    def create(self, manifest: Mapping[str, Any]) -> dict[str, Any]: ...
    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None: ...
    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None: ...
    def patch(self, api_version: str, kind: str, namespace: str, name: str, body: Any,
              content_type: str = "application/merge-patch+json",
              subresource: str | None = None) -> dict[str, Any]: ...  # fmt: skip
    def list_objects(self, api_version: str, kind: str, namespace: str, selector: str | None = None
                     ) -> list[dict[str, Any]]: ...  # fmt: skip
    def set_owner(self, api_version: str, kind: str, namespace: str, name: str,
                  owner: Mapping[str, Any]) -> dict[str, Any]: ...  # fmt: skip

    # A run and its children.
    def get_run(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def list_runs(self, namespace: str) -> list[dict[str, Any]]: ...
    def patch_run_spec(self, namespace: str, name: str, spec: Mapping[str, Any]) -> dict[str, Any]: ...
    def patch_run_status(
        self, namespace: str, name: str, status: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any]: ...
    def get_tfjob(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def delete_tfjob(self, namespace: str, name: str, uid: str) -> None: ...
    def patch_tfjob_run_policy(self, namespace: str, name: str, annotations: Mapping[str, str | None] | None = None,
                               **fields: Any) -> dict[str, Any]: ...  # fmt: skip
    def get_pvc(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    # Pods: a TFJob's workers, the transfer and TensorBoard pods; their logs, events and streams.
    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def delete_pod(self, namespace: str, name: str) -> None: ...
    def list_pods(self, namespace: str) -> list[dict[str, Any]]: ...
    def list_job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]: ...
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
    ) -> str | None: ...
    def follow_pod_log(self, namespace: str, pod: str, container: str, tail_lines: int | None) -> Iterator[str]: ...
    def pod_events(self, namespace: str, name: str) -> list[dict[str, Any]]: ...
    def object_events(self, namespace: str, kind: str, name: str) -> list[dict[str, Any]]: ...
    def exec_stream(self, namespace: str, pod: str, container: str, argv: Sequence[str]
                    ) -> AbstractAsyncContextManager[ExecStream]: ...  # fmt: skip
    def portforward_stream(self, namespace: str, pod: str, port: int
                           ) -> AbstractAsyncContextManager[PortForwardStream]: ...  # fmt: skip
