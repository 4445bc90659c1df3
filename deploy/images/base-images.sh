#!/usr/bin/env bash
# The base images Dockerfile.operator and Dockerfile.trainer start FROM (make base-images):
# python:3.11-slim and python:3.9-slim. For each one that is not present locally:
#   1. docker pull it (the real image; skipped with DTR_PULL=0, bounded by DTR_PULL_TIMEOUT=60 s);
#   2. if that fails (no registry reachable), build a local STAND-IN with the same name from
#      Debian packages: debootstrap --variant=minbase, Debian's python3.X, python3-venv and
#      python-is-python3 (so `python -m venv` works), security updates, then `docker import`.
#      Labelled dev.distml.standin=1. Nothing of this machine goes in: not its CA bundle, not its
#      pip settings (deploy/images/build.sh gives those to the build stages alone).
# A stand-in is a fallback for machines without a registry, to build and test the images
# offline; it is NOT what to ship: push images built on the real python:3.X-slim (push.sh
# refuses images built on a stand-in).
# An image already present (real or stand-in) is kept, but a stand-in an older version of this
# script built (it carried this machine's CAs and /etc/pip.conf; no label CLEAN below) is rebuilt;
# DTR_STANDIN_REBUILD=1 rebuilds stand-ins (e.g. for newer security updates; real images are never replaced). Needs root (debootstrap,
# chroot) only when it builds a stand-in. Notes: docs/images.md.
set -Eeuo pipefail

# shellcheck source=deploy/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

readonly MIRROR="${DTR_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
readonly SECURITY_MIRROR="${DTR_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
readonly WORK="${STATE}/base-images"
readonly LABEL="dev.distml.standin"
readonly CLEAN="dev.distml.standin.host-settings=none"  # built without this machine's CAs and pip settings
readonly STANDIN_PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

rootfs="" # the chroot being built, for the cleanup on exit
log=""    # its log, shown when a step fails

cleanup() {
  if [[ -n "${rootfs}" ]] && mountpoint -q "${rootfs}/proc"; then
    umount "${rootfs}/proc" || true
  fi
}
on_error() {
  local code=$?
  [[ -z "${log}" || ! -s "${log}" ]] || tail -n 25 "${log}" >&2
  printf 'error: a step failed (exit %s)%s\n' "${code}" "${log:+; the lines above are the end of ${log}}" >&2
  log="" # once
}
trap cleanup EXIT
trap on_error ERR

# A command inside the stand-in, its output to the log.
in_root() {
  chroot "${rootfs}" /usr/bin/env -i PATH="${STANDIN_PATH}" LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive \
    "$@" >>"${log}" 2>&1
}

