"""A real S3 server (devcluster/s3.py: SeaweedFS's `weed mini`, built by `make s3-build`) as a local process,
used through a real S3 client (MinIO's Python SDK): put, get, list, delete; wrong and missing signatures
refused; HTTPS with a certificate of a given CA; the CLI's env file and its `down`.

Skipped, saying why, when weed was not built; `make test-s3` (and CI) sets DTR_S3_REQUIRED=1, which fails instead.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from minio import Minio
from minio.error import S3Error as ClientError

from devcluster import controlplane as cp
from devcluster import s3
from support import s3 as support_s3
from support.repo import REPO


def client(state: s3.State, secret_key: str | None = None) -> Minio:
    return support_s3.client(state.endpoint, state.access_key, secret_key or state.secret_key, state.ca)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[s3.State]:
    support_s3.require()
    srv = s3.S3Server(tmp_path_factory.mktemp("s3"), bucket="runs")
    state = srv.start()
    try:
        yield state
    finally:
        srv.stop()


def test_put_get_list_delete_in_the_bucket_made_at_start(server: s3.State):
    c = client(server)
    assert [b.name for b in c.list_buckets()] == ["runs"]
    body = os.urandom(5 * 1024 * 1024 + 17)  # over the filer's 4 MB chunk size: several chunks
    c.put_object("runs", "digits/1/model.bin", io.BytesIO(body), len(body))
    c.put_object("runs", "digits/1/lineage.json", io.BytesIO(b"{}"), 2)
    response = c.get_object("runs", "digits/1/model.bin")
    try:
        assert response.read() == body
    finally:
        response.close()
        response.release_conn()
    listed = sorted(o.object_name for o in c.list_objects("runs", prefix="digits/", recursive=True))
    assert listed == ["digits/1/lineage.json", "digits/1/model.bin"]
    c.remove_object("runs", "digits/1/model.bin")
    assert [o.object_name for o in c.list_objects("runs", recursive=True)] == ["digits/1/lineage.json"]
    with pytest.raises(ClientError, match="NoSuchKey"):
        c.stat_object("runs", "digits/1/model.bin")


def test_a_wrong_secret_and_no_signature_are_refused(server: s3.State):
    with pytest.raises(ClientError) as wrong:
        client(server, secret_key="x" * 40).list_buckets()
    assert wrong.value.code == "SignatureDoesNotMatch"
    status, body = cp.http_get(f"{server.endpoint}/runs?list-type=2")
    assert status == 403 and b"AccessDenied" in body


def test_https_with_a_certificate_the_given_ca_signed(tmp_path: Path):
    support_s3.require()
    pki = tmp_path / "pki"
    pki.mkdir()
    cp.make_ca(pki, "ca", "dtr-test-ca")
    srv = s3.S3Server(tmp_path / "s3", tls_ca_dir=pki)
    try:
        state = srv.start()
        assert state.endpoint.startswith("https://127.0.0.1:") and state.ca == str(pki / "ca.crt")
        c = client(state)
        c.put_object("dtr", "k", io.BytesIO(b"over TLS"), 8)
        assert c.get_object("dtr", "k").read() == b"over TLS"
        assert f"AWS_CA_BUNDLE={pki / 'ca.crt'}\n" in (tmp_path / "s3" / "s3.env").read_text()
        # Plain HTTP on that port is refused: the CA's certificate is the only way in.
        assert cp.http_get(state.endpoint.replace("https:", "http:") + "/healthz")[0] != 200
    finally:
        srv.stop()


def test_the_cli_writes_an_env_file_other_tools_use_and_down_stops_it(tmp_path: Path):
    support_s3.require()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "devcluster.s3", *args, "--dir", str(tmp_path)], cwd=REPO,
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip

    up = cli("up", "--bucket", "data")
    try:
        assert up.returncode == 0, up.stderr
        assert up.stdout.strip() == f"set -a; . {tmp_path / 's3.env'}; set +a"
        env = dict(line.split("=", 1) for line in (tmp_path / "s3.env").read_text().splitlines())
        state = s3.State.from_json((tmp_path / "state.json").read_text())
        assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == (state.access_key, state.secret_key)
        assert env["AWS_ENDPOINT_URL"] == env["S3_ENDPOINT"] == state.endpoint and env["S3_BUCKET"] == "data"
        assert (tmp_path / "s3.env").stat().st_mode & 0o077 == 0  # it holds the secret key
        c = client(state)
        c.put_object("data", "a", io.BytesIO(b"1"), 1)
        assert [o.object_name for o in c.list_objects("data")] == ["a"]
        again = cli("up")
        assert again.returncode == 1 and "already runs" in again.stderr
    finally:
        down = cli("down")
    assert down.returncode == 0, down.stderr
    assert not cp.pid_alive(state.pid)
    assert not (tmp_path / "s3.env").exists()
    assert cp.http_get(f"{state.endpoint}/healthz")[0] == 0  # nothing answers there
