"""dtr tensorboard's parts without a cluster or TensorBoard: the pod (transfer.tensorboard_pod), the pure helpers
of dtr_client.tensorboard, the wait for an answer, and the port-forward (kube.portforward_stream and the local
Forwarder) against a WebSocket server speaking the kubelet's port-forward protocol."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from dtr_client import tensorboard as board
from dtr_client import transfer as tr
from dtr_operator import kube, kube_streams
from dtr_operator.api import RUN_LABEL
from dtr_operator.builders import build_network_policy, build_tfjob
from dtr_operator.spec import parse_run
from kubernetes import client

from support.fake_kube import FakeKube
from support.route_server import serve_route
from support.runs import make_run


def run_spec(name: str = "mnist-cnn", **spec):
    return parse_run(make_run(spec, name=name, uid="u-1"))


# ---- the pod


def test_the_tensorboard_pod_serves_the_runs_log_dir_from_its_image_on_loopback():
    run = run_spec(image="registry.example/trainer:2")
    pod = tr.tensorboard_pod(run, "dtr-tensorboard-mnist-cnn-abc")
    [container] = pod["spec"]["containers"]
    assert container["image"] == "registry.example/trainer:2" == run.image
    assert container["command"] == ["python", "-m", "dtr_trainer.board", "--logdir", "/mnt/dtr/logs/mnist-cnn",
                                    "--host", "127.0.0.1", "--port", "6006"]  # fmt: skip
    assert container["ports"] == [{"name": "tensorboard", "containerPort": 6006, "protocol": "TCP"}]
    assert pod["metadata"]["name"] == "dtr-tensorboard-mnist-cnn-abc" and pod["metadata"]["namespace"] == "ml"


def test_the_tensorboard_pod_mounts_the_runs_claim_read_only_and_a_scratch_tmp():
    pod = tr.tensorboard_pod(run_spec(storage={"claimName": "shared"}), "p")
    spec, [container] = pod["spec"], pod["spec"]["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[tr.VOLUME]["persistentVolumeClaim"] == {"claimName": "shared", "readOnly": True}
    assert {"name": tr.VOLUME, "mountPath": "/mnt/dtr", "readOnly": True} in container["volumeMounts"]
    assert volumes[tr.SCRATCH]["emptyDir"]["sizeLimit"]
    assert {"name": tr.SCRATCH, "mountPath": "/tmp"} in container["volumeMounts"]


def test_the_tensorboard_pod_is_restricted():
    spec = tr.tensorboard_pod(run_spec(), "p")["spec"]
    assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                                       "seccompProfile": {"type": "RuntimeDefault"}}  # fmt: skip
    [container] = spec["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True,
        "runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000}  # fmt: skip
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert spec["restartPolicy"] == "Never" and "hostNetwork" not in spec
    assert container["resources"]["limits"]["memory"] and container["resources"]["requests"]["cpu"]


def test_the_tensorboard_pod_is_owned_by_the_run_ends_by_itself_and_is_labelled_for_it():
    pod = tr.tensorboard_pod(run_spec(), "p")
    assert pod["metadata"]["ownerReferences"] == [{"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingRun",
                                                   "name": "mnist-cnn", "uid": "u-1", "controller": False,
                                                   "blockOwnerDeletion": False}]  # fmt: skip
    assert 0 < pod["spec"]["activeDeadlineSeconds"] == tr.TENSORBOARD_DEADLINE <= 24 * 3600
    assert pod["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "dtr", "app.kubernetes.io/name": "tensorboard",
                                         tr.TENSORBOARD_OF: "mnist-cnn"}  # fmt: skip


def test_the_tensorboard_pod_is_not_one_the_runs_network_policy_lets_reach_the_workers():
    run = run_spec()
    pod_labels = tr.tensorboard_pod(run, "p")["metadata"]["labels"]
    policy = build_network_policy(run)
    admitted = policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
    assert RUN_LABEL in admitted and not admitted.items() <= pod_labels.items()
    workers = build_tfjob(run)["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]
    assert admitted.items() <= workers.items()  # the check above is of the labels that matter


def test_the_tensorboard_pod_joins_the_node_of_a_read_write_once_claim_in_use():
    pod = tr.tensorboard_pod(run_spec(), "p", node="n1")
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["n1"]
    assert "affinity" not in tr.tensorboard_pod(run_spec(), "p")["spec"]


def test_a_run_not_read_from_the_api_cannot_own_a_tensorboard_pod():
    with pytest.raises(ValueError, match="no uid"):
        tr.tensorboard_pod(parse_run(make_run({})), "p")


def test_the_tensorboard_pod_name_is_a_dns_label():
    name = tr.pod_name(tr.TENSORBOARD, "r" * 63, "abcdef")
    assert len(name) <= 63 and name.startswith("dtr-tensorboard-r") and name.endswith("-abcdef")


# ---- pure helpers


def test_the_url_is_on_loopback():
    assert board.url(6123) == "http://127.0.0.1:6123/"


def test_the_local_log_dirs_are_the_runs_on_the_claims_that_have_one(tmp_path: Path):
    (tmp_path / "a" / "logs" / "r").mkdir(parents=True)
    (tmp_path / "b" / "logs" / "other").mkdir(parents=True)
    assert board.local_log_dirs(tmp_path, "r", ["a", "b", "c"]) == [tmp_path / "a" / "logs" / "r"]


def test_last_lines_keeps_the_end_without_blank_lines():
    assert board.last_lines("a\n\nb\nc\n", 2) == "b\nc"


# ---- waiting for an answer


class Runs(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/" + board.READY_PATH else 404)
        self.end_headers()
        self.wfile.write(b"[]")

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def answering() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Runs)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield board.url(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def test_the_wait_ends_once_tensorboard_answers(answering: str):
    board.wait_answering(answering, lambda: None, timeout=10)


def test_the_wait_says_why_tensorboard_ended():
    with pytest.raises(board.TensorBoardError, match="exited with code 2:\nNo module named tensorboard"):
        board.wait_answering(board.url(1), lambda: "TensorBoard exited with code 2:\nNo module named tensorboard", 10)


def test_the_wait_is_bounded():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        port = s.getsockname()[1]
        with pytest.raises(board.TensorBoardError, match=f"did not answer at http://127.0.0.1:{port}/ within 0.2 s"):
            board.wait_answering(board.url(port), lambda: None, timeout=0.2)


def test_a_local_tensorboard_whose_python_cannot_run_it_says_so(tmp_path: Path):
    with pytest.raises(board.TensorBoardError, match="cannot start TensorBoard with /nonexistent/python"):
        board.start_local("r", "/nonexistent/python", tmp_path, None, timeout=5)
    fails = tmp_path / "python"
    fails.write_text("#!/bin/sh\necho 'No module named tensorboard' >&2\nexit 1\n")
    fails.chmod(0o755)
    with pytest.raises(board.TensorBoardError, match="exited with code 1:\nNo module named tensorboard"):
        board.start_local("r", str(fails), tmp_path, None, timeout=30)


# ---- the port-forward


def kube_at(host: str, token: str) -> kube.Kube:
    conf = client.Configuration()
    conf.host = host
    conf.api_key = {"authorization": f"Bearer {token}"}
    return kube.Kube(client.ApiClient(conf))


SEEN: list[dict] = []
PREFIX = struct.pack("<H", tr.TENSORBOARD_PORT)


async def portforward_handler(request: web.Request) -> web.StreamResponse:
    """The kubelet's side: each channel's first message starts with the port; channel 0 echoes in upper case;
    pod `closed` has nothing listening (an error on channel 1, as containerd says it)."""
    ws = web.WebSocketResponse(protocols=kube_streams.PORTFORWARD_PROTOCOLS)
    await ws.prepare(request)
    SEEN.append({"path": request.path, "ports": request.query.get("ports"), "protocol": ws.ws_protocol,
                 "token": request.headers.get("authorization")})  # fmt: skip
    await ws.send_bytes(bytes([kube_streams.PORTFORWARD_DATA]) + PREFIX)
    await ws.send_bytes(bytes([kube_streams.PORTFORWARD_ERROR]) + PREFIX)
    if request.match_info["pod"] == "closed":
        await ws.send_bytes(bytes([kube_streams.PORTFORWARD_ERROR]) + b"failed to connect to localhost:6006")
        await ws.close()
        return ws
    async for message in ws:
        assert message.data[0] == kube_streams.PORTFORWARD_DATA
        await ws.send_bytes(bytes([kube_streams.PORTFORWARD_DATA]) + message.data[1:].upper())
    return ws


@pytest.fixture
def kubelet() -> Iterator[str]:
    with serve_route("/api/v1/namespaces/{ns}/pods/{pod}/portforward", portforward_handler) as url:
        yield url


@contextlib.contextmanager
def forwarding(host: str, pod: str) -> Iterator[board.Forwarder]:
    forwarder = board.Forwarder(kube_at(host, "sesame"), "ml", pod, board.free_port())
    forwarder.start()
    try:
        yield forwarder
    finally:
        forwarder.close()


def exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(data)
        got = b""
        while len(got) < len(data) and (chunk := conn.recv(65536)):
            got += chunk
        return got


def test_each_local_connection_is_forwarded_to_the_pods_port(kubelet: str):
    SEEN.clear()
    with forwarding(kubelet, "tb") as forwarder:
        assert exchange(forwarder.port, b"get /data/runs") == b"GET /DATA/RUNS"
        big = bytes(range(97, 123)) * 10_000  # more than a WebSocket message of ours
        assert exchange(forwarder.port, big) == big.upper()
    assert SEEN == [{"path": "/api/v1/namespaces/ml/pods/tb/portforward", "ports": "6006",
                     "protocol": "v4.channel.k8s.io", "token": "Bearer sesame"}] * 2  # fmt: skip


def test_a_pod_port_nothing_listens_on_closes_the_connection_and_says_why(kubelet: str):
    with forwarding(kubelet, "closed") as forwarder:
        assert exchange(forwarder.port, b"x") == b""
        assert forwarder.last_error == "failed to connect to localhost:6006"


def test_after_close_the_local_port_is_free(kubelet: str):
    with forwarding(kubelet, "tb") as forwarder:
        port = forwarder.port
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


# ---- start_in_cluster against a fake API (the order of the calls, what is deleted when)


class HttpStream:
    """A port-forwarded connection to a TensorBoard that answers every request with 200 `[]`, then closes."""

    def __init__(self) -> None:
        self.request = b""
        self.answered = False

    async def write(self, data: bytes) -> None:
        self.request += data

    async def read(self) -> bytes | None:
        while b"\r\n\r\n" not in self.request:
            await asyncio.sleep(0.01)
        if self.answered:
            return None
        self.answered = True
        return b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n[]"


def board_api(statuses: list[dict], claim: bool = True) -> FakeKube:
    """Run r (spec.image trainer:9) and its claim (or none), TFJobs not readable; the TensorBoard pod, once
    created, shows `statuses`, tells one event and has logged a traceback; a forwarded port answers HTTP."""
    fake = FakeKube()
    fake.put(make_run({"image": "trainer:9"}, name="r", uid="u-1"))
    if claim:
        fake.put({"metadata": {"name": "r-data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}, "PersistentVolumeClaim")
    # The `edit` role need not cover kubeflow.org: the image comes from spec.image.
    fake.fail("get_tfjob", kube.ApiError(403, "Forbidden", "tfjobs is forbidden"), times=None)
    fake.pod_statuses = statuses

    def kubelet(pod: dict) -> None:
        name = pod["metadata"]["name"]
        fake.add_event("Pod", name, "Failed", "pull access denied", lastTimestamp="t")
        fake.set_log(name, "Traceback ...\nModuleNotFoundError: No module named 'tensorboard'\n", tr.TENSORBOARD)

    @contextlib.asynccontextmanager
    async def tensorboard(pod: str, port: int):
        assert (pod, port) == (created(fake)[0]["metadata"]["name"], tr.TENSORBOARD_PORT)
        yield HttpStream()

    fake.on_create, fake.portforward = kubelet, tensorboard
    return fake


def created(fake: FakeKube) -> list[dict]:
    return [args["manifest"] for args in fake.succeeded("create")]


def deleted(fake: FakeKube) -> list[str]:
    return [args["name"] for args in fake.succeeded("delete_pod")]


def running(container: str = tr.TENSORBOARD) -> dict:
    return {"phase": "Running", "containerStatuses": [{"name": container, "state": {"running": {}}}]}


def test_the_cluster_handle_serves_once_the_pod_runs_and_answers_and_stop_deletes_the_pod():
    fake = board_api([{"phase": "Pending"}, running()])
    handle = board.start_in_cluster(fake, "ml", "r", None, timeout=30)
    [pod] = created(fake)
    assert pod["spec"]["containers"][0]["image"] == "trainer:9"  # spec.image, the TFJob being unreadable
    assert pod["metadata"]["name"].startswith("dtr-tensorboard-r-")
    assert handle.url.startswith("http://127.0.0.1:") and handle.ended() is None and not deleted(fake)
    handle.stop()
    handle.stop()
    assert deleted(fake) == [pod["metadata"]["name"]]
    assert port_closed(handle.url)


def port_closed(url: str) -> bool:
    try:
        socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1].rstrip("/"))), timeout=2).close()
    except OSError:
        return True
    return False


def test_a_pod_that_cannot_start_is_deleted_and_its_reason_and_events_said():
    pull = {"phase": "Pending", "containerStatuses": [{"name": tr.TENSORBOARD, "state": {"waiting": {
        "reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}]}  # fmt: skip
    fake = board_api([pull])
    with pytest.raises(board.TensorBoardError, match="ImagePullBackOff: Back-off pulling image; events: Failed: pull"):
        board.start_in_cluster(fake, "ml", "r", None, timeout=30)
    assert deleted(fake) == [created(fake)[0]["metadata"]["name"]]


def test_a_pod_whose_tensorboard_ends_says_so_with_its_last_lines_and_is_deleted():
    ended = {"phase": "Failed", "containerStatuses": [{"name": tr.TENSORBOARD, "state": {"terminated": {
        "reason": "Error", "exitCode": 1}}}]}  # fmt: skip
    fake = board_api([running(), ended])
    with pytest.raises(board.TensorBoardError, match=r"ended \(Failed\):\nTraceback ...\nModuleNotFoundError"):
        board.start_in_cluster(fake, "ml", "r", None, timeout=30)
    assert len(deleted(fake)) == 1 and fake.get_pod("ml", deleted(fake)[0]) is None


def test_no_pod_for_an_unknown_run_or_a_run_whose_claim_is_gone():
    fake = board_api([running()], claim=False)
    with pytest.raises(board.RunNotFound, match="no DistTrainingRun other in namespace ml"):
        board.start_in_cluster(fake, "ml", "other", None, timeout=30)
    with pytest.raises(board.TensorBoardError, match="DistTrainingRun r's claim r-data does not exist"):
        board.start_in_cluster(fake, "ml", "r", None, timeout=30)
    assert created(fake) == [] and deleted(fake) == []


# ---- dtr tensorboard


def test_dtr_tensorboard_of_an_unknown_local_run_or_one_without_logs_says_so_in_one_line(tmp_path: Path, capsys):
    from dtr_cli import cli

    assert cli.main(["tensorboard", "nope", "--local", "--dir", str(tmp_path)]) == 1
    assert capsys.readouterr().err == f"dtr tensorboard: no DistTrainingRun nope in {tmp_path}\n"
    (tmp_path / "runs" / "young").mkdir(parents=True)
    (tmp_path / "runs" / "young" / "status.json").write_text('{"phase": "Running"}')
    assert cli.main(["tensorboard", "young", "--local", "--dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("dtr tensorboard: no TensorBoard logs of DistTrainingRun young under ")
    assert err.count("\n") == 1, err


@pytest.mark.parametrize("argv", [["tensorboard", "r", "--port", "0"], ["tensorboard", "r", "--timeout", "0"]])
def test_dtr_tensorboard_refuses_a_bad_port_or_timeout(argv, capsys):
    from dtr_cli import cli

    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2 and "dtr tensorboard: error: argument" in capsys.readouterr().err
