#!/usr/bin/env bash
# Put both images on a registry and write the kustomize overlay that deploys from it (make push,
# docs/clusters.md): tag both images (deploy/lib.sh, localhost/distml/...) as REGISTRY/distml/...,
# push them, then write DTR_OVERLAY (default .dtr/deploy-registry/kustomization.yaml): DTR_DEPLOY
# (default deploy/; deploy/namespaced for one namespace) with the operator's image and its default
# trainer image on REGISTRY, each pinned to the digest just pushed, and its trainer allow-list
# REGISTRY/distml/trainer@sha256:* (any digest). The digest, not the tag: the tag stays 0.1.0 across
# rebuilds, and a node that has it (imagePullPolicy IfNotPresent) would keep running the old image; a new
# digest changes the Deployment, which rolls out, and the runs' default image, which every node pulls.
# An image built on a local stand-in base (label dev.distml.standin=1, deploy/images/base-images.sh) is
# refused: stand-ins are for offline tests, not for shipping (docs/images.md#stand-ins-are-a-fallback-not-what-to-ship).
#   push.sh REGISTRY            REGISTRY: host[:port][/path], e.g. registry.example.com:5000/ml
# Settings (environment):
#   DTR_PUSH=0       write the overlay only (the images are already there, or pushed another way): by
#                    the digests this engine recorded when it pushed them, else by tag (and it says so)
#   DTR_PUSH_IMAGES  which images to push (default: both; space-separated names as built)
#   DTR_PUSH_STANDIN=1  push images built on a stand-in all the same (a registry of your own, for tests)
set -euo pipefail

# shellcheck source=deploy/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

readonly DEPLOY="${DTR_DEPLOY:-${ROOT}/deploy}"
readonly OVERLAY="${DTR_OVERLAY:-${STATE}/deploy-registry}"

(($# == 1)) || die "usage: push.sh REGISTRY (host[:port][/path], e.g. registry.example.com:5000/ml); make push REGISTRY=..."
registry="${1%/}"
# In a variable: bash 3.2 (macOS) cannot parse a literal pattern with parentheses after =~.
registry_pattern='^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9._-]+)*$'
[[ "${registry}" =~ ${registry_pattern} ]] ||
  die "REGISTRY '${registry}' is not host[:port][/path] in lower case (e.g. registry.example.com:5000/ml)"
readonly registry

# The repository path of an image without its registry host: localhost/team/image:1 -> team/image:1.
path_of() {
  local first="${1%%/*}"
  if [[ "$1" == */* && ( "${first}" == localhost || "${first}" == *.* || "${first}" == *:* ) ]]; then
    echo "${1#*/}"
  else
    echo "$1"
  fi
}

# refuse_standin IMAGE: fail if IMAGE's base is a local stand-in (the label is inherited from the base image).
refuse_standin() {
  local label
  label="$(docker image inspect -f '{{index .Config.Labels "dev.distml.standin"}}' "$1")"
  [[ "${label}" == 1 ]] || return 0
  if [[ "${DTR_PUSH_STANDIN:-0}" == 1 ]]; then
    info "${1} is built on a local stand-in base (dev.distml.standin=1); pushed because DTR_PUSH_STANDIN=1"
    return 0
  fi
  die "${1} is built on a local stand-in base image (label dev.distml.standin=1): not for shipping. Build on the real base (docs/images.md#stand-ins-are-a-fallback-not-what-to-ship), or set DTR_PUSH_STANDIN=1 for a registry of your own"
}

# The digest the registry gave IMAGE's push to REGISTRY (docker keeps it in RepoDigests), or nothing.
pushed_digest() {
  local target repo
  target="${registry}/$(path_of "$1")"
  repo="${target%:*}"
  docker image inspect -f '{{range .RepoDigests}}{{println .}}{{end}}' "$1" 2>/dev/null |
    sed -n "s|^${repo}@\(sha256:[0-9a-f]*\)$|\1|p" | head -n1 || true  # no docker, or never pushed: none
}

# REGISTRY/path@digest when this engine pushed IMAGE there, else REGISTRY/path:tag (and a line saying so).
pinned_ref() {
  local path digest
  path="$(path_of "$1")"
  digest="$(pushed_digest "$1")"
  if [[ -n "${digest}" ]]; then
    echo "${registry}/${path%:*}@${digest}"
  else
    info "${1}: no pushed digest known here; the overlay names its tag (a rebuild under the same tag does not reach nodes that have it)" >&2
    echo "${registry}/${path}"
  fi
}

push_images() {
  local image target
  for image in ${DTR_PUSH_IMAGES:-${OPERATOR_IMAGE} ${TRAINER_IMAGE}}; do
    docker image inspect "${image}" >/dev/null 2>&1 || die "${image} is not built here: run make images first"
    refuse_standin "${image}"
    target="${registry}/$(path_of "${image}")"
    step "push ${target}"
    docker tag "${image}" "${target}"
    docker push "${target}"
  done
}

# The overlay: kustomize's images transformer for the operator's container; the trainer image is
# an environment value of that container (the default for runs, and the runs' spec.image allow-list).
write_overlay() {
  local base operator operator_ref trainer trainer_ref pin
  operator="$(path_of "${OPERATOR_IMAGE%:*}")"
  trainer="$(path_of "${TRAINER_IMAGE}")"
  operator_ref="$(pinned_ref "${OPERATOR_IMAGE}")"
  trainer_ref="$(pinned_ref "${TRAINER_IMAGE}")"
  # kustomize's images transformer: a digest replaces the tag.
  pin=""
  [[ "${operator_ref}" == *@sha256:* ]] && pin="    digest: ${operator_ref#*@}"
  mkdir -p "${OVERLAY}"
  base="$(relative_path "${OVERLAY}" "${DEPLOY}")"  # kustomize refuses absolute paths
  cat >"${OVERLAY}/kustomization.yaml" <<YAML
# Written by deploy/images/push.sh ${registry}: ${DEPLOY#"${ROOT}/"} with both images from ${registry}.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ${base}
images:
  - name: ${OPERATOR_IMAGE%:*}
    newName: ${registry}/${operator}
${pin}
patches:
  - patch: |-
      apiVersion: apps/v1
      kind: Deployment
      metadata:
        name: dtr-operator
        namespace: dtr-system
      spec:
        template:
          spec:
            containers:
              - name: operator
                env:
                  - name: DTR_TRAINER_IMAGE
                    value: ${trainer_ref}
                  - name: DTR_ALLOWED_IMAGES
                    value: ${registry}/${trainer%:*}@sha256:*
YAML
  step "overlay: ${OVERLAY}/kustomization.yaml"
  info "operator ${operator_ref}"
  info "trainer  ${trainer_ref} (the runs' default image)"
  info "kubectl apply -k ${OVERLAY}"
}

if [[ "${DTR_PUSH:-1}" != 0 ]]; then
  push_images
fi
write_overlay
