#!/usr/bin/env bash
# Put both images on a registry and write the kustomize overlay that deploys from it (make push,
# docs/clusters.md): tag distml/operator:0.1.0 and distml/trainer:0.1.0 as REGISTRY/distml/...,
# push them, then write DTR_OVERLAY (default .dtr/deploy-registry/kustomization.yaml): DTR_DEPLOY
# (default deploy/; deploy/namespaced for one namespace) with the operator's image, its default
# trainer image and its trainer allow-list all on REGISTRY.
#   push.sh REGISTRY            REGISTRY: host[:port][/path], e.g. registry.example.com:5000/ml
# Settings (environment):
#   DTR_PUSH=0       write the overlay only (the images are already there, or pushed another way)
#   DTR_PUSH_IMAGES  which images to push (default: both; space-separated names as built)
set -euo pipefail

# shellcheck source=deploy/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

readonly DEPLOY="${DTR_DEPLOY:-${ROOT}/deploy}"
readonly OVERLAY="${DTR_OVERLAY:-${STATE}/deploy-registry}"

(($# == 1)) || die "usage: push.sh REGISTRY (host[:port][/path], e.g. registry.example.com:5000/ml); make push REGISTRY=..."
registry="${1%/}"
[[ "${registry}" =~ ^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9._-]+)*$ ]] ||
  die "REGISTRY '${registry}' is not host[:port][/path] in lower case (e.g. registry.example.com:5000/ml)"
readonly registry

push_images() {
  local image target
  for image in ${DTR_PUSH_IMAGES:-${OPERATOR_IMAGE} ${TRAINER_IMAGE}}; do
    docker image inspect "${image}" >/dev/null 2>&1 || die "${image} is not built here: run make images first"
    target="${registry}/${image}"
    step "push ${target}"
    docker tag "${image}" "${target}"
    docker push "${target}"
  done
}

# The overlay: kustomize's images transformer for the operator's container; the trainer image is
# an environment value of that container (the default for runs, and the runs' spec.image allow-list).
write_overlay() {
  local base
  mkdir -p "${OVERLAY}"
  base="$(realpath --relative-to="${OVERLAY}" "${DEPLOY}")"  # kustomize refuses absolute paths
  cat >"${OVERLAY}/kustomization.yaml" <<YAML
# Written by deploy/images/push.sh ${registry}: ${DEPLOY#"${ROOT}/"} with both images from ${registry}.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ${base}
images:
  - name: ${OPERATOR_IMAGE%:*}
    newName: ${registry}/${OPERATOR_IMAGE%:*}
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
                    value: ${registry}/${TRAINER_IMAGE}
                  - name: DTR_ALLOWED_IMAGES
                    value: ${registry}/${TRAINER_IMAGE%:*}:*
YAML
  step "overlay: ${OVERLAY}/kustomization.yaml"
  info "kubectl apply -k ${OVERLAY}"
}

if [[ "${DTR_PUSH:-1}" != 0 ]]; then
  push_images
fi
write_overlay
