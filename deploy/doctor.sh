#!/usr/bin/env bash
# What this machine has and lacks for each make target (make doctor): one line per tool or condition,
#   ok        present (what was found)
#   installs  absent, and the script named installs it itself when it runs as root (build_node.sh always;
#             docker-up.sh and base-images.sh when CI=true or DTR_INSTALL=1, see deploy/lib.sh)
#   MISSING   absent: the targets that need it, and how to get it
#   warn      absent or short, but make run and make test do not always need it
# then whether `make run` and `make test` can run on this machine.
# Usage: doctor.sh [-q] [TARGET...]
#   no TARGET  every check; exits 1 unless `make run` can run (what `make test` lacks is listed, not fatal:
#              a user's first job needs only `make run`)
#   TARGET...  only the checks those make targets need; exits 1 when one is MISSING
#              (`make setup` runs `doctor.sh -q setup` before it builds anything)
#   -q         print only what is MISSING
#   --find-python3.9  print the trainer's Python as the Makefile's PY_TRAINER looks for it
#              (python3.9 on PATH, else the newest of pyenv's 3.9 versions), or nothing
# PY_OP and PY_TRAINER, when set (the Makefile passes both), are the Pythons checked; an empty
# PY_TRAINER means that the lookup above found none.
set -euo pipefail

# shellcheck source=deploy/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=deploy/podsecurity.sh
source "$(dirname "${BASH_SOURCE[0]}")/podsecurity.sh"

# python3.9 on PATH, else pyenv's 3.9 (pyenv's shim exists but refuses when 3.9 is not its global version).
find_python39() {
  local found candidate version newest="" newest_version=0
  if found="$(python3.9 -c 'import sys; print(sys.executable)' 2>/dev/null)" && [[ -n "${found}" ]]; then
    echo "${found}"
    return 0
  fi
  for candidate in "${PYENV_ROOT:-${HOME:-/nonexistent}/.pyenv}"/versions/3.9*/bin/python3.9; do
    [[ -e "${candidate}" ]] || continue  # the pattern itself, when nothing matches
    version="${candidate%/bin/python3.9}"
    version="${version##*/}"
    # shellcheck disable=SC2310 # a test: set -e inside it changes nothing
    if version_at_least "${version}" "${newest_version}"; then
      newest="${candidate}" newest_version="${version}"
    fi
  done
  [[ -z "${newest}" ]] || echo "${newest}"
}

QUIET=0
WANT=()
for arg in "$@"; do
  case "${arg}" in
    --find-python3.9)
      find_python39
      exit 0
      ;;
    -q) QUIET=1 ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    -*) die "doctor.sh: unknown option ${arg} (see --help)" ;;
    *) WANT+=("${arg}") ;;
  esac
done

# shellcheck source=devcluster/versions.env disable=SC1091
source "${ROOT}/devcluster/versions.env"
: "${K8S_VERSION:?}"
# The go directive of the go.mod files devcluster/build.sh and build_node.sh write.
readonly GO_MIN=1.26
PY_OP="${PY_OP:-python3.11}"
if [[ -z "${PY_TRAINER+set}" ]]; then
  PY_TRAINER="$(find_python39)"
fi

# Which make targets need each thing ("all": every target that runs Python). `run` and `test`
# decide the exit status of a full check; the rest say who else needs it.
readonly T_ALL="all"
readonly T_TRAINER="setup setup-trainer run test test-trainer test-e2e test-node test-reliability dev-cluster bench-trainer bench-progress"
readonly T_CONTROL_PLANE="test test-integration test-node test-reliability dev-cluster bench-operator bench-progress"
readonly T_GO="cluster-build node-build ${T_CONTROL_PLANE}"
readonly T_NODE="node-build test test-node test-reliability dev-cluster bench-progress"
readonly T_DOCKER="docker-up base-images images test test-images test-node test-reliability dev-cluster bench-progress k3d-up"
readonly T_ROOT="test test-node test-reliability dev-cluster bench-progress"
readonly T_CGROUP="test test-images test-node test-reliability dev-cluster bench-progress"

# in_list WORD LIST: FOUND=1 when LIST (space-separated) holds WORD or is "all", else FOUND=0.
in_list() {
  FOUND=0
  if [[ " $2 " == *" $1 "* || "$2" == "${T_ALL}" ]]; then FOUND=1; fi
}

