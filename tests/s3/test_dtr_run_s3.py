"""`dtr run` of a run whose data, backups and model live in a bucket (examples/s3-no-volume.yaml, aimed at a real
S3 server here): no cluster, the object store's keys from the environment `dtr run` starts in, as a laptop's AWS
keys are (a local run has no Secret), and the machine's network (`--host-network`: on a loopback of their own the
workers reach no store). Without the keys, or without that flag, it refuses before starting anything, saying why.

Runs in the operator's environment (the client); the workers in the trainer's (.venv/trainer, or
DTR_TRAINER_PYTHON). Skipped, saying why, when `weed` was not built; DTR_S3_REQUIRED=1 fails instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from dtr_contract import published
from dtr_contract.objectstore import Location

from devcluster import s3
from support.repo import REPO
from support.s3store import put_digits, s3_env, server_fixture, store

BUCKET = "local-runs"
server = server_fixture(BUCKET)


def trainer_python() -> str:
    return os.environ.get("DTR_TRAINER_PYTHON") or str(REPO / ".venv" / "trainer" / "bin" / "python")


def run_file(tmp: Path, endpoint: str) -> Path:
    """examples/s3-no-volume.yaml, its store and URIs aimed at this server and bucket; 3 epochs."""
    [doc] = [d for d in yaml.safe_load_all((REPO / "examples" / "s3-no-volume.yaml").read_text())]
    spec = doc["spec"]
    spec["objectStore"]["endpoint"] = endpoint
    spec["training"].update(dataset=f"s3://{BUCKET}/digits/", epochs=3)
    spec["storage"]["backupUri"] = f"s3://{BUCKET}/backups/s3-no-volume"
    spec["export"]["storageUri"] = f"s3://{BUCKET}/models/s3-no-volume"
    path = tmp / "run.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def dtr_run(path: Path, tmp: Path, env: dict[str, str], *flags: str) -> subprocess.CompletedProcess[str]:
    env = {**env, "DTR_RUN_DIR": str(tmp / ".dtr"), "DTR_TRAINER_PYTHON": trainer_python()}
    env.pop("KUBECONFIG", None)
    return subprocess.run([sys.executable, "-m", "dtr_cli", "run", *flags, str(path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900, check=False)  # fmt: skip


def test_dtr_run_trains_on_a_bucket_and_publishes_there_with_the_keys_of_its_environment(
        server: s3.State, tmp_path: Path):  # fmt: skip
    put_digits(server, f"s3://{BUCKET}/digits", python=trainer_python())
    proc = dtr_run(run_file(tmp_path, server.endpoint), tmp_path, s3_env(server), "--host-network")
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
    out = proc.stdout
    assert "backup: none in" in out and "backup: generation 4 to" in out, out[-4000:]  # the claim, 3 epochs
    status = yaml.safe_load(out[out.index("\nstatus:\n") + 1:].split("\n[dtr] ")[0])["status"]
    assert status["phase"] == "Succeeded", status
    assert status["model"] == {"path": f"s3://{BUCKET}/models/s3-no-volume/1", "version": 1,
                               "storageUri": f"s3://{BUCKET}/models/s3-no-volume"}  # no claim: there is none
    assert "pvc" not in status
    assert published.published_versions(store(server), Location(BUCKET, "models/s3-no-volume")) == [1]
    assert server.secret_key not in out + proc.stderr


def test_dtr_run_without_the_keys_in_its_environment_says_what_to_export(server: s3.State, tmp_path: Path):
    env = {k: v for k, v in s3_env(server).items() if k != "AWS_SECRET_ACCESS_KEY"}
    proc = dtr_run(run_file(tmp_path, server.endpoint), tmp_path, env, "--host-network")
    assert proc.returncode == 2, f"{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
    assert "a local run takes a Secret's keys from its own environment: export AWS_SECRET_ACCESS_KEY" in proc.stderr
    assert "[worker-0]" not in proc.stdout  # nothing started


def test_dtr_run_on_a_loopback_of_its_own_says_the_store_needs_the_network(server: s3.State, tmp_path: Path):
    proc = dtr_run(run_file(tmp_path, server.endpoint), tmp_path, s3_env(server))
    assert proc.returncode == 2, f"{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
    assert "which workers on a loopback of their own cannot reach: dtr run --host-network" in proc.stderr
    assert "[worker-0]" not in proc.stdout
