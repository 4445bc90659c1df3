#!/usr/bin/env bash
# Build both images (OPERATOR_IMAGE and TRAINER_IMAGE, deploy/lib.sh) from the Dockerfiles at the repository
# root (make images): a running engine (docker-up.sh), then the base images they start FROM
# (base-images.sh, only when one is missing), then both builds; prints times and sizes.
# Arguments go to both `docker build`s (make images ARGS=--no-cache). HTTP(S)_PROXY, NO_PROXY
# and ALL_PROXY, when set, reach the RUN steps as build args (Docker's predefined ones).
# Settings (environment):
#   DTR_OPERATOR_BASE, DTR_TRAINER_BASE   the final stage's base (default: the Dockerfile's ARG BASE);
#                    a release gives the real python:3.X-slim by digest (docs/images.md#base-images)
#   DTR_CA_BUNDLE, DTR_PIP_CONF   this machine's CA bundle and pip settings, given to the build stages
#                    only (a layer over the base that the final stage never starts from; docs/images.md)
set -euo pipefail

# shellcheck source=deploy/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

readonly IMAGES=("operator:Dockerfile.operator:${OPERATOR_IMAGE}" "trainer:Dockerfile.trainer:${TRAINER_IMAGE}")

bash "${ROOT}/deploy/images/docker-up.sh"

readonly CA_BUNDLE="${DTR_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
readonly PIP_CONF="${DTR_PIP_CONF:-/etc/pip.conf}"

# base_of WHAT DOCKERFILE: the base its final stage starts FROM: DTR_<WHAT>_BASE, else its `ARG BASE=` default.
base_of() {
  local override
  # tr, not ${1^^}: bash 3.2 (macOS) has no case conversion.
  override="DTR_$(printf '%s' "$1" | tr '[:lower:]' '[:upper:]')_BASE"
  if [[ -n "${!override:-}" ]]; then
    echo "${!override}"
  else
    awk -F= '$1 == "ARG BASE" { print $2; exit }' "$2"
  fi
}

# build_base BASE: BASE with this machine's CA bundle and pip settings, for the build stage alone
# (--build-arg BUILD_BASE): pip gets through a TLS-inspecting proxy or to a private index, and neither
# reaches the final stage, which starts FROM BASE itself. Prints the layer's (local) name.
build_base() {
  local base="$1" name dir
  name="localhost/dtr-build/base:$(printf '%s' "${base}" | sha256_hex | cut -c1-12)"
  dir="$(mktemp -d)"
  if [[ -s "${CA_BUNDLE}" ]]; then cp "${CA_BUNDLE}" "${dir}/ca.pem"; else : >"${dir}/ca.pem"; fi
  if [[ -s "${PIP_CONF}" ]]; then cp "${PIP_CONF}" "${dir}/pip.conf"; else printf '[global]\n' >"${dir}/pip.conf"; fi
  # An empty ca.pem: the base's own bundle (pip's default) stays in force.
  local cert='ENV PIP_CERT=/etc/dtr-build/ca.pem'
  [[ -s "${dir}/ca.pem" ]] || cert=''
  printf '%s\n' "FROM ${base}" 'COPY ca.pem pip.conf /etc/dtr-build/' \
    'ENV PIP_CONFIG_FILE=/etc/dtr-build/pip.conf' "${cert}" \
    'LABEL dev.distml.build-only=1' >"${dir}/Dockerfile"
  docker build -q -t "${name}" "${dir}" >/dev/null
  rm -rf "${dir}"
  echo "${name}"
}

step "base images"
bases="$(for entry in "${IMAGES[@]}"; do IFS=: read -r what dockerfile _ <<<"${entry}"; base_of "${what}" "${ROOT}/${dockerfile}"; done | sort -u)"
missing=()
while read -r base; do
  # "1 none": a stand-in without this machine's settings; "1 " (older base-images.sh): one with them
  labels="$(docker image inspect -f '{{index .Config.Labels "dev.distml.standin"}} {{index .Config.Labels "dev.distml.standin.host-settings"}}' "${base}" 2>/dev/null)" || labels=missing
  if [[ "${labels}" == missing ]]; then
    missing+=("${base}")
  elif [[ "${labels}" == "1 " ]]; then
    missing+=("${base} (a stand-in an older base-images.sh built with this machine's CAs and pip settings)")
  else
    echo "${base}: present"
  fi
done <<<"${bases}"
if ((${#missing[@]} > 0)); then
  echo "to build: ${missing[*]}"
  bash "${ROOT}/deploy/images/base-images.sh"
fi

build_args=()
for var in HTTP_PROXY HTTPS_PROXY NO_PROXY ALL_PROXY http_proxy https_proxy no_proxy all_proxy; do
  [[ -z "${!var:-}" ]] || build_args+=(--build-arg "${var}")
done

# remove_replaced OLD_ID NAME: the image NAME pointed to before this build, once nothing names it any more
# (a rebuilt trainer leaves ~2 GB behind otherwise; ten rebuilds filled a test machine's disk).
remove_replaced() {
  local old="$1" name="$2" now tags
  [[ -n "${old}" ]] || return 0
  now="$(docker image inspect -f '{{.Id}}' "${name}")"
  [[ "${old}" != "${now}" ]] || return 0
  tags="$(docker image inspect -f '{{len .RepoTags}}' "${old}" 2>/dev/null || echo 1)"
  if [[ "${tags}" == 0 ]] && docker image rm "${old}" >/dev/null 2>&1; then
    info "removed the image it replaced (${old:7:12})"
  fi
}

summary=()
for entry in "${IMAGES[@]}"; do
  IFS=: read -r what dockerfile name tag <<<"${entry}"
  step "${name}:${tag} (${dockerfile})"
  start=${SECONDS}
  previous="$(docker image inspect -f '{{.Id}}' "${name}:${tag}" 2>/dev/null || true)"
  base="$(base_of "${what}" "${ROOT}/${dockerfile}")"
  stage_args=(--build-arg "BASE=${base}" --build-arg "BUILD_BASE=$(build_base "${base}")")
  # ${a[@]+"${a[@]}"}: an empty array is "unbound" to bash < 4.4's set -u (macOS has 3.2).
  docker build ${build_args[@]+"${build_args[@]}"} "${stage_args[@]}" "$@" -f "${ROOT}/${dockerfile}" -t "${name}:${tag}" "${ROOT}"
  remove_replaced "${previous}" "${name}:${tag}"
  size="$(docker image inspect -f '{{.Size}}' "${name}:${tag}")"
  summary+=("$(printf '%-24s %5d MB  built in %ds' "${name}:${tag}" "$((size / 1000000))" "$((SECONDS - start))")")
  echo "${what} image built in $((SECONDS - start))s"
done

step "done"
printf '%s\n' "${summary[@]}"
base_note=""
for base in ${bases}; do
  label="$(docker image inspect -f '{{index .Config.Labels "dev.distml.standin"}}' "${base}" 2>/dev/null || true)"
  [[ "${label}" != 1 ]] || base_note+=" ${base}"
done
[[ -z "${base_note}" ]] ||
  echo "note: built on local stand-in base images (${base_note# }); fine for local tests, not for shipping (docs/images.md)"
