# Shared by the scripts under deploy/ (sourced, not run): paths, messages, and installing
# the few Debian packages the image scripts need on a fresh CI machine.
# shellcheck shell=bash

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${DTR_STATE:-${ROOT}/.dtr}"
readonly ROOT STATE
# The two images every script builds, imports or pushes: the one home of their names (deploy/base/deployment.yaml
# and the operator's default trainer image name them too: tests/unit/deploy/test_image_names.py keeps them equal).
# Fully qualified on a registry host nothing serves, so a node never pulls them from a stranger (docs/images.md#names).
# shellcheck disable=SC2034 # used by the scripts that source this file
readonly OPERATOR_IMAGE="localhost/distml/operator:0.1.0" TRAINER_IMAGE="localhost/distml/trainer:0.1.0"

step() { printf '\n==> %s\n' "$*"; }
info() { printf '    %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Portable stand-ins for GNU-only tools and flags: these scripts run on a laptop's macOS too, with its
# bash 3.2 and BSD tools (docs/k3d.md#which-machines; tests/unit/deploy/test_laptop_scripts.py keeps them so).

# with_timeout SECONDS COMMAND...: COMMAND, stopped after SECONDS. timeout(1) is GNU coreutils, absent
# on macOS; there perl's alarm does it (it survives exec, and perl ships with macOS). Neither: unbounded.
with_timeout() {
  local seconds="$1"
  shift
  if command -v timeout >/dev/null 2>&1; then
    timeout "${seconds}" "$@"
  elif command -v perl >/dev/null 2>&1; then
    perl -e 'alarm shift @ARGV; exec { $ARGV[0] } @ARGV or die "$ARGV[0]: $!\n"' "${seconds}" "$@"
  else
    "$@"
  fi
}

# sha256_hex: the SHA-256 of standard input, in hex. sha256sum is GNU coreutils; macOS has shasum.
sha256_hex() {
  local sum
  if command -v sha256sum >/dev/null 2>&1; then sum="$(sha256sum)"; else sum="$(shasum -a 256)"; fi
  printf '%s\n' "${sum%% *}"
}

# relative_path DIR TARGET: the existing directory TARGET relative to the existing directory DIR
# (kustomize refuses absolute paths). realpath --relative-to is GNU; macOS's realpath takes no options.
relative_path() {
  local from to up=""
  from="$(cd "$1" && pwd -P)" || return 1
  to="$(cd "$2" && pwd -P)" || return 1
  # Up from DIR to the deepest directory that holds TARGET, then down to TARGET.
  while [[ "${to}/" != "${from%/}/"* ]]; do
    from="$(dirname "${from}")"
    up+="../"
  done
  local down="${to#"${from%/}"}"
  down="${down#/}"
  up+="${down}"
  up="${up%/}"
  printf '%s\n' "${up:-.}"
}

# version_at_least VERSION MINIMUM: whether VERSION (numbers and dots: 1.26.1, 3.9.18) is MINIMUM or newer.
# sort -V is GNU's, and BSD sort has it only on newer systems; a suffix (1.26rc1) counts as its number.
version_at_least() {
  local version="$1" minimum="$2" have want
  while [[ -n "${version}${minimum}" ]]; do
    have="${version%%.*}" want="${minimum%%.*}"
    have="${have%%[!0-9]*}" want="${want%%[!0-9]*}"
    if ((10#${have:-0} != 10#${want:-0})); then
      ((10#${have:-0} > 10#${want:-0}))
      return
    fi
    [[ "${version}" == *.* ]] && version="${version#*.}" || version=""
    [[ "${minimum}" == *.* ]] && minimum="${minimum#*.}" || minimum=""
  done
}

# The oldest Kubernetes the install works on (one home: deploy/install.sh refuses an older cluster, make doctor says
# so): its admission policies are ValidatingAdmissionPolicies, GA in 1.30 (deploy/base/admission.yaml,
# operator-admission.yaml).
# shellcheck disable=SC2034 # used by the scripts that source this file
readonly MIN_KUBERNETES_MINOR=30

# server_minor: the Kubernetes minor version of the cluster kubectl reaches now (30 for 1.30, a provider's "30+"
# too), empty when no cluster answers within 5 s.
server_minor() {
  local json
  json="$(kubectl --request-timeout=5s version -o json 2>/dev/null || true)"
  awk -F'"' '/"serverVersion"/ { s = 1 } s && $2 == "minor" { gsub(/[^0-9]/, "", $4); print $4; exit }' <<<"${json}"
}

# kubernetes_too_old MINOR: what is wrong with a cluster of Kubernetes 1.MINOR, in one line; nothing (status 1)
# when it is new enough or MINOR is empty (unknown).
kubernetes_too_old() {
  [[ -n "$1" ]] && (($1 < MIN_KUBERNETES_MINOR)) || return 1
  printf 'the cluster runs Kubernetes 1.%s; the install needs 1.%s or newer (its admission policies are ValidatingAdmissionPolicies, GA in 1.30: deploy/base/admission.yaml, operator-admission.yaml)\n' \
    "$1" "${MIN_KUBERNETES_MINOR}"
}

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
  local pair need needs=() missing=()
  for pair in "$@"; do
    need="${pair%%:*}"
    if [[ "${need}" == /* ]]; then
      [[ -e "${need}" ]] && continue
    else
      command -v "${need}" >/dev/null 2>&1 && continue
    fi
    needs+=("${need}")
    missing+=("${pair#*:}")
  done
  ((${#missing[@]} == 0)) && return 0
  # No apt-get (macOS, another distribution): Debian's package names are only a hint.
  command -v apt-get >/dev/null 2>&1 ||
    die "${needs[*]} not found (Debian's package: ${missing[*]}); install it for this system (see docs/k3d.md, 'Which machines')"
  ((MAY_INSTALL)) ||
    die "missing ${missing[*]}: run 'apt-get install -y ${missing[*]}' as root (or re-run as root with CI=true or DTR_INSTALL=1 to let this script do it)"
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

# ---- kustomizations: what one brings (install.sh, uninstall.sh)

# Cluster-scoped kinds: what a kustomization creates outside any namespace, and needs cluster-admin for.
readonly CLUSTER_KINDS="CustomResourceDefinition|ClusterRole|ClusterRoleBinding|Namespace|ValidatingWebhookConfiguration|MutatingWebhookConfiguration|ValidatingAdmissionPolicy|ValidatingAdmissionPolicyBinding|PriorityClass|StorageClass|APIService"

# The cluster-scoped objects of a kustomization, as Kind/name, one per line.
# shellcheck disable=SC2312 # the scripts that source this set pipefail: a failed render fails the pipe
cluster_objects() {
  kubectl kustomize "$1" | awk -v kinds="^(${CLUSTER_KINDS})$" '
    /^---/ { if (kind ~ kinds && name != "") print kind "/" name; kind = ""; name = ""; meta = 0; next }
    /^kind: / { kind = $2 }
    /^metadata:/ { meta = 1; next }
    /^[^ ]/ { meta = 0 }
    meta && /^  name: / && name == "" { name = $2 }
    END { if (kind ~ kinds && name != "") print kind "/" name }'
}

# The namespace the kustomization puts the operator's Deployment in: dtr-system, a team's own with deploy/team/.
# shellcheck disable=SC2312 # the scripts that source this set pipefail: a failed render fails the pipe
operator_namespace() {
  local ns
  ns="$(kubectl kustomize "$1" | awk '
    /^---/ { kind = ""; meta = 0; next }
    /^kind: / { kind = $2 }
    /^metadata:/ { meta = 1; next }
    /^[^ ]/ { meta = 0 }
    kind == "Deployment" && meta && /^  namespace: / { print $2; exit }')"
  printf '%s' "${ns:-dtr-system}"
}

# Whether the kustomization brings the DistTrainingRun CRD (deploy/team/ does not: it goes beside an install that does).
# shellcheck disable=SC2312 # the scripts that source this set pipefail: a failed render fails the pipe
brings_crd() {
  cluster_objects "$1" | grep -qx 'CustomResourceDefinition/disttrainingruns.distml.dev'
}