# applies TARGETS: APPLIES=1 when a check for TARGETS concerns this invocation (every check when
# no target was named), else APPLIES=0.
applies() {
  local want
  APPLIES=1
  ((${#WANT[@]} == 0)) && return 0
  for want in "${WANT[@]}"; do
    in_list "${want}" "$1"
    ((FOUND)) && return 0
  done
  APPLIES=0
}

missing=()
missing_run=()
missing_test=()
# report STATUS NAME DETAIL TARGETS [HOW]: one line, and the tally for the exit status.
report() {
  local status="$1" name="$2" detail="$3" targets="$4" how="${5:-}" line for
  applies "${targets}"
  ((APPLIES)) || return 0
  if [[ "${status}" == MISSING ]]; then
    missing+=("${name}")
    in_list run "${targets}"
    ((FOUND)) && missing_run+=("${name}")
    in_list test "${targets}"
    ((FOUND)) && missing_test+=("${name}")
  elif ((QUIET)); then
    return 0
  fi
  for="${targets}"
  [[ "${for}" == "${T_ALL}" ]] && for="every target"
  line="$(printf '%-8s %-16s %s; for: %s' "${status}" "${name}" "${detail}" "${for}")"
  if [[ "${status}" != ok && -n "${how}" ]]; then
    line+="; get it: ${how}"
  fi
  printf '%s\n' "${line}"
}

# check_python NAME PY WANT_VERSION TARGETS HOW: PY exists, is WANT_VERSION and can make a venv.
check_python() {
  local name="$1" py="$2" want="$3" targets="$4" how="$5" out version
  if [[ -z "${py}" ]]; then
    report MISSING "${name}" "not found (python3.9 on PATH, or ${PYENV_ROOT:-~/.pyenv}/versions/3.9*)" "${targets}" "${how}"
    return 0
  fi
  if ! command -v "${py}" >/dev/null 2>&1; then
    report MISSING "${name}" "${py} not found" "${targets}" "${how}"
    return 0
  fi
  if ! out="$("${py}" -c 'import sys, venv, ensurepip; print("%d.%d.%d" % sys.version_info[:3], sys.executable)' 2>&1)"; then
    if "${py}" -c 'import sys' >/dev/null 2>&1; then
      report MISSING "${name}" "${py} has no venv/ensurepip module" "${targets}" \
        "apt-get install ${name}-venv (Debian, Ubuntu), or a Python built by pyenv"
    else
      report MISSING "${name}" "${py} does not run: ${out%%$'\n'*}" "${targets}" "${how}"
    fi
    return 0
  fi
  version="${out%% *}"
  if [[ "${version}" != "${want}".* ]]; then
    report MISSING "${name}" "${py} is Python ${version}, not ${want}" "${targets}" "${how}"
    return 0
  fi
  report ok "${name}" "${version} ${out#* }" "${targets}"
}

# check_command NAME TARGETS HOW [VERSION-COMMAND...]: on PATH; the first line of VERSION-COMMAND as detail.
check_command() {
  local name="$1" targets="$2" how="$3" path version=""
  shift 3
  if ! path="$(command -v "${name}")"; then
    report MISSING "${name}" "not on PATH" "${targets}" "${how}"
    return 0
  fi
  if (($# > 0)); then
    version="$("$@" 2>&1 | head -n1 || true)"
  fi
  report ok "${name}" "${version:+${version} }${path}" "${targets}"
}

# check_package PACKAGE TARGETS INSTALLER: a Debian package the named script installs as root.
check_package() {
  local pkg="$1" targets="$2" installer="$3" status
  if ! command -v dpkg-query >/dev/null 2>&1; then
    report warn "${pkg}" "no dpkg-query here, not checked" "${targets}" "your distribution's equivalent of Debian's ${pkg}"
    return 0
  fi
  status="$(dpkg-query -W -f='${Status} ${Version}' "${pkg}" 2>/dev/null || true)"
  if [[ "${status}" == *" ok installed "* ]]; then
    report ok "${pkg}" "${status##* }" "${targets}"
  elif ((EUID == 0)); then
    report installs "${pkg}" "not installed; ${installer} installs it (root)" "${targets}"
  else
    report MISSING "${pkg}" "not installed" "${targets}" "apt-get install ${pkg} (as root; ${installer} does it when run as root)"
  fi
}

check_go() {
  local targets="${T_GO}" how="Go ${GO_MIN} or newer from https://go.dev/dl/ (Debian 12's golang-go is 1.19): tar -C /usr/local -xzf go1.26.*.linux-amd64.tar.gz, PATH=\$PATH:/usr/local/go/bin"
  local path version
  if ! path="$(command -v go)"; then
    report MISSING go "not on PATH" "${targets}" "${how}"
    return 0
  fi
  version="$(go env GOVERSION 2>/dev/null || true)"
  version="${version#go}"
  # shellcheck disable=SC2310 # a test: set -e inside it changes nothing
  if [[ -z "${version}" ]] || ! version_at_least "${version}" "${GO_MIN}"; then
    report MISSING go "${path} is go${version:-?}, older than ${GO_MIN}" "${targets}" "${how}"
    return 0
  fi
  report ok go "go${version} ${path}" "${targets}"
}

check_docker() {
  local targets="${T_DOCKER}" engine
  if ! command -v docker >/dev/null 2>&1; then
    if ((MAY_INSTALL)); then
      report installs docker "not on PATH; make docker-up installs docker.io (root, CI=true or DTR_INSTALL=1)" "${targets}"
    else
      report MISSING docker "not on PATH" "${targets}" \
        "apt-get install docker.io (or as root: DTR_INSTALL=1 make ..., and make docker-up installs it)"
    fi
    return 0
  fi
  # shellcheck disable=SC2310 # with_timeout's status is its command's: set -e inside it changes nothing
  if engine="$(with_timeout 10 docker version --format '{{.Server.Version}}' 2>/dev/null)"; then
    report ok docker "engine ${engine} answers" "${targets}"
  elif ((EUID == 0)); then
    if command -v dockerd >/dev/null 2>&1 || ((MAY_INSTALL)); then
      report ok docker "client only, engine not running; make docker-up starts dockerd (root)" "${targets}"
    else
      report MISSING docker "client only, no dockerd" "${targets}" \
        "apt-get install docker.io (or DTR_INSTALL=1: make docker-up installs it)"
    fi
  else
    report MISSING docker "the engine does not answer 'docker version'" "${targets}" \
      "start it (sudo systemctl start docker, or sudo make docker-up) and join the docker group, or run as root"
  fi
}

check_debootstrap() {
  local targets="base-images" note="only when python:3.X-slim cannot be pulled (offline stand-ins, root)"
  local path
  if path="$(command -v debootstrap)"; then
    report ok debootstrap "${path}" "${targets}"
  elif ((MAY_INSTALL)); then
    report installs debootstrap "not on PATH; base-images.sh installs it ${note}" "${targets}"
  else
    report warn debootstrap "not on PATH; needed ${note}" "${targets}" "apt-get install debootstrap debian-archive-keyring"
  fi
}

check_registry() {
  local targets="test-images test" path
  if path="$(command -v docker-registry)"; then
    report ok docker-registry "${path}" "${targets}"
  elif ((MAY_INSTALL)); then
    report installs docker-registry "not on PATH; tests/images/test_push.py installs it (a local registry to push to)" "${targets}"
  else
    report MISSING docker-registry "not on PATH (tests/images/test_push.py pushes to a local registry)" "${targets}" \
      "apt-get install docker-registry (or as root: DTR_INSTALL=1 make test-images installs it)"
  fi
}

check_root() {
  if ((EUID == 0)); then
    report ok root "running as root" "${T_ROOT}"
  else
    report MISSING root "running as uid ${EUID}" "${T_ROOT}" \
      "run those targets as root (sudo make test); the node needs containerd, a bridge and iptables"
  fi
}

check_cgroup() {
  # cgroup.controllers is at the root of a cgroup v2 hierarchy only (not stat -f: its flags differ on BSD).
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    report ok cgroup "v2 at /sys/fs/cgroup" "${T_CGROUP}"
  elif [[ -d /sys/fs/cgroup/memory && -d /sys/fs/cgroup/cpu ]]; then
    report ok cgroup "v1 at /sys/fs/cgroup (kubelet is configured to accept it)" "${T_CGROUP}"
  else
    report MISSING cgroup "no cgroup v2 or v1 memory/cpu controllers at /sys/fs/cgroup" "${T_CGROUP}" \
      "a Linux host or VM (not a plain container) with cgroups mounted at /sys/fs/cgroup"
  fi
}

# Free space where the cold builds land. Figures from a full run: the venvs ~2.3 GB (repo), the Go
# module and build caches ~8 GB and ~/.cache/dtr ~0.7 GB (home), the images ~2-4 GB (Docker's root).
check_disk() {
  local dir="$1" need_gb="$2" what="$3" targets="$4" avail_kb gb
  while [[ ! -e "${dir}" && "${dir}" != / ]]; do dir="$(dirname "${dir}")"; done
  avail_kb="$(df -Pk "${dir}" 2>/dev/null | awk 'NR == 2 { print $4 }' || true)"
  [[ -n "${avail_kb}" ]] || return 0
  gb=$((avail_kb / 1024 / 1024))
  if ((gb >= need_gb)); then
    report ok "disk ${what}" "${gb} GB free at ${dir}" "${targets}"
  else
    report warn "disk ${what}" "${gb} GB free at ${dir}; a cold build needs ~${need_gb} GB there (less when cached)" \
      "${targets}" "free some space (docker image prune, rm -rf ~/.cache/go-build)"
  fi
}

# The platform: local training (TensorFlow 2.11 outside a container: make setup-trainer, make run, dtr run, the
# client's local backend) is built and run on Linux x86_64 only (docs/images.md#platforms). Elsewhere the client,
# dtr submit and the k3d path still work, and the verdict says so instead of "make run: ready".
OS="$(uname -s 2>/dev/null || echo unknown)"
MACHINE="$(uname -m 2>/dev/null || echo unknown)"
readonly OS MACHINE
readonly ELSEWHERE="what works here: the client (make setup-op, ./dtr), dtr submit to a cluster, the k3d path (make k3d-up, docs/k3d.md)"
LOCAL_TRAINING=yes
check_platform() {
  case "${OS} ${MACHINE}" in
    "Linux x86_64") report ok platform "Linux x86_64 (local training is built and tested here)" "${T_TRAINER}" ;;
    "Linux aarch64" | "Linux arm64")
      LOCAL_TRAINING=untested
      report warn platform "Linux ${MACHINE}: TensorFlow 2.11 is locked for it (trainer/locks/linux-aarch64.lock) but never installed or run on it" \
        "${T_TRAINER}" "Linux x86_64 for local training as tested; ${ELSEWHERE} (docs/images.md#platforms)" ;;
    *)
      LOCAL_TRAINING=no
      report MISSING platform "${OS} ${MACHINE}: local training (TensorFlow 2.11: make run, dtr run, the client's local backend) needs Linux x86_64 (TensorFlow 2.11.0 has no macOS arm64 wheel; native macOS is not supported)" \
        "${T_TRAINER}" "Linux x86_64 for local training; ${ELSEWHERE} (docs/images.md#platforms)" ;;
  esac
}

# check_kubernetes: the version of the cluster kubectl reaches now, if any, against the install's floor
# (MIN_KUBERNETES_MINOR, deploy/lib.sh; deploy/install.sh refuses an older one). Nothing when no cluster answers.
check_kubernetes() {
  local minor context too_old
  command -v kubectl >/dev/null 2>&1 || return 0
  minor="$(server_minor)"
  [[ -n "${minor}" ]] || return 0
  context="$(kubectl config current-context 2>/dev/null || echo "the current context")"
  # shellcheck disable=SC2310 # a test: set -e inside it changes nothing
  if too_old="$(kubernetes_too_old "${minor}")"; then
    report MISSING kubernetes "${context}: ${too_old}" "k3d-up install.sh" \
      "a cluster of Kubernetes 1.${MIN_KUBERNETES_MINOR} or newer (docs/clusters.md#prerequisites)"
  else
    report ok kubernetes "${context} runs Kubernetes 1.${minor} (the install needs 1.${MIN_KUBERNETES_MINOR} or newer)" "k3d-up install.sh"
  fi
}

PY311_HOW="Debian 12: apt-get install python3.11 python3.11-venv; elsewhere pyenv install 3.11 (https://github.com/pyenv/pyenv); or make PY_OP=/path/to/python3.11"
PY39_HOW="not packaged in Debian 12: pyenv install 3.9 (https://github.com/pyenv/pyenv#installation; the Makefile finds ~/.pyenv/versions/3.9*), or on Ubuntu the deadsnakes PPA: apt-get install python3.9 python3.9-venv; or make PY_TRAINER=/path/to/python3.9"
KUBECTL_HOW="https://dl.k8s.io/release/${K8S_VERSION}/bin/linux/amd64/kubectl into /usr/local/bin (https://kubernetes.io/docs/tasks/tools/)"

((QUIET)) || printf '%-8s %-16s %s\n' status what details
check_platform
check_python python3.11 "${PY_OP}" 3.11 "${T_ALL}" "${PY311_HOW}"
check_python python3.9 "${PY_TRAINER}" 3.9 "${T_TRAINER}" "${PY39_HOW}"
check_command make "${T_ALL}" "apt-get install make" make --version
check_go
check_command kubectl "${T_CONTROL_PLANE} k3d-up" "${KUBECTL_HOW}" kubectl version --client
check_command openssl "${T_CONTROL_PLANE}" "apt-get install openssl" openssl version
for pkg in gcc libc6-dev libseccomp-dev pkgconf busybox-static containernetworking-plugins iptables iproute2 nftables patch; do
  check_package "${pkg}" "${T_NODE}" "make node-build (devcluster/build_node.sh)"
done
check_docker
check_debootstrap
check_registry
check_root
check_cgroup
applies "test-reliability k3d-up k3d-down"
if ((APPLIES)); then
  if path="$(command -v git)"; then
    report ok git "${path}" "test-reliability k3d-up"
  else
    report warn git "not on PATH; k3d-up then cannot fetch the training-operator's overlay from GitHub (DTR_TRAINING_OPERATOR_KUSTOMIZE may name a local copy), and docs/reliability.md names no commit" "test-reliability k3d-up" "apt-get install git"
  fi
  if path="$(command -v k3d)"; then
    report ok k3d "${path}" "k3d-up k3d-down"
  else
    report warn k3d "not on PATH" "k3d-up k3d-down" "https://k3d.io (docs/k3d.md)"
  fi
fi
# check_pod_security: the cluster kubectl reaches now, if any: its namespaces that enforce no Pod Security level that
# keeps host-network pods out (a warning: what isolates a run there is weaker). Nothing when no cluster answers.
check_pod_security() {
  local weak context
  command -v kubectl >/dev/null 2>&1 || return 0
  kubectl --request-timeout=5s get namespaces -o name >/dev/null 2>&1 || return 0
  context="$(kubectl config current-context 2>/dev/null || echo "the cluster")"
  # shellcheck disable=SC2310 # a list that cannot be read says nothing: set -e inside it changes nothing
  weak="$(weak_namespaces)" || return 0
  if [[ -n "${weak}" ]]; then
    report warn pod-security "namespaces of ${context} enforcing neither baseline nor restricted: ${weak}; a host-network pod there reaches any run's workers" "dev-cluster k3d-up" "kubectl label namespace NAME ${PSA_ENFORCE_LABEL}=restricted (docs/operator.md#pod-security-a-precondition)"
  else
    report ok pod-security "every namespace of ${context} enforces baseline or restricted" "dev-cluster k3d-up"
  fi
}

check_pod_security
check_kubernetes
check_disk "${ROOT}/.venv" 3 "(venvs)" "setup run test"
check_disk "${DTR_CACHE:-${HOME:-/tmp}/.cache/dtr}" 10 "(Go, builds)" "${T_GO}"

if ((${#WANT[@]} > 0)); then
  ((${#missing[@]} == 0)) || exit 1
  exit 0
fi
echo
if [[ "${LOCAL_TRAINING}" == no ]]; then
  echo "make run:  not on ${OS} ${MACHINE} (local training needs Linux x86_64); ${ELSEWHERE}"
elif ((${#missing_run[@]} > 0)); then
  echo "make run:  missing ${missing_run[*]}"
elif [[ "${LOCAL_TRAINING}" == untested ]]; then
  echo "make run:  ready, but untested on Linux ${MACHINE} (TensorFlow 2.11 never ran on it here); ${ELSEWHERE}"
else
  echo "make run:  ready"
fi
if ((${#missing_test[@]} == 0)); then
  echo "make test: ready"
else
  echo "make test: missing ${missing_test[*]} (the tests need it; make run does not)"
fi
((${#missing_run[@]} == 0))
