"""The scripts a laptop user runs (make k3d-up, k3d-down, images, push, doctor, ./dtr, deploy/install.sh) on macOS:
its bash 3.2 and BSD tools (docs/k3d.md#which-machines).

Static: no bash >= 4 construct, no GNU-only tool or flag outside the portable helpers of deploy/lib.sh, no
possibly empty array expanded unguarded (tests/support/portable_shell.py), but for the allow-lists below.
Dynamic: the scripts' early paths (and k3d-up's whole flow, against fake docker, k3d and kubectl) with a PATH of
what macOS has: no timeout, sha256sum or setsid; realpath, readlink, stat, sed, date, sort, grep, xargs, mktemp and
the basic tools refusing GNU's options as BSD's do; uname saying Darwin.
DTR_BASH32=/path/to/bash runs them with that bash (a real 3.2: docs/k3d.md#which-machines says how one was built);
DTR_BSD_TOOLS=DIR puts the tools found in DIR (real BSD ones) in place of the stand-ins.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from devcluster.node import image_names
from support.portable_shell import BASH4, GNU, code_of, violations
from support.repo import REPO

BASH = os.environ.get("DTR_BASH32") or shutil.which("bash") or "/bin/bash"

# Every deploy/ script runs on a laptop (the Linux-only parts refuse elsewhere first), and ./dtr; devcluster/'s
# scripts are CI's and root's (docs/k3d.md#which-machines). versions.env is sourced by install.sh and doctor.sh.
LAPTOP_SCRIPTS = sorted([*(p.relative_to(REPO).as_posix() for p in REPO.glob("deploy/**/*.sh")), "dtr",
                         "devcluster/versions.env"])  # fmt: skip
LAPTOP_TARGETS = ("k3d-up", "k3d-down", "images", "push", "doctor", "docker-up", "base-images")

# Arrays created empty whose every expansion comes after a check that they are not.
NOT_EMPTY_WHEN_EXPANDED = {
    ("deploy/lib.sh", "needs"): "need_packages returns before any use when nothing is missing",
    ("deploy/lib.sh", "missing"): "need_packages returns before any use when nothing is missing",
    ("deploy/doctor.sh", "WANT"): "applies() returns before its loop when no target was named",
    ("deploy/doctor.sh", "missing_run"): "named only in the branch where it is not empty",
    ("deploy/doctor.sh", "missing_test"): "named only in the branch where it is not empty",
    ("deploy/images/build.sh", "missing"): "named only after its count check",
    ("deploy/images/build.sh", "summary"): "one entry per IMAGES entry before it is printed",
}
# GNU-only uses that are the portable helpers themselves, or Linux-only code behind a refusal elsewhere.
GNU_ONLY_ALLOWED = {
    ("deploy/lib.sh", 'timeout "${seconds}" "$@"'): "with_timeout itself, where GNU timeout is there",
    ("deploy/lib.sh", 'sum="$(sha256sum)"'): "sha256_hex itself, where sha256sum is there",
    ("deploy/images/docker-up.sh", "setsid dockerd"): "starting dockerd: after the Linux check",
    ("deploy/images/base-images.sh", 'mountpoint -q "${rootfs}/proc"'): "a stand-in's cleanup: rootfs is set only "
    "by build_standin, after its Linux check",
    ("deploy/images/base-images.sh", 'rm -rf --one-file-system "${rootfs}"'): "build_standin: after its Linux check",
}


def laptop_violations(path: str) -> list[str]:
    """What the lint finds in PATH that no allow-list names."""
    found = []
    for v in violations((REPO / path).read_text()):
        array = re.match(r"\$\{(\w+)\[@\]\} of an array", v.rule)
        if array and (path, array.group(1)) in NOT_EMPTY_WHEN_EXPANDED:
            continue
        if not array and any(p == path and snippet in v.text for p, snippet in GNU_ONLY_ALLOWED):
            continue
        found.append(f"{path} {v}")
    return found


def test_the_lint_covers_every_script_the_laptop_targets_run():
    """The Makefile's laptop targets, and what those scripts run or source in turn, are all in LAPTOP_SCRIPTS."""
    makefile = (REPO / "Makefile").read_text()
    run = set()
    for target in LAPTOP_TARGETS:
        recipe = re.search(rf"(?m)^{re.escape(target)}:.*\n((?:\t.*\n)*)", makefile)
        assert recipe, target
        run |= set(re.findall(r"\bbash '?([\w/.-]+\.sh)", recipe.group(1)))
        if "$(DOCTOR)" in recipe.group(1):
            run |= set(re.findall(r"\bbash ([\w/.-]+\.sh)", re.search(r"(?m)^DOCTOR = .*", makefile).group(0)))
    assert "deploy/k3d/up.sh" in run and "deploy/doctor.sh" in run, run
    for script in LAPTOP_SCRIPTS:
        text = (REPO / script).read_text()
        for base, rel in re.findall(r'(?:bash|source)\s+"(\$\{ROOT\}|\$\(dirname "\$\{BASH_SOURCE\[0\]\}"\))/([^"]+)"',
                                    text):  # fmt: skip
            where = REPO if base == "${ROOT}" else (REPO / script).parent
            run.add(os.path.relpath((where / rel).resolve(), REPO))
    assert run <= set(LAPTOP_SCRIPTS), run - set(LAPTOP_SCRIPTS)


