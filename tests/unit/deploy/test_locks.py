"""The images' locks (deploy/images/lock.py --check, also in make lint): offline, each lock holds exactly the
pinned lists' packages at their versions, every one with a hash; and the check fails when one does not."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

from support.repo import REPO


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dtr_lock", REPO / "deploy" / "images" / "lock.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


lock = load()


def test_every_lock_holds_its_pins_with_hashes() -> None:
    assert lock.check() == []


def test_each_platform_has_its_lock_and_the_dockerfiles_install_from_them() -> None:
    for image in lock.IMAGES:
        dockerfile = (REPO / f"Dockerfile.{image.name}").read_text()
        assert f'--require-hashes --no-deps -r "{image.name}/locks/linux-$(uname -m).lock"' in dockerfile
        assert {p.name for p in (REPO / image.name / "locks").iterdir()} == {f"linux-{m}.lock" for m in lock.PLATFORMS}


def test_the_trainer_lock_takes_tensorflows_arm64_shell_only_on_arm64() -> None:
    trainer = next(i for i in lock.IMAGES if i.name == "trainer")
    assert "tensorflow-cpu-aws" in lock.pins(trainer.lock("aarch64").read_text())
    assert "tensorflow-cpu-aws" not in lock.pins(trainer.lock("x86_64").read_text())


@pytest.fixture
def copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for image in lock.IMAGES:
        for path in image.inputs + image.constraints:
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / path, tmp_path / path)
        shutil.copytree(REPO / image.name / "locks", tmp_path / image.name / "locks")
    monkeypatch.setattr(lock, "REPO", tmp_path)
    return tmp_path


@pytest.mark.parametrize(("image", "old", "new", "says"), [
    ("trainer", "--hash=sha256:", "--hush=sha256:", "no --hash for"),
    ("trainer", "numpy==1.23.5", "numpy==1.23.4", "numpy==1.23.4 is not pinned so"),
    ("operator", "kopf==1.45.2", "kopfx==1.45.2", "lacks kopf==1.45.2"),
    ("operator", "pip==", "pipx==", "lacks pip=="),
])  # fmt: skip
def test_the_check_names_a_lock_that_is_not_its_pins(copy: Path, image: str, old: str, new: str, says: str) -> None:
    path = copy / image / "locks" / "linux-x86_64.lock"
    path.write_text(path.read_text().replace(old, new))
    found = lock.check()
    assert any(says in p and "linux-x86_64.lock" in p for p in found), found
    assert not any("aarch64" in p for p in found), found


def test_the_check_names_a_pin_changed_in_the_list(copy: Path) -> None:
    path = copy / "trainer" / "requirements.txt"
    path.write_text(path.read_text().replace("scipy==1.10.1", "scipy==1.10.0"))
    assert any("scipy==1.10.1 is not pinned so" in p for p in lock.check())
