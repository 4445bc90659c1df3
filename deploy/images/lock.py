"""The hash-pinned locks both images install from (docs/images.md#locks): one per image and platform.

    python deploy/images/lock.py           write operator/locks/*.lock and trainer/locks/*.lock
    python deploy/images/lock.py --check   offline: each lock holds exactly its pins, each with a hash (make lint)

A lock is generated from the pinned lists, never edited: the trainer's from trainer/requirements.txt (every
package of its environment, so no resolution: `--no-deps`), the operator's from the runtime dependencies of
operator/pyproject.toml and contract/, resolved under operator/requirements.txt as constraints (the test tools in
that list stay out of the image); both with the installers of requirements-build.txt. uv (deploy/requirements-uv.txt,
the Makefile's) does the work from a virtualenv of its own under DTR_CACHE. Each lock line carries the hashes of
every file PyPI has for that version, so pip (`--require-hashes --no-deps`) refuses any other file; markers are
evaluated per platform.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UV = next(pin for pin in (REPO / "deploy" / "requirements-uv.txt").read_text().splitlines() if pin.startswith("uv=="))
# linux/<machine> -> uv's target; glibc 2.31 (Debian bullseye, the oldest base built on) or newer
PLATFORMS = {"x86_64": "x86_64-manylinux_2_31", "aarch64": "aarch64-manylinux_2_31"}
LOCK_COMMAND = "python deploy/images/lock.py"


@dataclass(frozen=True)
class Image:
    name: str  # its directory: <name>/locks/linux-<machine>.lock
    python: str  # the interpreter version the lock is for
    inputs: tuple[str, ...]  # requirement files (or pyproject.toml) whose pins the lock holds
    constraints: tuple[str, ...] = ()  # pins for what inputs pull in (operator: the whole environment's list)
    local: tuple[tuple[str, str], ...] = ()  # (name, path): the repository's own packages, never looked up on an index

    @property
    def no_deps(self) -> bool:
        return not self.constraints

    def lock(self, machine: str) -> Path:
        return REPO / self.name / "locks" / f"linux-{machine}.lock"


IMAGES = (
    Image("operator", "3.11", ("operator/pyproject.toml", "operator/requirements-build.txt"),
          constraints=("operator/requirements.txt",), local=(("dtr-contract", "./contract"),)),
    # 3.9.2: Debian bullseye's (the stand-in); some pins exclude 3.9.0 and 3.9.1, so "3.9" does not resolve
    Image("trainer", "3.9.2", ("trainer/requirements.txt", "trainer/requirements-build.txt")),
)  # fmt: skip

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)\s*(;[^\\]*)?")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(text: str) -> list[str]:
    """The requirement entries of a requirements file: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", text)
    return [line.split(" #", 1)[0].strip() for line in joined.splitlines() if line.strip() and
            not line.lstrip().startswith("#")]  # fmt: skip


def pins(text: str, machine: str | None = None, python: str = "3.9") -> dict[str, str]:
    """name -> version of every `name==version` entry; with machine, only those whose marker holds on linux/machine."""
    found = {}
    for entry in requirements(text):
        match = PIN.match(entry)
        if match is None:
            continue
        name, version, marker = match.groups()
        if machine is None or marker is None or holds(marker[1:], machine, python):
            found[normalized(name)] = version
    return found


def holds(marker: str, machine: str, python: str) -> bool:
    from packaging.markers import Marker  # the operator environment has it; the generator's venv needs none

    env = {"platform_system": "Linux", "sys_platform": "linux", "platform_machine": machine,
           "python_version": ".".join(python.split(".")[:2]), "python_full_version": python}  # fmt: skip
    return Marker(marker).evaluate(env)


def unhashed(text: str) -> list[str]:
    return [entry for entry in requirements(text) if "--hash=sha256:" not in entry]


def expected(image: Image, machine: str) -> dict[str, str]:
    """The pins a lock must hold exactly (trainer), or at least and at these versions (operator)."""
    files = image.inputs if image.no_deps else (*image.inputs[1:], *image.constraints)
    found: dict[str, str] = {}
    for path in files:
        found.update(pins((REPO / path).read_text(), machine, image.python))
    return found


def direct(image: Image, want: dict[str, str]) -> dict[str, str]:
    """The runtime dependencies pyproject.toml names (but the repository's own), at their pinned versions."""
    import tomllib  # the operator environment's Python (3.11) has it

    declared = tomllib.loads((REPO / image.inputs[0]).read_text())["project"]["dependencies"]
    names = {normalized(re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0]) for d in declared}
    return {n: want.get(n, "(unpinned)") for n in names - {name for name, _ in image.local}}


def problems(image: Image, machine: str) -> list[str]:
    """What is wrong with one lock: a missing hash, a pin that is not in the lists or not at their version."""
    path = image.lock(machine)
    if not path.exists():
        return [f"{path.relative_to(REPO)} is missing: run {LOCK_COMMAND}"]
    text = path.read_text()
    locked, want = pins(text), expected(image, machine)
    where = path.relative_to(REPO)
    found = [f"{where}: no --hash for {entry.split()[0]}" for entry in unhashed(text)]
    found += [f"{where}: {n}=={v} is not pinned so in the lists" for n, v in locked.items() if want.get(n) != v]
    must = want if image.no_deps else {**pins((REPO / image.inputs[1]).read_text()), **direct(image, want)}
    found += [f"{where}: lacks {n}=={v}" for n, v in must.items() if locked.get(n) != v]
    return found + [f"{where}: regenerate it: {LOCK_COMMAND}"] * bool(found)


def check() -> list[str]:
    return [p for image in IMAGES for machine in PLATFORMS for p in problems(image, machine)]


def uv() -> Path:
    """uv at its pin: the Makefile's, which installs the environments with it (made there the first time)."""
    binary = Path(os.environ.get("DTR_CACHE", Path.home() / ".cache" / "dtr")) / UV.replace("==", "-") / "bin" / "uv"
    if not binary.exists():
        subprocess.run(["make", "-s", "--no-print-directory", "-C", str(REPO), str(binary)], check=True)
    return binary


def compile_lock(binary: Path, image: Image, machine: str) -> None:
    out = image.lock(machine)
    out.parent.mkdir(exist_ok=True)
    command = [str(binary), "pip", "compile", "-q", "--generate-hashes", "--no-annotate",
               "--custom-compile-command", LOCK_COMMAND, "--python-version", image.python,
               "--python-platform", PLATFORMS[machine], "-o", str(out.relative_to(REPO))]  # fmt: skip
    if image.no_deps:
        command += ["--no-deps", *image.inputs]
    else:
        command += ["-", *image.inputs, *(a for c in image.constraints for a in ("-c", c)),
                    *(a for name, _ in image.local for a in ("--no-emit-package", name))]  # fmt: skip
    local = "".join(f"{name} @ {path}\n" for name, path in image.local)
    subprocess.run(command, cwd=REPO, input=local, text=True, check=True)


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        found = check()
        print("\n".join(found) or f"locks: {len(IMAGES) * len(PLATFORMS)} ok")
        return 1 if found else 0
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    binary = uv()
    for image in IMAGES:
        for machine in PLATFORMS:
            compile_lock(binary, image, machine)
            print(image.lock(machine).relative_to(REPO))
    return main(["--check"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