@pytest.mark.parametrize("path", LAPTOP_SCRIPTS)
def test_no_bash4_or_gnu_only_construct(path):
    assert laptop_violations(path) == []


def test_every_allowance_is_still_needed():
    """An allow-list entry whose use is gone goes too (else it would wave a new use through)."""
    for (path, snippet), why in GNU_ONLY_ALLOWED.items():
        assert any(snippet in v.text for v in violations((REPO / path).read_text())), (path, snippet, why)
    for (path, array), why in NOT_EMPTY_WHEN_EXPANDED.items():
        assert any(f"${{{array}[@]}} of an array" in v.rule for v in violations((REPO / path).read_text())), (
            path, array, why)  # fmt: skip


# One line per rule that it must catch; the comments and messages after it must not be caught.
CAUGHT = """\
declare -A seen
mapfile -t lines <file
echo "DTR_${1^^}_BASE"
make |& tee log
echo x &>> log
wait -n
echo "${v@Q}"
echo "$EPOCHSECONDS"
echo "${a[-1]}"
echo "${v:0:-1}"
shopt -s globstar
local -
printf '%(%Y)T\\n' -1
coproc cat
case x in a) ;;& esac
echo {1..9..2}
exec {fd}>log
[[ -v name ]]
read -N 1 c
[[ "$x" =~ ^a(b)?$ ]]
if timeout 20 docker info; then :; fi
x="$(printf x | sha256sum)"
base="$(realpath --relative-to=a b)"
self="$(readlink -f "$0")"
sed -i 's/a/b/' f
grep -P '\\d' f
date -d yesterday
stat -c %s f
mktemp -p /tmp
xargs -r echo
find . -printf '%p'
sort -V f
base64 -w0 f
install -D a b
du -b f
n="$(nproc)"
rm -rf --one-file-system d
awk '{ print gensub(/a/, "b", "g") }'
a=(); cmd "${a[@]}"
"""
NOT_CAUGHT = """\
# timeout 20 docker info; sed -i; declare -A; ${v,,}; |&; realpath --relative-to
echo "wait for it (timeout ${TIMEOUT}s; |& &>> sort -V)"  # printf '%(%Y)T' in a comment
kubectl wait --timeout=120s node; k3d cluster create --timeout 300s; DTR_TIMEOUT=3
if command -v timeout >/dev/null; then :; fi
[[ "${x}" =~ ${pattern} ]]
b=()
cmd ${b[@]+"${b[@]}"} "${#b[@]}"
cat <<'EOF'
timeout 20 sleep 1; ${v,,}
EOF
rm -rf -- "${dir}"
"""


def test_the_lint_catches_each_construct_and_not_its_mention():
    found = violations(CAUGHT)
    assert sorted({v.line for v in found}) == list(range(1, CAUGHT.count("\n") + 1)), [str(v) for v in found]
    assert {r.name for r in BASH4 + GNU} <= {v.rule for v in found}
    assert [str(v) for v in violations(NOT_CAUGHT)] == []


def test_code_of_keeps_expansions_in_strings_and_blanks_the_rest():
    script = 'echo "a ${x,,} $(timeout 1 "y") b" \'timeout 2\' # timeout 3\ncat <<E\nc ${d}\nE\n'
    assert code_of(script) == 'echo "  ${x,,} $(timeout 1 " ")  " \'         \'            \ncat <<E\n  ${d}\nE\n'


# --- the scripts with macOS's tools -----------------------------------------------------------------------------

