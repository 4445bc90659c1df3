#!/usr/bin/env bash
# Build both images (OPERATOR_IMAGE and TRAINER_IMAGE, deploy/lib.sh) from the Dockerfiles at the repository
# root (make images): a running engine (docker-up.sh), then the base images they start FROM
# (base-images.sh, only when one is missing), then both builds; prints times and sizes.
# Arguments go to both `docker build`s (make images ARGS=--no-cache). HTTP(S)_PROXY, NO_PROXY
# and ALL_PROXY, when set, reach the RUN steps as build args (Docker's predefined ones).
set -euo pipefail

# shellcheck source=deploy/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

readonly IMAGES=("operator:Dockerfile.operator:${OPERATOR_IMAGE}" "trainer:Dockerfile.trainer:${TRAINER_IMAGE}")

bash "${ROOT}/deploy/images/docker-up.sh"

step "base images"
# The FROM images of both Dockerfiles (the build stages' names are no images).
bases="$(awk 'toupper($1) == "FROM" { print $2 }' "${ROOT}"/Dockerfile.* | sort -u)"
missing=()
while read -r base; do
  if docker image inspect "${base}" >/dev/null 2>&1; then
    echo "${base}: present"
  else
    missing+=("${base}")
  fi
done <<<"${bases}"
if ((${#missing[@]} > 0)); then
  echo "missing: ${missing[*]}"
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
  docker build "${build_args[@]}" "$@" -f "${ROOT}/${dockerfile}" -t "${name}:${tag}" "${ROOT}"
  remove_replaced "${previous}" "${name}:${tag}"
  size="$(docker image inspect -f '{{.Size}}' "${name}:${tag}")"
  summary+=("$(printf '%-24s %5d MB  built in %ds' "${name}:${tag}" "$((size / 1000000))" "$((SECONDS - start))")")
  echo "${what} image built in $((SECONDS - start))s"
done

step "done"
printf '%s\n' "${summary[@]}"
base_note=""
for base in python:3.11-slim python:3.9-slim; do
  label="$(docker image inspect -f '{{index .Config.Labels "dev.distml.standin"}}' "${base}" 2>/dev/null || true)"
  [[ "${label}" != 1 ]] || base_note+=" ${base}"
done
[[ -z "${base_note}" ]] ||
  echo "note: built on local stand-in base images (${base_note# }); fine for local tests, not for shipping (docs/images.md)"
