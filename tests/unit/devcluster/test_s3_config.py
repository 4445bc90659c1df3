"""The S3 server's pure parts (devcluster/s3.py): keys, SeaweedFS's identities file, weed's arguments, the env
file, the pod's manifests. tests/s3 runs the real server; here a wrong flag or manifest fails in seconds."""

from __future__ import annotations

import base64
import json
import string
from dataclasses import fields
from pathlib import Path

import pytest

from devcluster import node, s3

CREDS = s3.Credentials("A" * 20, "s" * 40)
PORTS = s3.Ports(*range(20001, 20001 + len(fields(s3.Ports))))
PINS = node.pinned(node.HERE / "versions.env")


def flags(args: list[str]) -> dict[str, str]:
    """-name=value arguments after the command, as a dict (a bare -flag maps to '')."""
    after = args[args.index("mini") + 1:]
    return dict(a.removeprefix("-").partition("=")[::2] for a in after)


def test_new_keys_each_time_of_aws_lengths_and_only_letters_and_digits():
    a, b = s3.new_credentials(), s3.new_credentials()
    assert a != b
    assert (len(a.access_key), len(a.secret_key)) == (20, 40)
    assert set(a.access_key + a.secret_key) <= set(string.ascii_letters + string.digits)


def test_the_identities_file_has_one_identity_with_the_keys_and_no_anonymous_one():
    config = json.loads(json.dumps(s3.s3_config(CREDS)))
    [identity] = config["identities"]
    assert identity["credentials"] == [{"accessKey": "A" * 20, "secretKey": "s" * 40}]
    assert set(identity["actions"]) == {"Admin", "Read", "List", "Tagging", "Write"}
    assert identity["name"] != "anonymous"  # SeaweedFS's name for what unsigned requests may do


@pytest.mark.parametrize(("name", "ok"), [
    ("dtr", True), ("my-bucket.2", True), ("ab", False), ("a" * 64, False), ("Upper", False),
    ("-dash", False), ("dot.", False), ("under_score", False),
])  # fmt: skip
def test_bucket_names_follow_s3s_rule(name: str, ok: bool):
    assert s3.valid_bucket(name) is ok


def test_a_bad_bucket_name_is_refused_before_anything_starts(tmp_path: Path):
    with pytest.raises(s3.S3Error, match="no S3 bucket name"):
        s3.S3Server(tmp_path, bucket="Bad_Name")


def test_weed_mini_gets_every_port_loopback_the_bucket_and_no_telemetry():
    args = s3.mini_args("/bin/weed", "/d/data", "/d/s3.json", PORTS, "dtr")
    assert args[:3] == ["/bin/weed", "-logtostderr", "mini"]
    f = flags(args)
    assert f["ip.bind"] == "127.0.0.1" and f["ip"] == "127.0.0.1"
    assert f["master.telemetry"] == "false"
    assert (f["dir"], f["s3.config"], f["bucket"]) == ("/d/data", "/d/s3.json", "dtr")
    given = {int(v) for k, v in f.items() if k.endswith(("port", "port.grpc"))}
    assert given == set(range(20001, 20001 + len(fields(s3.Ports))))
    # what would listen on ports of upstream's choosing
    assert f["webdav"] == f["admin.ui"] == "false"
    assert f["admin.port.legacy"] == f["s3.port.iceberg"] == f["s3.port.lance"] == "0"
    assert "s3.cert.file" not in f


def test_with_tls_the_s3_port_gets_the_certificate():
    tls = s3.Tls(Path("/d/tls/s3.crt"), Path("/d/tls/s3.key"), Path("/pki/ca.crt"))
    f = flags(s3.mini_args("weed", "d", "c", PORTS, "dtr", tls=tls))
    assert (f["s3.cert.file"], f["s3.key.file"]) == ("/d/tls/s3.crt", "/d/tls/s3.key")
    assert "s3.port.https" not in f  # then the S3 port itself serves HTTPS, and nothing serves plain HTTP


def test_the_env_file_names_endpoint_keys_bucket_and_the_ca_only_with_tls():
    plain = dict(line.split("=", 1) for line in s3.env_file("http://127.0.0.1:1", CREDS, "b").splitlines())
    assert plain == {"AWS_ACCESS_KEY_ID": "A" * 20, "AWS_SECRET_ACCESS_KEY": "s" * 40,
                     "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:1",
                     "S3_ENDPOINT": "http://127.0.0.1:1", "S3_BUCKET": "b"}
    tls = dict(line.split("=", 1) for line in
               s3.env_file("https://127.0.0.1:1", CREDS, "b", Path("/pki/ca.crt")).splitlines())  # fmt: skip
    assert tls["AWS_CA_BUNDLE"] == "/pki/ca.crt"
    assert s3.endpoint("127.0.0.1", 1, tls=True) == "https://127.0.0.1:1"


