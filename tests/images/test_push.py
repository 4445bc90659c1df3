"""`make push REGISTRY=...` (deploy/images/push.sh) against a real registry: Debian's docker-registry
(the CNCF distribution server) on a loopback port, since none on the internet is reachable here.

The operator image goes there and comes back byte-identical (the trainer's 2 GB would only cost
time: the same script pushes it the same way), and the overlay the script writes names it.
"""

from __future__ import annotations

import os
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from devcluster.node import image_names
from support.registry import local_registry

REPO = Path(__file__).resolve().parents[2]
OPERATOR, TRAINER = image_names()
STANDIN = "dev.distml.standin"  # the label deploy/images/base-images.sh gives a stand-in base


def sh(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=False, env=env)


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[str]:
    """A registry on 127.0.0.1 (Docker pushes to a loopback registry over plain HTTP)."""
    need = sh("bash", "-c", f"source {REPO}/deploy/lib.sh && need_packages docker-registry:docker-registry")
    assert need.returncode == 0, need.stderr  # CI installs it; elsewhere the line says what to install
    with local_registry(tmp_path) as registry:
        yield registry


def test_push_puts_the_operator_image_on_a_registry_and_the_overlay_deploys_it_from_there(
    registry: str, tmp_path: Path
) -> None:
    overlay = tmp_path / "overlay"
    # DTR_PUSH_STANDIN: the operator image here may be built on a stand-in; this registry is the test's own.
    env = {**os.environ, "DTR_PUSH_IMAGES": OPERATOR, "DTR_OVERLAY": str(overlay), "DTR_PUSH_STANDIN": "1"}
    pushed = sh("bash", str(REPO / "deploy" / "images" / "push.sh"), registry, env=env)
    assert pushed.returncode == 0, pushed.stdout[-2000:] + pushed.stderr
    remote = f"{registry}/{OPERATOR.removeprefix('localhost/')}"
    built = sh("docker", "image", "inspect", "-f", "{{.Id}}", OPERATOR).stdout.strip()

    # Gone from this engine, then pulled back from the registry: the same image.
    assert sh("docker", "image", "rm", remote).returncode == 0
    try:
        pulled = sh("docker", "pull", remote)
        assert pulled.returncode == 0, pulled.stderr
        assert sh("docker", "image", "inspect", "-f", "{{.Id}}", remote).stdout.strip() == built
    finally:
        sh("docker", "image", "rm", remote)

    rendered = sh("kubectl", "kustomize", str(overlay))
    assert rendered.returncode == 0, rendered.stderr
    repository, tag = remote.rsplit(":", 1)
    assert f"image: {repository}@{registry_digest(registry, repository.split('/', 2)[2], tag)}\n" in rendered.stdout
    # The trainer was not pushed from here: the overlay names its tag, and says why.
    assert f"value: {registry}/{TRAINER.removeprefix('localhost/')}\n" in rendered.stdout
    assert "no pushed digest known here" in pushed.stderr


