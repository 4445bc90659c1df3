"""dtr data put and dtr model get through their shell (dtr_client/volume.py), against the fake API whose exec runs
the command as a local process on a directory standing in for the volume (support.local_exec): the whole copy as on
a cluster (the program's text over stdin, frames, digests, the pod's account) but the pod. The real pod: tests/node."""

from __future__ import annotations

import io
import os
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from dtr_cli.cli import main
from dtr_client import copier, transfer, volume
from dtr_contract import layout
from dtr_operator import kube

from support.fake_kube import CLUSTER_TRAINER_IMAGE, operator_deployment
from support.local_exec import VolumeKube, make_tree, on_volume, written

NS = "ml"


def events(fake: VolumeKube) -> None:
    """What the scheduler and the kubelet say of every pod created: it was not scheduled, then not mounted."""

    def said(pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        fake.add_event("Pod", name, "FailedScheduling", "0/1 nodes are available", lastTimestamp="t1")
        fake.add_event("Pod", name, "FailedMount", "Multi-Attach error", lastTimestamp="t2")

    fake.on_create = said


@pytest.fixture
def cluster(tmp_path, monkeypatch) -> VolumeKube:
    root = tmp_path / "volume"
    root.mkdir()
    fake = VolumeKube(root, NS)
    fake.put(operator_deployment(NS))  # the transfer pods' image is its (dtr_client.images; test_images.py)
    events(fake)
    monkeypatch.setattr(kube.Kube, "for_cli", classmethod(lambda cls: fake))
    monkeypatch.setattr(volume, "DELETE_WAIT", 1.0)
    monkeypatch.setattr(volume, "WIND_DOWN", 0.5)
    return fake


def dtr(*args: str) -> int:
    return main([*args, "-n", NS, "-q"])


def run(name: str, spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingRun", "metadata": {"name": name, "namespace": NS},
            "spec": spec, **({"status": status} if status else {})}  # fmt: skip


def test_put_a_tree_then_get_it_back_as_a_model_version_through_pods_that_are_gone_after(cluster, tmp_path, capsys):
    cluster.put(run("r", {"storage": {"claimName": "c"}, "export": {"modelName": "m"}}))
    version = tmp_path / "1"
    version.mkdir()
    files = make_tree(version)
    base = layout.in_volume(layout.export_dir("m"))

    assert dtr("data", "put", "c", str(version), base) == 0
    said = capsys.readouterr()
    assert said.out == f"put 4 file(s), 768.0 KiB, into {base}/1 on claim c (SHA-256 checked)\n"
    assert said.err == ""
    assert written(cluster.volume / base / "1") == files

    out = tmp_path / "out"
    assert dtr("model", "get", "r", str(out)) == 0
    said = capsys.readouterr()
    assert said.out == (f"got version 1 of r's model (4 file(s), 768.0 KiB) from {base}/1 on claim c into {out} "
                        "(SHA-256 checked)\n")  # fmt: skip
    assert written(out) == files and (out / "a" / "empty-dir").is_dir()
    assert not [p for p in tmp_path.iterdir() if copier.PARTIAL in p.name]

    put_pod, get_pod = cluster.created
    assert put_pod["metadata"]["name"].startswith("dtr-put-c-") and get_pod["metadata"]["name"].startswith("dtr-get-c-")
    assert put_pod["spec"]["volumes"][0]["persistentVolumeClaim"] == {"claimName": "c", "readOnly": False}
    assert get_pod["spec"]["volumes"][0]["persistentVolumeClaim"] == {"claimName": "c", "readOnly": True}
    assert {p["spec"]["containers"][0]["image"] for p in (put_pod, get_pod)} == {CLUSTER_TRAINER_IMAGE}
    assert cluster.deleted == [put_pod["metadata"]["name"], get_pod["metadata"]["name"]] and not cluster.pods
    assert [argv[5] for argv in cluster.execs] == ["receive", "list", "send"]


def test_put_a_file_into_a_runs_claim_defaults_to_the_data_dir_and_replaces_it(cluster, tmp_path, capsys):
    cluster.put(run("wine", {}))
    claim = {"metadata": {"name": "wine-data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
    cluster.put(claim, "PersistentVolumeClaim")
    local = tmp_path / "wine.csv"
    for content in (b"old\n", b"a,b\n1,2\n"):
        local.write_bytes(content)
        assert dtr("data", "put", "wine", str(local)) == 0
    assert (cluster.volume / tr_default() / "wine.csv").read_bytes() == b"a,b\n1,2\n"
    assert "into data/wine.csv on claim wine-data" in capsys.readouterr().out


def tr_default() -> str:
    return transfer.default_dest()


def test_the_model_version_asked_for_and_one_that_is_not_there(cluster, tmp_path, capsys):
    status = {"model": {"path": layout.version_dir(layout.export_dir("m"), 2), "claim": "c", "version": 2}}
    cluster.put(run("r", {"storage": {"claimName": "c"}}, status))
    for v in (1, 2):
        (cluster.volume / layout.in_volume(layout.export_dir("m")) / str(v)).mkdir(parents=True)
        (cluster.volume / layout.in_volume(layout.export_dir("m")) / str(v) / "saved_model.pb").write_text(str(v))
    assert dtr("model", "get", "r", str(tmp_path / "exported")) == 0
    assert (tmp_path / "exported" / "saved_model.pb").read_text() == "2"
    assert dtr("model", "get", "r", str(tmp_path / "served" / "m" / "1"), "--version", "1") == 0
    assert (tmp_path / "served" / "m" / "1" / "saved_model.pb").read_text() == "1", "its parents made as needed"
    capsys.readouterr()
    assert dtr("model", "get", "r", str(tmp_path / "none"), "--version", "7") == 1
    base = layout.in_volume(layout.export_dir("m"))
    assert capsys.readouterr().err == f"dtr model get: no version 7 in {base} on claim c (there: 1, 2)\n"
    assert not (tmp_path / "none").exists() and not cluster.pods


@pytest.mark.parametrize(("args", "error"), [
    (("data", "put", "c", "LOCAL", "/etc"), ("dtr data put: DEST '/etc' must be a path on the volume relative to "
                                             "its root, such as 'data'")),
    (("data", "put", "c", "LOCAL", "../up"), "dtr data put: DEST '../up' leaves the volume"),
    (("data", "put", "c", "MISSING"), "dtr data put: MISSING: no such file or directory"),
    (("model", "get", "r", "FULL"), "dtr model get: FULL exists and is not an empty directory"),
])  # fmt: skip
def test_bad_input_is_one_line_exit_2_and_no_pod(cluster, tmp_path, capsys, args, error):
    (tmp_path / "local").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    paths = {"LOCAL": str(tmp_path / "local"), "MISSING": str(tmp_path / "missing"), "FULL": str(tmp_path / "full")}
    assert dtr(*[paths.get(a, a) for a in args]) == 2
    assert capsys.readouterr().err == error.replace("MISSING", paths["MISSING"]).replace("FULL", paths["FULL"]) + "\n"
    assert not cluster.created


def test_no_claim_no_run_and_a_runs_claim_not_there_yet(cluster, tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert dtr("data", "put", "nothing", str(tmp_path / "f")) == 1
    assert capsys.readouterr().err == (f"dtr data put: no DistTrainingRun and no PersistentVolumeClaim named nothing "
                                       f"in namespace {NS}\n")  # fmt: skip
    cluster.put(run("early", {}))
    assert dtr("data", "put", "early", str(tmp_path / "f")) == 1
    err = capsys.readouterr().err
    assert err.startswith("dtr data put: DistTrainingRun early's claim early-data does not exist (yet)")
    assert err.count("\n") == 1
    assert dtr("model", "get", "nothing", str(tmp_path / "out")) == 1
    assert capsys.readouterr().err == f"dtr model get: no DistTrainingRun nothing in namespace {NS}\n"
    assert not cluster.created


def test_a_file_damaged_on_the_way_is_refused_naming_both_digests(cluster, tmp_path, capsys):
    (tmp_path / "f.bin").write_bytes(b"\x01" * 1000)

    def flip_last_byte_of_every_chunk(data: bytes) -> bytes:
        return data[:-1] + b"\x02" if data[:1] == copier.CHUNK_OF and len(data) > copier.HEAD else data

    cluster.exec = on_volume(cluster.volume, cluster.execs, tamper=flip_last_byte_of_every_chunk)
    assert dtr("data", "put", "c", str(tmp_path / "f.bin")) == 1
    err = capsys.readouterr().err
    good, bad = (copier.hashlib.sha256(b"\x01" * 999 + end).hexdigest() for end in (b"\x01", b"\x02"))
    assert err == f"dtr data put: SHA-256 mismatch for f.bin: local {good}, in the pod {bad}\n"
    assert not list((cluster.volume / "data").iterdir()), "neither the file nor a partial one"
    assert cluster.deleted and not cluster.pods


def test_a_pod_that_does_not_start_is_named_with_its_events_and_deleted(cluster, tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    cluster.pod_statuses = [{"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "message": "0/1 nodes are available"}]}]  # fmt: skip
    assert dtr("data", "put", "c", str(tmp_path / "f"), "--timeout", "1") == 1
    [pod] = cluster.created
    assert capsys.readouterr().err == (
        f"dtr data put: the transfer pod {pod['metadata']['name']} did not start in 1 s: not scheduled: 0/1 nodes are "
        "available; events: FailedMount: Multi-Attach error\n")  # fmt: skip
    assert cluster.deleted == [pod["metadata"]["name"]]

    cluster.pod_statuses = [{"phase": "Pending", "containerStatuses": [{"name": transfer.CONTAINER, "state": {
        "waiting": {"reason": "ErrImageNeverPull", "message": 'image "nope:1" is not present'}}}]}]  # fmt: skip
    assert dtr("data", "put", "c", str(tmp_path / "f"), "--image", "nope:1") == 1
    err = capsys.readouterr().err
    assert err.startswith("dtr data put: the transfer pod dtr-put-c-") and "cannot start: ErrImageNeverPull: image " \
        '"nope:1" is not present; events: ' in err  # fmt: skip
    assert cluster.created[-1]["spec"]["containers"][0]["image"] == "nope:1"
    assert not cluster.pods


def test_the_pod_joins_the_node_where_the_readwriteonce_claim_is_used(cluster, tmp_path):
    (tmp_path / "f").write_text("x")
    user = {"metadata": {"name": "w0"}, "spec": {"nodeName": "n1", "volumes": [
        {"name": "v", "persistentVolumeClaim": {"claimName": "c"}}]}, "status": {"phase": "Running"}}  # fmt: skip
    cluster.put(user, "Pod")
    assert dtr("data", "put", "c", str(tmp_path / "f")) == 0
    affinity = cluster.created[0]["spec"]["affinity"]["nodeAffinity"]
    assert affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchFields"][0][
        "values"] == ["n1"]  # fmt: skip


def test_ctrl_c_during_the_copy_deletes_the_pod_and_the_program_removes_its_partial_file(cluster, tmp_path):
    make_tree(tmp_path)
    partial = f"*{copier.PARTIAL}*"

    class Interrupting(volume.Reporter):
        def __call__(self, n: int) -> None:
            if self.progress.done:  # the second chunk: the program is writing the file
                wait_for(lambda: list(cluster.volume.rglob(partial)))
                raise KeyboardInterrupt
            self.progress.done += n

    with pytest.raises(KeyboardInterrupt):
        volume.put(cluster, NS, "c", volume.local_tree(str(tmp_path / "big.bin")), "", "img", 5.0,
                         Interrupting("put", True, io.StringIO()))  # fmt: skip
    assert cluster.deleted and not cluster.pods
    assert not list(cluster.volume.rglob("*")), "the program saw the end of its input and removed its partial file"


def wait_for(probe: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := probe()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
    return found


def test_progress_lines_on_stderr_when_it_takes_a_while(cluster, tmp_path, monkeypatch):
    clock = iter(float(i) for i in range(10**6))
    monkeypatch.setattr(volume.time, "monotonic", lambda: next(clock))
    (tmp_path / "big").write_bytes(os.urandom(4 * copier.CHUNK))
    err = io.StringIO()
    reporter = volume.Reporter("put big", False, err)
    volume.put(cluster, NS, "c", volume.local_tree(str(tmp_path / "big")), "", "img", 30.0, reporter)
    reporter.finish()
    lines = err.getvalue().splitlines()
    line_form = r"put big: \S+ \S+ of 1.0 MiB \(\d+%\), \S+ \S+/s"
    assert len(lines) >= 2 and all(re.fullmatch(line_form, line) for line in lines)
    assert lines[-1].startswith("put big: 1.0 MiB of 1.0 MiB (100%), "), lines


# ---- which claim: --claim, --run, or a bare name that is one of the two (security review R6) ----------------------


def claim(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"accessModes": ["ReadWriteOnce"]}}


def test_a_bare_name_that_is_a_run_and_a_claim_both_is_refused_naming_both(cluster, tmp_path, capsys):
    """A teammate's run named like my claim would receive what I put there, and her code could read it back."""
    (tmp_path / "f").write_text("secret")
    cluster.put(run("c", {}))  # claim c exists (VolumeKube's); the run c's own claim is c-data
    cluster.put(claim("c-data"), "PersistentVolumeClaim")
    assert dtr("data", "put", "c", str(tmp_path / "f")) == 2
    assert capsys.readouterr().err == (f"dtr data put: c is both a DistTrainingRun (its claim: c-data) and a "
                                       f"PersistentVolumeClaim in namespace {NS}: say which, --run c or --claim c\n")
    assert not cluster.created and not list(cluster.volume.rglob("f"))


@pytest.mark.parametrize("which", ["--claim", "--run"])
def test_claim_or_run_says_which_the_name_is(cluster, tmp_path, capsys, which):
    (tmp_path / "f").write_text("x")
    cluster.put(run("c", {}))
    cluster.put(claim("c-data"), "PersistentVolumeClaim")
    assert dtr("data", "put", which, "c", str(tmp_path / "f")) == 0
    [pod] = cluster.created
    wanted = "c" if which == "--claim" else "c-data"
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == wanted
    assert f"on claim {wanted} (SHA-256 checked)" in capsys.readouterr().out


def test_a_bare_name_still_works_when_it_is_only_one_of_the_two(cluster, tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert dtr("data", "put", "c", str(tmp_path / "f")) == 0, "a claim, no run of its name"
    cluster.put(run("wine", {}))
    cluster.put(claim("wine-data"), "PersistentVolumeClaim")
    assert dtr("data", "put", "wine", str(tmp_path / "f")) == 0, "a run, no claim of its name"
    cluster.put(run("own", {"storage": {"claimName": "own"}}))
    cluster.put(claim("own"), "PersistentVolumeClaim")
    assert dtr("data", "put", "own", str(tmp_path / "f")) == 0, "a run whose claim has its name: one claim"
    claims = [p["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] for p in cluster.created]
    assert claims == ["c", "wine-data", "own"]


def test_the_kind_named_must_be_there(cluster, tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    cluster.put(run("r", {"storage": {"claimName": "c"}}))
    assert dtr("data", "put", "--claim", "r", str(tmp_path / "f")) == 1
    assert capsys.readouterr().err == f"dtr data put: no PersistentVolumeClaim r in namespace {NS}\n"
    assert dtr("data", "put", "--run", "c", str(tmp_path / "f")) == 1
    assert capsys.readouterr().err == f"dtr data put: no DistTrainingRun c in namespace {NS}\n"
    with pytest.raises(SystemExit) as refused:  # argparse's own refusal, with the usage
        dtr("data", "put", "--run", "--claim", "c", str(tmp_path / "f"))
    assert refused.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    assert not cluster.created


def test_the_clients_claim_of_takes_the_kind_too(cluster):
    cluster.put(run("c", {}))
    cluster.put(claim("c-data"), "PersistentVolumeClaim")
    assert volume.claim_of(cluster, NS, "c", transfer.CLAIM)["metadata"]["name"] == "c"
    assert volume.claim_of(cluster, NS, "c", transfer.RUN)["metadata"]["name"] == "c-data"
    with pytest.raises(transfer.AmbiguousTarget):
        volume.claim_of(cluster, NS, "c")
    cluster.fail("get_run", kube.ApiError(403, "Forbidden", "runs are forbidden"), times=None)
    assert volume.claim_of(cluster, NS, "c")["metadata"]["name"] == "c", "no run to be seen: the claim"
    with pytest.raises(kube.ApiError):
        volume.claim_of(cluster, NS, "c", transfer.RUN)


def test_a_run_with_no_volume_has_no_claim_to_copy_to(cluster, tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    store = {"endpoint": "http://s3.example:8333", "credentialsSecret": "k"}
    cluster.put(run("nv", {"objectStore": store, "training": {"dataset": "s3://data/x"},
                           "export": {"storageUri": "s3://models/nv"},
                           "storage": {"volume": False, "backupUri": "s3://runs/nv"}}))
    assert dtr("data", "put", "--run", "nv", str(tmp_path / "f")) == 1
    assert "nv has no volume (spec.storage.volume false)" in capsys.readouterr().err
    assert not cluster.created


def test_without_an_image_the_cluster_has_nothing_is_copied_and_the_error_says_what_to_give(cluster, tmp_path, capsys):
    """No operator Deployment to read and a claim, not a run: no image dtr may trust the nodes to have (never this
    machine's default), so no pod; --image names one, and the progress lines say where it came from."""
    cluster.objects.clear()  # no operator Deployment any more (the fixture put one)
    cluster.put({"metadata": {"name": "c"}, "spec": {"accessModes": ["ReadWriteOnce"]}}, "PersistentVolumeClaim")
    local = tmp_path / "wine.csv"
    local.write_bytes(b"a,b\n")
    assert dtr("data", "put", "--claim", "c", str(local)) == 1
    err = capsys.readouterr().err
    assert err.startswith("dtr data put: dtr cannot tell which trainer image this cluster's nodes have"), err
    assert "no operator's Deployment found watching namespace ml" in err and "--image IMAGE" in err
    assert not cluster.created
    assert main(["data", "put", "--claim", "c", str(local), "-n", NS, "--image", "mine:1"]) == 0
    assert "dtr: the transfer pod's image: mine:1 (--image)\n" in capsys.readouterr().err
    assert [p["spec"]["containers"][0]["image"] for p in cluster.created] == ["mine:1"]