# build_standin IMAGE SUITE PYTHON PACKAGE...
build_standin() {
  local image="$1" suite="$2" python="$3"
  shift 3
  local packages version size t0=${SECONDS} t1 t2 t3
  packages="$(IFS=,; echo "ca-certificates,$*")"

  # debootstrap, chroot, mount and GNU rm below: a stand-in is built on Linux (a Mac pulls the real image).
  local os
  os="$(uname -s)"
  [[ "${os}" == Linux ]] ||
    die "${image} cannot be pulled, and a local stand-in is built on Linux only (debootstrap, chroot): check that this machine reaches its registry (docker pull ${image})"
  ((EUID == 0)) || die "building a stand-in for ${image} needs root (debootstrap, chroot): run 'sudo make base-images'"
  need_packages debootstrap:debootstrap /usr/share/keyrings/debian-archive-keyring.gpg:debian-archive-keyring
  step "${image}: stand-in from Debian ${suite} (${python}; debootstrap --variant=minbase)"
  rootfs="${WORK}/${suite}"
  [[ "${rootfs}" == /?*/"${suite}" ]] || die "refusing to build in '${rootfs}'"
  log="${WORK}/${suite}.log"
  cleanup
  rm -rf --one-file-system "${rootfs}"
  mkdir -p "${rootfs}"
  : >"${log}"
  info "log: ${log}"
  debootstrap --variant=minbase --include="${packages}" "${suite}" "${rootfs}" "${MIRROR}" >>"${log}" 2>&1
  t1=${SECONDS}
  info "debootstrap: $((t1 - t0))s"

  # Slim as Debian's -slim images: what dpkg installs from now on leaves out documentation (but
  # the copyright files), manual pages and translations; what is there already goes below.
  printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
    'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' \
    'path-exclude /usr/share/locale/*' 'path-exclude /usr/share/lintian/*' \
    >"${rootfs}/etc/dpkg/dpkg.cfg.d/dtr-standin-slim"
  # Security and point-release updates, as a real image would have them.
  printf '%s\n' "deb ${MIRROR} ${suite} main" "deb ${MIRROR} ${suite}-updates main" \
    "deb ${SECURITY_MIRROR} ${suite}-security main" >"${rootfs}/etc/apt/sources.list"
  cp /etc/resolv.conf "${rootfs}/etc/resolv.conf"
  mount -t proc proc "${rootfs}/proc"
  in_root apt-get update
  in_root apt-get upgrade -y -o Dpkg::Use-Pty=0
  t2=${SECONDS}
  info "security updates: $((t2 - t1))s"

  # What the Dockerfiles rely on: `python` is this version, with venv (ensurepip) and ssl.
  version="$(chroot "${rootfs}" /usr/bin/python -c 'import ensurepip, ssl, venv, sys; print("%d.%d" % sys.version_info[:2])')"
  [[ "${version}" == "${python#python}" ]] || die "'python' in the ${suite} stand-in is ${version}, not ${python}"

  # Small: no package lists or caches, no logs, no documentation but the copyright files.
  in_root apt-get clean
  cleanup
  rm -rf "${rootfs:?}"/var/lib/apt/lists/* "${rootfs:?}"/var/cache/apt/*.bin "${rootfs:?}"/var/cache/debconf/*-old \
    "${rootfs:?}"/usr/share/man/* "${rootfs:?}"/usr/share/info/* "${rootfs:?}"/usr/share/locale/* \
    "${rootfs:?}"/usr/share/lintian/*
  find "${rootfs}/usr/share/doc" -type f ! -name copyright -delete
  find "${rootfs}/usr/share/doc" -depth -mindepth 1 -type d -empty -delete
  find "${rootfs}/var/log" -type f -delete
  : >"${rootfs}/etc/resolv.conf" # docker mounts its own

  tar -C "${rootfs}" --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -c . |
    docker import \
      --change "ENV PATH=${STANDIN_PATH}" \
      --change 'ENV LANG=C.UTF-8' \
      --change "LABEL ${LABEL}=1 ${CLEAN} ${LABEL}.suite=${suite} org.opencontainers.image.description=\"local stand-in for ${image} (Debian ${suite}, ${python}), built by deploy/images/base-images.sh; not for shipping\"" \
      --change 'CMD ["python3"]' \
      --message "stand-in for ${image} from Debian ${suite} (deploy/images/base-images.sh)" \
      - "${image}" >/dev/null
  t3=${SECONDS}
  rm -rf --one-file-system "${rootfs}"
  rootfs=""
  info "docker import: $((t3 - t2))s"
  size="$(docker image inspect -f '{{.Size}}' "${image}")"
  info "${image} stand-in built in $((t3 - t0))s, $((size / 1000000)) MB"
  log=""
}

# ensure IMAGE SUITE PYTHON PACKAGE...
ensure() {
  local image="$1" standin clean
  if docker image inspect "${image}" >/dev/null 2>&1; then
    standin="$(docker image inspect -f "{{index .Config.Labels \"${LABEL}\"}}" "${image}")"
    clean="$(docker image inspect -f "{{index .Config.Labels \"${CLEAN%=*}\"}}" "${image}")"
    if [[ "${standin}" != 1 ]]; then
      echo "${image}: present (the real image)"
      return 0
    fi
    if [[ "${clean}" != "${CLEAN#*=}" ]]; then
      echo "${image}: a local stand-in that carries this machine's CAs and pip settings (an older script's): rebuilding it"
    elif [[ "${DTR_STANDIN_REBUILD:-0}" != 1 ]]; then
      echo "${image}: present (a local stand-in; DTR_STANDIN_REBUILD=1 rebuilds it)"
      return 0
    fi
  elif [[ "${DTR_PULL:-1}" != 0 ]]; then
    echo "${image}: not present; trying docker pull"
    # shellcheck disable=SC2310 # with_timeout's status is its command's: set -e inside it changes nothing
    if with_timeout "${DTR_PULL_TIMEOUT:-60}" docker pull -q "${image}"; then
      return 0
    fi
    echo "${image}: cannot be pulled"
  fi
  build_standin "$@"
}

# shellcheck disable=SC2310 # with_timeout's status is its command's: set -e inside it changes nothing
with_timeout 20 docker info >/dev/null 2>&1 || die "the Docker engine is not reachable: run 'make docker-up' first"

ensure python:3.11-slim bookworm python3.11 python3.11 python3-venv python-is-python3
ensure python:3.9-slim bullseye python3.9 python3.9 python3-venv python-is-python3
