"""The tests' API client: the admin identity through the kubernetes package, in-process (quicker than
kubectl per call). devcluster has its own, standard library only, for bring-up; bench/operator an async one."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dtr_operator.api import GROUP, PLURAL, REPLICA_INDEX_LABEL, VERSION
from dtr_operator.api import JOB_NAME_LABEL as JOB_LABEL
from dtr_operator.api import TFJOB_GROUP as TF_GROUP
from dtr_operator.api import TFJOB_PLURAL as TF_PLURAL
from dtr_operator.api import TFJOB_VERSION as TF_VERSION
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from .runs import run_doc


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Api:
    custom: client.CustomObjectsApi
    core: client.CoreV1Api

    @staticmethod
    def from_kubeconfig(path: str | None = None) -> Api:
        api = config.new_client_from_config(config_file=path or os.environ["KUBECONFIG"])
        return Api(client.CustomObjectsApi(api), client.CoreV1Api(api))

    # -- runs

    def create_run(self, namespace: str, name: str, spec: Any) -> tuple[int, str]:
        """(HTTP status, the server's message) for creating a run, with strict field validation as kubectl."""
        try:
            self.custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, run_doc(name, namespace, spec), field_validation="Strict"
            )
            return 201, ""
        except ApiException as err:
            try:
                message = json.loads(err.body).get("message", "")
            except (ValueError, TypeError):
                message = str(err.body)
            return err.status, message

    def create_run_dry(self, namespace: str, name: str, spec: Any) -> tuple[int, str, dict[str, Any] | None]:
        """create_run with server-side dry-run (dryRun=All): admission, schema, defaults and CEL rules run,
        nothing is stored. (HTTP status, the server's message, the object as it would be stored)."""
        try:
            got = self.custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, run_doc(name, namespace, spec), field_validation="Strict",
                dry_run="All",
            )  # fmt: skip
            return 201, "", got
        except ApiException as err:
            try:
                message = json.loads(err.body).get("message", "")
            except (ValueError, TypeError):
                message = str(err.body)
            return err.status, message, None

    def runs(self, namespace: str) -> list[dict[str, Any]]:
        return list(self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"])

    def run(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(lambda: self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name))

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        return (self.run(namespace, name) or {}).get("status") or {}

    # -- children

    def tfjob(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(
            lambda: self.custom.get_namespaced_custom_object(TF_GROUP, TF_VERSION, namespace, TF_PLURAL, name)
        )

    def tfjobs(self, selector: str, namespace: str | None = None) -> list[dict[str, Any]]:
        if namespace:
            got = self.custom.list_namespaced_custom_object(TF_GROUP, TF_VERSION, namespace, TF_PLURAL,
                                                            label_selector=selector)
        else:
            got = self.custom.list_cluster_custom_object(TF_GROUP, TF_VERSION, TF_PLURAL, label_selector=selector)
        return list(got["items"])

    def pvcs(self, selector: str, namespace: str | None = None) -> list[Any]:
        if namespace:
            return list(self.core.list_namespaced_persistent_volume_claim(namespace, label_selector=selector).items)
        return list(self.core.list_persistent_volume_claim_for_all_namespaces(label_selector=selector).items)

    def pvc(self, namespace: str, name: str) -> Any:
        return self._get(lambda: self.core.read_namespaced_persistent_volume_claim(name, namespace))

    def pods(self, namespace: str, job: str) -> list[Any]:
        pods = self.core.list_namespaced_pod(namespace, label_selector=f"{JOB_LABEL}={job}").items
        return sorted(pods, key=lambda p: int(p.metadata.labels.get(REPLICA_INDEX_LABEL, "0")))

    def delete_tfjob(self, namespace: str, name: str) -> None:
        self.custom.delete_namespaced_custom_object(TF_GROUP, TF_VERSION, namespace, TF_PLURAL, name)

    def create_tfjob(self, doc: dict[str, Any]) -> None:
        self.custom.create_namespaced_custom_object(TF_GROUP, TF_VERSION, doc["metadata"]["namespace"], TF_PLURAL, doc)

    def set_pod_terminated(self, namespace: str, name: str, exit_code: int, message: str | None) -> None:
        """Write a finished pod's status as a kubelet would (the tensorflow container terminated)."""
        started = now()
        terminated: dict[str, Any] = {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "startedAt": started,
            "finishedAt": now(),
        }
        if message is not None:
            terminated["message"] = message
        container = {"name": "tensorflow", "image": "x", "imageID": "", "restartCount": 0, "ready": False,
                     "state": {"terminated": terminated}}  # fmt: skip
        phase = "Succeeded" if exit_code == 0 else "Failed"
        body = {"status": {"phase": phase, "startTime": started, "containerStatuses": [container]}}
        self.core.patch_namespaced_pod_status(name, namespace, body)

    def set_pod_running(self, namespace: str, name: str) -> None:
        started = now()
        container = {"name": "tensorflow", "image": "x", "imageID": "", "restartCount": 0, "ready": True,
                     "state": {"running": {"startedAt": started}}}  # fmt: skip
        body = {"status": {"phase": "Running", "startTime": started, "containerStatuses": [container]}}
        self.core.patch_namespaced_pod_status(name, namespace, body)

    def events_for(self, namespace: str, name: str) -> list[Any]:
        selector = f"involvedObject.kind=DistTrainingRun,involvedObject.name={name}"
        return list(self.core.list_namespaced_event(namespace, field_selector=selector).items)

    @staticmethod
    def _get(call: Callable[[], Any]) -> Any:
        try:
            return call()
        except ApiException as err:
            if err.status == 404:
                return None
            raise