@pytest.fixture
def standin_image() -> Iterator[str]:
    """An empty image labelled as a stand-in base is: what an image built FROM one inherits."""
    name = "localhost/dtr-test/standin-based:1"
    built = subprocess.run(["docker", "build", "-q", "-t", name, "-"], input=f"FROM scratch\nLABEL {STANDIN}=1\n",
                           capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert built.returncode == 0, built.stderr
    try:
        yield name
    finally:  # and the tag push.sh gives it before a push (to 127.0.0.1:1/x, which fails, below)
        sh("docker", "image", "rm", name, f"127.0.0.1:1/x/{name.removeprefix('localhost/')}")


def test_push_refuses_an_image_built_on_a_stand_in_base_unless_told(standin_image: str, tmp_path: Path) -> None:
    env = {**os.environ, "DTR_PUSH_IMAGES": standin_image, "DTR_OVERLAY": str(tmp_path)}
    refused = sh("bash", str(REPO / "deploy" / "images" / "push.sh"), "127.0.0.1:1/x", env=env)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert f"{standin_image} is built on a local stand-in base image" in refused.stderr, refused.stderr
    assert "DTR_PUSH_STANDIN=1" in refused.stderr and "push 127.0.0.1:1/x" not in refused.stdout
    # Told: it goes on to the push (which fails here: nothing listens on port 1).
    told = sh("bash", str(REPO / "deploy" / "images" / "push.sh"), "127.0.0.1:1/x",
              env={**env, "DTR_PUSH_STANDIN": "1"})  # fmt: skip
    assert "pushed because DTR_PUSH_STANDIN=1" in told.stdout, told.stdout + told.stderr
    assert "push 127.0.0.1:1/x/dtr-test/standin-based:1" in told.stdout, told.stdout


def test_push_of_an_image_not_built_here_says_to_build_it(tmp_path: Path) -> None:
    env = {**os.environ, "DTR_PUSH_IMAGES": "localhost/distml/operator:no-such-tag", "DTR_OVERLAY": str(tmp_path)}
    proc = sh("bash", str(REPO / "deploy" / "images" / "push.sh"), "127.0.0.1:1/x", env=env)
    assert proc.returncode == 1 and "is not built here: run make images first" in proc.stderr, proc.stderr


def registry_digest(registry: str, repository: str, tag: str) -> str:
    """The digest the registry itself serves for repository:tag (its Docker-Content-Digest header)."""
    host, _, path = registry.partition("/")
    request = urllib.request.Request(
        f"http://{host}/v2/{path}/{repository}/manifests/{tag}", method="HEAD",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json, "
                           "application/vnd.oci.image.manifest.v1+json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers["Docker-Content-Digest"]


def overlay_operator_image(overlay: Path) -> str:
    rendered = sh("kubectl", "kustomize", str(overlay))
    assert rendered.returncode == 0, rendered.stderr
    deployment = next(d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "Deployment")
    return deployment["spec"]["template"]["spec"]["containers"][0]["image"]


def test_a_rebuild_pushed_under_the_same_tag_reaches_the_nodes_through_a_new_digest(
    registry: str, tmp_path: Path
) -> None:
    """Two pushes of 0.1.0, the second a different build: the overlay names each push's digest (what the
    registry serves for the tag), so the Deployment changes and no node keeps the old image under IfNotPresent."""
    overlay = tmp_path / "overlay"
    env = {**os.environ, "DTR_PUSH_IMAGES": OPERATOR, "DTR_OVERLAY": str(overlay), "DTR_PUSH_STANDIN": "1"}
    repository, tag = OPERATOR.removeprefix("localhost/").rsplit(":", 1)
    original = sh("docker", "image", "inspect", "-f", "{{.Id}}", OPERATOR).stdout.strip()
    assert original, f"{OPERATOR} is not built"
    images: list[str] = []
    try:
        for build in ("first", "second"):
            if build == "second":  # a rebuild: another image under the same name and tag
                rebuilt = subprocess.run(["docker", "build", "-q", "-t", OPERATOR, "-"],
                                         input=f"FROM {original}\nLABEL dev.distml.test-rebuild={tmp_path.name}\n",
                                         capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
                assert rebuilt.returncode == 0, rebuilt.stderr
            pushed = sh("bash", str(REPO / "deploy" / "images" / "push.sh"), registry, env=env)
            assert pushed.returncode == 0, pushed.stdout[-2000:] + pushed.stderr
            image = overlay_operator_image(overlay)
            assert image == f"{registry}/{repository}@{registry_digest(registry, repository, tag)}", image
            images.append(image)
    finally:
        rebuilt_id = sh("docker", "image", "inspect", "-f", "{{.Id}}", OPERATOR).stdout.strip()
        sh("docker", "image", "rm", f"{registry}/{repository}:{tag}")  # push.sh's tag
        sh("docker", "tag", original, OPERATOR)  # the tiers after this one use the image as built
        if rebuilt_id and rebuilt_id != original:
            sh("docker", "image", "rm", rebuilt_id)
    assert images[0] != images[1], "the second push got the first one's reference"