def test_the_state_file_reads_back_as_written():
    state = s3.State(7, "/bin/weed", "http://127.0.0.1:1", "a", "b", "dtr", None, PORTS)
    assert s3.State.from_json(state.to_json()) == state


# ---------------------------------------------------------------- the pod


OBJECTS = s3.manifests(CREDS, "dtr", PINS["SEAWEEDFS_IMAGE"])
KINDS = {o["kind"]: o for o in OBJECTS}
POD = KINDS["Deployment"]["spec"]["template"]["spec"]
[CONTAINER] = POD["containers"]


def test_one_of_each_object_all_in_the_namespace():
    assert sorted(KINDS) == ["Deployment", "Namespace", "NetworkPolicy", "Secret", "Service"]
    assert all(o["metadata"].get("namespace", s3.NAMESPACE) == s3.NAMESPACE for o in OBJECTS)
    assert KINDS["Namespace"]["metadata"]["name"] == s3.NAMESPACE


def test_the_pod_runs_the_pinned_image_never_pulled():
    assert CONTAINER["image"] == PINS["SEAWEEDFS_IMAGE"] == "docker.io/chrislusf/seaweedfs:dtr"
    assert CONTAINER["imagePullPolicy"] == "Never"


def test_the_pod_meets_pod_security_restricted():
    assert KINDS["Namespace"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    pod, box = POD["securityContext"], CONTAINER["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] != 0
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert box == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
    assert POD["automountServiceAccountToken"] is False
    assert all("hostPath" not in v for v in POD["volumes"])


def test_data_and_sockets_in_emptydirs_the_config_from_the_secret():
    volumes = {v["name"]: v for v in POD["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in CONTAINER["volumeMounts"]}
    f = flags(["weed", *CONTAINER["args"]])
    assert "emptyDir" in volumes[mounts[f["dir"]]]
    assert "emptyDir" in volumes[mounts["/tmp"]]
    config_dir = str(Path(f["s3.config"]).parent)
    assert volumes[mounts[config_dir]]["secret"]["secretName"] == KINDS["Secret"]["metadata"]["name"]
    assert f["bucket"] == "dtr"


def test_the_pods_arguments_are_the_local_ones_on_every_interface():
    f = flags(["weed", *CONTAINER["args"]])
    assert f["ip.bind"] == "0.0.0.0" and f["master.telemetry"] == "false"
    assert int(f["s3.port"]) == s3.POD_S3_PORT == CONTAINER["ports"][0]["containerPort"]
    assert CONTAINER["args"] == s3.mini_args("/weed", f["dir"], f["s3.config"], s3.POD_PORTS, "dtr",
                                             bind="0.0.0.0")[1:]  # fmt: skip


def test_the_secret_holds_the_keys_and_the_identities_file_for_them():
    data = {k: base64.b64decode(v).decode() for k, v in KINDS["Secret"]["data"].items()}
    assert (data["AWS_ACCESS_KEY_ID"], data["AWS_SECRET_ACCESS_KEY"], data["S3_BUCKET"]) == ("A" * 20, "s" * 40, "dtr")
    assert json.loads(data["s3.json"]) == s3.s3_config(CREDS)


def test_only_the_s3_port_is_reachable_from_other_pods():
    service, policy = KINDS["Service"]["spec"], KINDS["NetworkPolicy"]["spec"]
    assert [p["port"] for p in service["ports"]] == [s3.POD_S3_PORT]
    assert service["selector"] == policy["podSelector"]["matchLabels"] == \
        KINDS["Deployment"]["spec"]["template"]["metadata"]["labels"]  # fmt: skip
    assert policy["policyTypes"] == ["Ingress"]
    assert policy["ingress"] == [{"ports": [{"port": s3.POD_S3_PORT, "protocol": "TCP"}]}]
    assert s3.service_endpoint() == f"http://dtr-s3.dtr-s3.svc.cluster.local:{s3.POD_S3_PORT}"


def test_new_keys_change_the_pod_template_so_that_a_second_install_restarts_the_server():
    again = s3.manifests(s3.Credentials("B" * 20, "t" * 40), "dtr", PINS["SEAWEEDFS_IMAGE"])
    template = KINDS["Deployment"]["spec"]["template"]
    other = next(o for o in again if o["kind"] == "Deployment")["spec"]["template"]
    assert template["metadata"]["annotations"] != other["metadata"]["annotations"]
    assert template == next(o for o in s3.manifests(CREDS, "dtr", PINS["SEAWEEDFS_IMAGE"])
                            if o["kind"] == "Deployment")["spec"]["template"]  # fmt: skip
