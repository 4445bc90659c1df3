# Shared by the scripts under deploy/ (sourced, not run): paths, messages, and installing
# the few Debian packages the image scripts need on a fresh CI machine.
# shellcheck shell=bash

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${DTR_STATE:-${ROOT}/.dtr}"
readonly ROOT STATE
# The two images every script builds, imports or pushes: the one home of their names (deploy/base/deployment.yaml
# and the operator's default trainer image name them too: tests/unit/test_image_names.py keeps them equal).
# Fully qualified on a registry host nothing serves, so a node never pulls them from a stranger (docs/images.md#names).
# shellcheck disable=SC2034 # used by the scripts that source this file
readonly OPERATOR_IMAGE="localhost/distml/operator:0.1.0" TRAINER_IMAGE="localhost/distml/trainer:0.1.0"

step() { printf '\n==> %s\n' "$*"; }
info() { printf '    %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Whether these scripts may install system packages themselves: as root, and either in CI
# (CI=true, as GitHub Actions and most CI systems set it) or when asked (DTR_INSTALL=1).
MAY_INSTALL=0
if ((EUID == 0)) && [[ "${CI:-}" == true || "${DTR_INSTALL:-}" == 1 ]]; then
  MAY_INSTALL=1
fi
readonly MAY_INSTALL

# need_packages NEED:PACKAGE...  Install (apt-get) each PACKAGE whose NEED is missing (a command
# name, or an absolute path), when MAY_INSTALL; otherwise fail with one line naming what to install.
# `apt-get update` runs at most once an hour across the scripts (a stamp in STATE).
need_packages() {
  local pair need missing=()
  for pair in "$@"; do
    need="${pair%%:*}"
    if [[ "${need}" == /* ]]; then
      [[ -e "${need}" ]] || missing+=("${pair#*:}")
    else
      command -v "${need}" >/dev/null 2>&1 || missing+=("${pair#*:}")
    fi
  done
  ((${#missing[@]} == 0)) && return 0
  ((MAY_INSTALL)) ||
    die "missing ${missing[*]}: run 'apt-get install -y ${missing[*]}' as root (or re-run as root with CI=true or DTR_INSTALL=1 to let this script do it)"
  command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and no apt-get here: install them with your package manager"
  local stamp="${STATE}/apt-updated"
  mkdir -p "${STATE}"
  if [[ -z "$(find "${stamp}" -mmin -60 2>/dev/null || true)" ]]; then
    step "apt-get update (to install ${missing[*]})"
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    touch "${stamp}"
  fi
  step "apt-get install ${missing[*]}"
  local started=${SECONDS}
  # The lock timeout: make test builds the images while the node build may install its packages.
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}"
  info "${missing[*]} installed in $((SECONDS - started)) s"
}

