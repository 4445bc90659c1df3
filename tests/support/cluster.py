"""A cluster as the tests talk to it: its kubeconfig and kubectl (see docs/cluster.md).

The fixtures that start one (`control_plane`, `namespace`) are in tests/conftest.py.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devcluster.controlplane import KUBECTL
from support import kubectl_subset

# The kinds the tests poll, as kubectl names them, read in-process (Cluster.read). A kubectl per poll cost its process
# about 66 ms of CPU and the API server 6 ms more (a new TLS connection each time), a read through one kept-alive
# connection 0.5 ms: the node tiers poll a run's status, pods and logs for most of their minutes, every 0.25 to 1 s.
# Raw JSON, as kubectl prints it, for the helpers written against kubectl's output; support/api.py is the typed client.
READ_KINDS = ("dtr", "distrainingruns", "dts", "tfjob", "pod", "events")


def resource_path(kind: str) -> str:
    """The API path of a kind of READ_KINDS (the group's, then the plural)."""
    group, plural, _ = kubectl_subset.KINDS[kind]
    return f"{group}/{plural}"


@dataclass(frozen=True)
class Cluster:
    """A kubeconfig to talk to, and the control plane's directory (None for an external cluster)."""

    kubeconfig: Path
    dir: Path | None

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; with check, a failure fails the test with kubectl's stderr. The commands
        kubectl_subset knows are answered in-process, as kubectl would (its docstring: why)."""
        request = kubectl_subset.plan(args, input)
        proc = None
        if request is not None and (client := _client_or_none(self.kubeconfig)) is not None:
            warnings: list[str] = []
            status, body = _call(client, request.method, request.path, request.query, request.body, timeout,
                                 request.content_type, request.headers, warnings)  # fmt: skip
            code, out, err = kubectl_subset.answer(request, status, body, tuple(warnings))
            if code == 0 or not request.retry:
                proc = subprocess.CompletedProcess([KUBECTL, *args], code, out, err)
            # kubectl's pace, not its CPU: tests written against its ~50 ms, and the training-operator under them,
            # lost races when two writes or a write and a read came ms apart (four CI runs, 2026-12-07).
            time.sleep(KUBECTL_PACE_SECONDS)
        if proc is None:
            proc = subprocess.run(
                [KUBECTL, f"--kubeconfig={self.kubeconfig}", *args],
                input=input, capture_output=True, check=False, text=True, timeout=timeout,
            )  # fmt: skip
        if check and proc.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}", pytrace=False)
        return proc

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def read(self, kind: str, namespace: str, name: str = "", strict: bool = True, **query: str) -> Any:
        """GET one object (name), a list, or a pod's log (query log=""), of a kind in READ_KINDS, in-process: the
        JSON (the log's text) kubectl would print; None when it is not there. Strict, any other answer fails the
        test, as kubectl_json does; else it is None too, as a kubectl with check=False."""
        group, plural = resource_path(kind).rsplit("/", 1)
        path = f"/{group}/namespaces/{namespace}/{plural}" + (f"/{name}" if name else "")
        log = query.pop("log", None) is not None
        status, body = _get(self.kubeconfig, path + ("/log" if log else ""), query)
        if 200 <= status < 300:
            return body if log else json.loads(body)
        if strict and status != 404 and not (log and status == 400):  # 400: the container has not started
            pytest.fail(f"GET {path} {query}: HTTP {status}: {body[-2000:]}", pytrace=False)
        return None

    def create(self, doc: dict[str, Any], check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.kubectl("create", "-f", "-", input=json.dumps(doc), check=check)

    def as_token(self, token: str, where: Path) -> Cluster:
        """The same cluster seen by a bearer token only (no client certificate to fall back on)."""
        admin = self.kubectl_json("config", "view", "--raw", "--minify")
        cluster = admin["clusters"][0]["cluster"]
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": cluster}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "c",
        }
        path = where / f"kubeconfig-token-{uuid.uuid4().hex[:6]}"
        path.write_text(json.dumps(doc))
        path.chmod(0o600)
        return Cluster(path, self.dir)


@functools.cache
def _client(kubeconfig: Path) -> Any:
    from kubernetes import config  # the op environment's; imported once a test reads

    return config.new_client_from_config(config_file=str(kubeconfig))


def _client_or_none(kubeconfig: Path) -> Any:
    """The kubeconfig's client, or None: no kubernetes package (the trainer environment), or a kubeconfig it cannot
    use (kubectl says why, and exits 1 where a test expects it)."""
    try:
        from kubernetes.config import ConfigException
    except ImportError:
        return None
    try:
        return _client(kubeconfig)
    except (ConfigException, OSError, ValueError):
        return None


def _get(kubeconfig: Path, path: str, query: dict[str, str]) -> tuple[int, str]:
    """(HTTP status, body) of a GET as the kubeconfig's identity, through the connections its client keeps."""
    return _call(_client(kubeconfig), "GET", path, query)


KUBECTL_PACE_SECONDS = 0.05  # what a kubectl process takes before its request: slept, not spent


def _call(client: Any, method: str, path: str, query: dict[str, str], doc: Any = None, timeout: float = 60,
          content_type: str = "application/json", extra: dict[str, str] | None = None,
          warnings: list[str] | None = None) -> tuple[int, str]:  # fmt: skip
    """(HTTP status, body) of a request through the client's kept-alive connections (status 0: no answer); the
    answer's Warning headers appended to `warnings`."""
    headers = {"Accept": "application/json, */*"} | ({"Content-Type": content_type} if doc is not None else {})
    headers |= extra or {}
    method, url, headers, body, post = client.param_serialize(
        method, path, query_params=list(query.items()), header_params=headers, body=doc,
        auth_settings=["BearerToken"],
    )  # fmt: skip
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        response = client.call_api(method, url, headers, body, post, _request_timeout=timeout)
        response.read()
        if warnings is not None:
            warnings.extend(response.response.headers.getlist("Warning"))
    except ApiException as err:
        return err.status, str(err.body or err.reason)
    except (HTTPError, OSError) as err:  # no answer (the API server restarting): kubectl's exit 1
        return 0, str(err)
    return response.status, response.data.decode(errors="replace")


@contextlib.contextmanager
def kubeconfig_set(path: Path) -> Iterator[None]:
    """KUBECONFIG names `path` inside, for the clients a test starts; as it was (or unset) after."""
    previous = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(path)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = previous


def namespace_name(test_name: str) -> str:
    """A valid, unique namespace name derived from the test's name."""
    stem = re.sub(r"[^a-z0-9-]+", "-", test_name.lower().removeprefix("test_")).strip("-")[:40].rstrip("-")
    return f"t-{stem}-{uuid.uuid4().hex[:6]}"