# What macOS has in /bin and /usr/bin (and git, make with the Command Line Tools) that these scripts use.
MACOS_TOOLS = ("awk", "basename", "cat", "chmod", "cp", "cut", "date", "df", "dirname", "env", "find", "grep",
               "head", "id", "ln", "ls", "mkdir", "mktemp", "mv", "perl", "printf", "readlink", "realpath", "rm",
               "sed", "shasum", "sleep", "sort", "stat", "tail", "tee", "touch", "tr", "wc", "xargs")  # fmt: skip
# What BSD's tools refuse (case patterns of one argument) where GNU's accept: the stand-ins exit 64 on them.
# readlink as before macOS 12.3 (no -f); sed -i without a suffix takes the script for one, so it is refused too.
LONG = "--?*"
BSD_REFUSES = {
    "realpath": "-[!q]*",
    "readlink": "-[!n]*",
    "stat": f"-c*|{LONG}",
    "sed": f"-i|-*r*|{LONG}",
    "date": f"-d*|{LONG}",
    "sort": f"-*V*|{LONG}",
    "grep": f"-*P*|{LONG}",
    "xargs": f"-*r*|{LONG}",
    "mktemp": f"-p*|{LONG}",
    **dict.fromkeys(("basename", "cat", "chmod", "cp", "cut", "df", "dirname", "env", "head", "id", "ln", "ls",
                     "mkdir", "mv", "rm", "tail", "tee", "touch", "tr", "wc"), LONG),
}

FAKE_DOCKER = """\
#!/bin/sh
echo "docker $*" >>"$CALLS"
case "$1" in
  info) [ -z "$DOCKER_DOWN" ] || exit 1; [ -z "$DOCKER_HANGS" ] || exec sleep 30; exit 0 ;;  # one process, as docker is
  version) echo "client 24.0.7 (API 1.43), engine 24.0.7 (API 1.43)" ;;
  pull) [ -z "$DOCKER_PULL_FAILS" ] || exit 1 ;;
  image)
    [ "$2" = inspect ] || exit 0
    [ -z "$DOCKER_NO_IMAGES" ] || exit 1
    case "$*" in
      *RepoDigests*) echo "registry.example:5000/ml/distml/operator@sha256:0123abcd" ;;
      *host-settings*) echo " none" ;;
      *Labels*) echo "" ;;
      *Size*) echo 123000000 ;;
      *Id*) echo sha256:0123456789abcdef0123 ;;
    esac ;;
esac
exit 0
"""
FAKE_K3D = """\
#!/bin/sh
echo "k3d $*" >>"$CALLS"
case "$*" in "cluster get"*) [ -n "$K3D_CLUSTER_EXISTS" ] || exit 1 ;; esac
exit 0
"""
FAKE_KUBECTL = """\
#!/bin/sh
echo "kubectl $*" >>"$CALLS"
case "$*" in
  kustomize*) [ -z "$TEAM_OVERLAY" ] || { printf '%s\\n' 'kind: Namespace' 'metadata:' '  name: dtr-ml-team' --- \\
    'kind: Deployment' 'metadata:' '  name: dtr-operator' '  namespace: dtr-ml-team'; exit 0; }
    printf '%s\\n' 'kind: Namespace' 'metadata:' '  name: dtr-system' --- 'kind: ClusterRole' 'metadata:' \\
    '  labels:' '    a: b' '  name: dtr-operator' --- 'kind: ServiceAccount' 'metadata:' '  name: dtr-operator' \\
    --- 'kind: CustomResourceDefinition' 'metadata:' '  name: disttrainingruns.distml.dev' ;;
  "auth can-i"*) echo yes ;;
  "config current-context") echo k3d-dtr ;;
  "get crd"*) [ -n "$CRD_EXISTS" ] || exit 1 ;;
  "wait --for=condition=Established"*)
    echo x >>"$CALLS.waits"
    if [ -n "$CRD_WAIT_FAILS" ]; then echo "error: timed out waiting for the condition" >&2; exit 1; fi
    if [ "$(wc -l <"$CALLS.waits")" -le "${CRD_CONDITIONS_LATE:-0}" ]; then
      echo 'error: .status.conditions accessor error: <nil> is of the type <nil>, expected []interface{}' >&2; exit 1
    fi ;;
  *"version -o json") [ -z "$KUBE_MINOR" ] ||
    printf '{\n  "serverVersion": {\n    "major": "1",\n    "minor": "%s"\n  }\n}\n' "$KUBE_MINOR" ;;
  *endpointslices*addresses*) echo 172.18.0.2 ;;
  *endpointslices*port*) echo 6443 ;;
  *"service kubernetes"*clusterIP*) echo 10.43.0.1 ;;
  *"service kubernetes"*port*) echo 443 ;;
  *status.phase*) printf 'Succeeded\\tModelExported\\tdone\\n' ;;
  *status.model.claim*) echo mnist-volume ;;
  *storageUri*) echo pvc://mnist-volume/models/mnist ;;
  *status.model.version*) echo 1 ;;
  *status.model.path*) echo /volume/models/mnist/1 ;;
  *"get pvc"*) echo pvc-1234 ;;
  "create --dry-run"*) echo mnist ;;
esac
exit 0
"""


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def _bsd_stand_in(name: str, real: str, refuses: str) -> str:
    return (f'#!/bin/sh\nfor arg in "$@"; do\n  case "$arg" in\n    --) break ;;\n    {refuses})\n'
            f'      echo "{name}: illegal option -- $arg (BSD {name}, as on macOS)" >&2; exit 64 ;;\n  esac\ndone\n'
            f'exec {real} "$@"\n')  # fmt: skip


