"""devcluster/ociimage.py: the OCI image-layout tars the node's images are imported from."""

import gzip
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from devcluster import ociimage as oi


def sha(b: bytes) -> str:
    return "sha256:" + hashlib.sha256(b).hexdigest()


def inputs(d: Path):
    d.mkdir(parents=True, exist_ok=True)
    (d / "tool").write_bytes(b"\x7fELF not really\n" * 100)
    (d / "conf").write_text("key: value\n")
    files = [oi.File(d / "tool", "/usr/bin/tool", 0o755, caps=("net_bind_service",)),
             oi.File(d / "conf", "etc/tool/conf.yaml", 0o640)]
    dirs = [oi.Dir("/tmp", 0o1777)]
    links = [oi.Symlink("/bin/sh", "/usr/bin/tool"), oi.Symlink("/usr/bin/t", "tool")]
    cfg = oi.Config(entrypoint=["/usr/bin/tool"], cmd=["--serve"], user="65532:65532",
                    env=["PATH=/usr/bin:/bin", "A=b"], workdir="/work", labels={"x": "y"})
    return files, dirs, links, cfg


def read_layout(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as t:
        return {m.name: t.extractfile(m).read() for m in t if m.isfile()}


@pytest.fixture
def image(tmp_path):
    files, dirs, links, cfg = inputs(tmp_path / "in")
    out = tmp_path / "img.tar"
    result = oi.build_image(out, "example.com/team/tool:1.0", files, dirs, links, cfg)
    return out, result


def test_index_manifest_config_and_layer_digests_and_sizes_agree(image):
    out, result = image
    blobs = read_layout(out)
    assert json.loads(blobs["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    for name, data in blobs.items():
        if name.startswith("blobs/sha256/"):
            assert sha(data) == "sha256:" + name.rsplit("/", 1)[1]
    index = json.loads(blobs["index.json"])
    assert index["schemaVersion"] == 2 and index["mediaType"] == oi.MEDIA_INDEX
    [desc] = index["manifests"]
    assert desc["mediaType"] == oi.MEDIA_MANIFEST
    assert desc["platform"] == {"architecture": "amd64", "os": "linux"}
    assert desc["annotations"] == {"io.containerd.image.name": "example.com/team/tool:1.0",
                                   "org.opencontainers.image.ref.name": "example.com/team/tool:1.0"}
    manifest_bytes = blobs["blobs/sha256/" + desc["digest"].split(":")[1]]
    assert desc["size"] == len(manifest_bytes) and desc["digest"] == result.manifest_digest
    manifest = json.loads(manifest_bytes)
    assert manifest["schemaVersion"] == 2 and manifest["mediaType"] == oi.MEDIA_MANIFEST
    config_bytes = blobs["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]]
    assert manifest["config"] == {"mediaType": oi.MEDIA_CONFIG, "digest": sha(config_bytes), "size": len(config_bytes)}
    [layer] = manifest["layers"]
    layer_bytes = blobs["blobs/sha256/" + layer["digest"].split(":")[1]]
    assert layer == {"mediaType": oi.MEDIA_LAYER, "digest": sha(layer_bytes), "size": len(layer_bytes)}
    config = json.loads(config_bytes)
    assert config["rootfs"] == {"type": "layers", "diff_ids": [sha(gzip.decompress(layer_bytes))]}
    assert (config["architecture"], config["os"]) == ("amd64", "linux")
    assert config["config"] == {"Entrypoint": ["/usr/bin/tool"], "Cmd": ["--serve"], "User": "65532:65532",
                                "Env": ["PATH=/usr/bin:/bin", "A=b"], "WorkingDir": "/work", "Labels": {"x": "y"}}
    assert (result.config_digest, result.layer_digest) == (sha(config_bytes), sha(layer_bytes))
    assert result.diff_id == config["rootfs"]["diff_ids"][0] and result.size == out.stat().st_size
    # exactly the three blobs, nothing else in the layout
    assert sorted(blobs) == sorted(["oci-layout", "index.json", *(f"blobs/sha256/{d.split(':')[1]}" for d in (
        result.manifest_digest, result.config_digest, result.layer_digest))])


def layer_of(out: Path) -> tarfile.TarFile:
    blobs = read_layout(out)
    index = json.loads(blobs["index.json"])
    manifest = json.loads(blobs["blobs/sha256/" + index["manifests"][0]["digest"].split(":")[1]])
    data = blobs["blobs/sha256/" + manifest["layers"][0]["digest"].split(":")[1]]
    assert data[:2] == b"\x1f\x8b" and data[3] == 0 and data[4:8] == b"\0\0\0\0"  # gzip: no name, mtime 0
    return tarfile.open(fileobj=io.BytesIO(gzip.decompress(data)))


def test_layer_holds_the_files_dirs_and_symlinks_as_given(image, tmp_path):
    out, _ = image
    layer = layer_of(out)
    members = {m.name: m for m in layer}
    assert list(members) == sorted(members)
    assert sorted(members) == ["bin", "bin/sh", "etc", "etc/tool", "etc/tool/conf.yaml", "tmp", "usr", "usr/bin",
                               "usr/bin/t", "usr/bin/tool"]
    for m in members.values():
        assert (m.uid, m.gid, m.uname, m.gname, m.mtime) == (0, 0, "", "", 0)
    for parent in ("bin", "etc", "etc/tool", "usr", "usr/bin"):
        assert members[parent].isdir() and members[parent].mode == 0o755
    assert members["tmp"].isdir() and members["tmp"].mode == 0o1777
    tool, conf = members["usr/bin/tool"], members["etc/tool/conf.yaml"]
    assert tool.isreg() and tool.mode == 0o755
    assert layer.extractfile(tool).read() == (tmp_path / "in" / "tool").read_bytes()
    assert conf.isreg() and conf.mode == 0o640 and layer.extractfile(conf).read() == b"key: value\n"
    assert members["bin/sh"].issym() and members["bin/sh"].linkname == "/usr/bin/tool"
    assert members["usr/bin/t"].issym() and members["usr/bin/t"].linkname == "tool"
    cap = tool.pax_headers["SCHILY.xattr.security.capability"].encode("utf-8", "surrogateescape")
    assert cap == oi.file_capability(["net_bind_service"])
    assert "SCHILY.xattr.security.capability" not in conf.pax_headers


def test_same_inputs_give_the_same_bytes(tmp_path):
    outs = []
    for i in range(2):
        files, dirs, links, cfg = inputs(tmp_path / f"in{i}")
        os.utime(tmp_path / f"in{i}" / "tool", (1_000_000 * (i + 1), 1_000_000 * (i + 1)))
        outs.append(tmp_path / f"img{i}.tar")
        # a different order of the same entries changes nothing either
        oi.build_image(outs[-1], "busybox:dtr", files[::-1] if i else files, dirs, links[::-1] if i else links, cfg)
    assert outs[0].read_bytes() == outs[1].read_bytes()
    with tarfile.open(outs[0]) as t:
        assert {(m.mtime, m.uid, m.gid) for m in t} == {(0, 0, 0)}
    other = tmp_path / "other.tar"
    files, dirs, links, cfg = inputs(tmp_path / "in0")
    oi.build_image(other, "busybox:dtr", files, dirs, links, cfg, mtime=1_700_000_000)
    assert other.read_bytes() != outs[0].read_bytes()
    assert json.loads(read_layout(other)["index.json"])["manifests"][0]["digest"] != \
        json.loads(read_layout(outs[0])["index.json"])["manifests"][0]["digest"]


@pytest.mark.parametrize(("ref", "want"), [
    ("busybox", "docker.io/library/busybox:latest"),
    ("busybox:dtr", "docker.io/library/busybox:dtr"),
    ("coredns/coredns:dtr", "docker.io/coredns/coredns:dtr"),
    ("rancher/local-path-provisioner:v0.0.30", "docker.io/rancher/local-path-provisioner:v0.0.30"),
    ("registry.k8s.io/pause:3.10.2", "registry.k8s.io/pause:3.10.2"),
    ("ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489",
     "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489"),
    ("localhost/x", "localhost/x:latest"),
    ("localhost:5000/a/b:1", "localhost:5000/a/b:1"),
    ("docker.io/busybox", "docker.io/library/busybox:latest"),
    ("busybox@sha256:" + "a" * 64, "docker.io/library/busybox@sha256:" + "a" * 64),
])
def test_normalize_ref_spells_references_as_the_cri_does(ref, want):
    assert oi.normalize_ref(ref) == want


@pytest.mark.parametrize("ref", ["", " busybox", "Busybox:1", "a b"])
def test_normalize_ref_rejects(ref):
    with pytest.raises(ValueError):
        oi.normalize_ref(ref)


def test_file_capability_is_vfs_cap_data_revision_2():
    assert oi.file_capability(["CAP_NET_BIND_SERVICE"]) == bytes.fromhex("01000002" + "00040000" + "00" * 12)
    with pytest.raises(ValueError):
        oi.file_capability(["cap_bogus"])


def test_bad_layouts_are_refused(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(ValueError, match="twice"):
        oi.build_image(tmp_path / "a.tar", "x", [oi.File(f, "/a"), oi.File(f, "a")])
    with pytest.raises(ValueError, match="bad image path"):
        oi.build_image(tmp_path / "a.tar", "x", [oi.File(f, "/a/../../etc/passwd")])
    with pytest.raises(ValueError, match="not a directory"):
        oi.build_image(tmp_path / "a.tar", "x", [oi.File(f, "/bin/x")], symlinks=[oi.Symlink("/bin", "usr/bin")])
    assert not list(tmp_path.glob("a.tar*"))  # nothing left behind


def test_cli_writes_the_tar_and_prints_the_reference(tmp_path, capsys):
    f = tmp_path / "pause"
    f.write_bytes(b"\0" * 10)
    out = tmp_path / "pause.tar"
    assert oi.main(["--ref", "registry.k8s.io/pause:3.10.2", "--out", str(out), "--file", str(f), "/pause", "0755",
                    "--entrypoint", '["/pause"]', "--user", "65535:65535", "--symlink", "/p", "pause",
                    "--caps", "/pause=net_bind_service", "--dir", "/tmp", "1777", "--mtime", "0"]) == 0
    ref, digest, path, size = capsys.readouterr().out.split()
    assert (ref, path, int(size)) == ("registry.k8s.io/pause:3.10.2", str(out), out.stat().st_size)
    index = json.loads(read_layout(out)["index.json"])
    assert index["manifests"][0]["digest"] == digest
    layer = layer_of(out)
    assert [m.name for m in layer] == ["p", "pause", "tmp"]
    assert layer.getmember("pause").pax_headers
    with pytest.raises(SystemExit):
        oi.main(["--ref", "x", "--out", str(out), "--caps", "/nope=net_admin"])