def macos_bin(bindir: Path) -> None:
    """BINDIR filled with macOS's tools: the host's, behind BSD stand-ins; DTR_BSD_TOOLS's where it has them."""
    bindir.mkdir()
    bsd = Path(os.environ["DTR_BSD_TOOLS"]) if os.environ.get("DTR_BSD_TOOLS") else None
    for name in MACOS_TOOLS:
        if bsd and (bsd / name).exists():
            (bindir / name).symlink_to(bsd / name)
            continue
        real = shutil.which(name)
        assert real, f"{name} is not on this machine's PATH: the fake macOS PATH needs it"
        if name in BSD_REFUSES:
            _write(bindir / name, _bsd_stand_in(name, real, BSD_REFUSES[name]))
        else:
            (bindir / name).symlink_to(real)
    (bindir / "bash").symlink_to(BASH)
    _write(bindir / "uname", "#!/bin/sh\necho Darwin\n")
    _write(bindir / "docker", FAKE_DOCKER)
    _write(bindir / "k3d", FAKE_K3D)
    _write(bindir / "kubectl", FAKE_KUBECTL)


class Mac:
    """Runs a script with a macOS PATH, a HOME and a DTR_STATE of its own, and reads the fakes' calls."""

    def __init__(self, tmp_path: Path) -> None:
        self.bin = tmp_path / "bin"
        macos_bin(self.bin)
        self.home = tmp_path / "home"
        self.home.mkdir()
        self.state = tmp_path / "state"
        self.calls_file = tmp_path / "calls.log"
        self.calls_file.touch()

    def env(self, **extra: str) -> dict[str, str]:
        return {"PATH": str(self.bin), "HOME": str(self.home), "DTR_STATE": str(self.state), "LANG": "C",
                "CALLS": str(self.calls_file), **extra}  # fmt: skip

    def run(self, script: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([BASH, str(REPO / script), *args], env=self.env(**env), cwd=REPO,
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip

    def calls(self, prefix: str) -> list[str]:
        return [ln for ln in self.calls_file.read_text().splitlines() if ln.startswith(prefix)]


@pytest.fixture
def mac(tmp_path: Path) -> Mac:
    return Mac(tmp_path)


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The single line of a refusal: exit 1, `error: ...` alone on stderr."""
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: "), line
    return line


def test_docker_up_with_docker_desktop_running_needs_no_gnu_timeout(mac):
    proc = mac.run("deploy/images/docker-up.sh")
    assert proc.returncode == 0, proc.stderr
    assert "Docker engine answers: client 24.0.7" in proc.stdout
    assert mac.calls("docker info")


def test_docker_up_without_an_engine_on_macos_says_to_start_docker_desktop(mac):
    line = one_error_line(mac.run("deploy/images/docker-up.sh", DOCKER_DOWN="1"))
    assert "Docker Desktop" in line and "only root" not in line


def test_with_timeout_bounds_a_hang_without_gnu_timeout(mac):
    lib = REPO / "deploy" / "lib.sh"
    started = time.monotonic()
    proc = subprocess.run([BASH, "-c", f'source "{lib}"; with_timeout 1 docker info'], env=mac.env(DOCKER_HANGS="1"),
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode != 0 and time.monotonic() - started < 10
    proc = subprocess.run([BASH, "-c", f'source "{lib}"; with_timeout 5 bash -c "exit 3"'], env=mac.env(),
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 3, proc.stderr


def test_build_without_proxies_and_without_sha256sum(mac):
    """No proxy variable: the empty build_args array (unbound to bash 3.2's set -u); the build base's name from
    shasum; both builds with the Dockerfile's base."""
    proc = mac.run("deploy/images/build.sh")
    assert proc.returncode == 0, proc.stderr
    builds = [c for c in mac.calls("docker build") if " -f " in c]
    assert [c.split(" -f ")[1].split()[0] for c in builds] == [str(REPO / "Dockerfile.operator"),
                                                                str(REPO / "Dockerfile.trainer")]  # fmt: skip
    digest = hashlib.sha256(b"python:3.11-slim").hexdigest()[:12]
    assert f"--build-arg BASE=python:3.11-slim --build-arg BUILD_BASE=localhost/dtr-build/base:{digest}" in builds[0]
    proc = mac.run("deploy/images/build.sh", "--no-cache", HTTPS_PROXY="http://proxy.example:3128",
                   DTR_TRAINER_BASE="python:3.9-slim@sha256:0123")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    last = mac.calls("docker build")[-1]
    assert "--build-arg HTTPS_PROXY --build-arg BASE=python:3.9-slim@sha256:0123" in last and "--no-cache" in last


def test_push_writes_its_overlay_with_bsd_realpath(mac):
    proc = mac.run("deploy/images/push.sh", "registry.example:5000/ml", DTR_PUSH="0")
    assert proc.returncode == 0, proc.stderr
    overlay = mac.state / "deploy-registry"
    resources = re.search(r"(?m)^resources:\n  - (.*)$", (overlay / "kustomization.yaml").read_text()).group(1)
    assert not resources.startswith("/") and (overlay / resources).resolve() == (REPO / "deploy").resolve()
    assert "registry.example:5000/ml/distml/operator@sha256:0123abcd" in proc.stdout


def test_push_refuses_a_registry_that_is_no_host_in_one_line(mac):
    assert "is not host[:port][/path]" in one_error_line(mac.run("deploy/images/push.sh", "Not_A/Registry"))


def test_dtr_through_relative_symlinks_with_a_readlink_without_f(mac, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "dtr").symlink_to(REPO / "dtr")
    (tmp_path / "b" / "dtr").symlink_to("../a/dtr")
    proc = subprocess.run([BASH, str(tmp_path / "b" / "dtr"), "--version"], env=mac.env(), cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.startswith("dtr "), (proc.stdout, proc.stderr)


def test_doctor_with_macos_tools(mac, tmp_path):
    """The newest pyenv 3.9 and Go's version without sort -V; the engine checked without GNU timeout."""
    for version in ("3.9.2", "3.9.18", "3.9.9"):
        python = tmp_path / "pyenv" / "versions" / version / "bin" / "python3.9"
        python.parent.mkdir(parents=True)
        python.touch()
    proc = mac.run("deploy/doctor.sh", "--find-python3.9", PYENV_ROOT=str(tmp_path / "pyenv"))
    assert proc.stdout.strip() == str(tmp_path / "pyenv" / "versions" / "3.9.18" / "bin" / "python3.9"), proc
    for go, status in (("go1.26.1", "ok"), ("go1.25.9", "MISSING"), ("go1.100.0", "ok")):
        _write(mac.bin / "go", f"#!/bin/sh\necho {go}\n")
        proc = mac.run("deploy/doctor.sh", "cluster-build", "docker-up", PY_OP="python3", PY_TRAINER="")
        lines = {ln.split()[1]: ln for ln in proc.stdout.splitlines()[1:]}
        assert lines["go"].startswith(status), lines["go"]
        assert lines["docker"].startswith("ok ") and "engine client 24.0.7" in lines["docker"], lines["docker"]


def test_base_images_on_macos_pull_or_refuse_in_one_line(mac):
    proc = mac.run("deploy/images/base-images.sh", DOCKER_NO_IMAGES="1")
    assert proc.returncode == 0, proc.stderr
    assert len(mac.calls("docker pull")) == 2
    line = one_error_line(mac.run("deploy/images/base-images.sh", DOCKER_NO_IMAGES="1", DOCKER_PULL_FAILS="1"))
    assert "Linux only" in line and "docker pull python:3.11-slim" in line


def test_k3d_up_and_down_with_macos_tools(mac):
    """make k3d-up's whole flow against fake docker, k3d and kubectl: the cluster, the plan (awk), the images,
    the training-operator, the operator, the example's wait; then make k3d-down --purge."""
    proc = mac.run("deploy/k3d/up.sh", DTR_SKIP_BUILD="1", DTR_TIMEOUT="30")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "ClusterRole/dtr-operator" in proc.stdout and "phase=Succeeded" in proc.stdout
    assert "model (in the pods):  /volume/models/mnist/1" in proc.stdout
    assert "the operator's egress: the API server only (172.18.0.2 port 6443; Service 10.43.0.1:443)" in proc.stdout
    operator, trainer = image_names()
    assert mac.calls(f"k3d image import --cluster dtr {operator} {trainer}")
    proc = mac.run("deploy/k3d/down.sh", "--purge", K3D_CLUSTER_EXISTS="1")
    assert proc.returncode == 0, proc.stderr
    assert mac.calls("k3d cluster delete dtr") and "removed " in proc.stdout


def test_k3d_up_refuses_a_kubernetes_older_than_the_admission_policies_need(mac):
    proc = mac.run("deploy/k3d/up.sh", DTR_SKIP_BUILD="1", DTR_TIMEOUT="30", KUBE_MINOR="29+")
    assert proc.returncode != 0
    assert "the cluster runs Kubernetes 1.29; the install needs 1.30 or newer" in proc.stdout + proc.stderr
    assert not mac.calls("kubectl apply"), "nothing applied"
    assert mac.run("deploy/k3d/up.sh", DTR_SKIP_BUILD="1", DTR_TIMEOUT="30", KUBE_MINOR="30").returncode == 0


def test_install_waits_again_for_a_crd_whose_conditions_are_not_there_yet_and_for_nothing_else(mac):
    """kubectl wait fails at once on a CRD with no status.conditions yet (kubernetes/kubernetes#66439): tried again;
    any other failure of the wait ends the install there."""
    settings = {"DTR_IMPORT": "none", "DTR_SKIP_BUILD": "1", "DTR_OPERATOR_EGRESS": "open"}
    proc = mac.run("deploy/install.sh", CRD_CONDITIONS_LATE="2", **settings)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    waits = mac.calls("kubectl wait --for=condition=Established")
    assert len(waits) == 4 and "accessor error" not in proc.stderr, (waits, proc.stderr)
    assert mac.calls("kubectl -n dtr-system rollout status deployment/dtr-operator")
    mac.calls_file.write_text("")
    Path(f"{mac.calls_file}.waits").unlink()
    proc = mac.run("deploy/install.sh", CRD_WAIT_FAILS="1", **settings)
    assert proc.returncode != 0 and "timed out waiting for the condition" in proc.stderr, (proc.stdout, proc.stderr)
    assert len(mac.calls("kubectl wait")) == 1 and not mac.calls("kubectl -n kubeflow rollout status")


def test_install_of_a_team_operator_acts_in_its_namespace_and_needs_the_crd_there(mac):
    """DTR_DEPLOY=deploy/team (its Deployment in dtr-ml-team, no CRD of its own): refused on a cluster without the CRD,
    before anything is applied; beside it, the rollout and the egress policy are the team namespace's."""
    settings = {"DTR_IMPORT": "none", "DTR_SKIP_BUILD": "1", "TEAM_OVERLAY": "1", "DTR_OPERATOR_EGRESS": "open"}
    line = one_error_line(mac.run("deploy/install.sh", **settings))
    assert "installs an operator beside one that brings the DistTrainingRun CRD" in line, line
    assert "install deploy/namespaced/ first" in line and not mac.calls("kubectl apply")
    proc = mac.run("deploy/install.sh", CRD_EXISTS="1", **settings)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "in namespaces: dtr-ml-team (the operator)" in proc.stdout
    assert mac.calls("kubectl -n dtr-ml-team rollout status deployment/dtr-operator --timeout=180s")
    assert mac.calls("kubectl -n dtr-ml-team delete networkpolicy dtr-operator-egress --ignore-not-found")
    assert not [c for c in mac.calls("kubectl -n dtr-system")], "nothing in dtr-system"


@pytest.mark.skipif(not os.environ.get("DTR_BASH32"), reason="DTR_BASH32 unset: the checks above ran with " + BASH)
def test_dtr_bash32_is_a_bash_3_2():
    """DTR_BASH32 names a bash 3.2, not a newer one by mistake (which would pass everything above)."""
    proc = subprocess.run([BASH, "-c", 'echo "${BASH_VERSINFO[0]}.${BASH_VERSINFO[1]}"'], capture_output=True,
                          text=True, check=True)  # fmt: skip
    assert proc.stdout.strip() == "3.2"
