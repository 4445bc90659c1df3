#!/usr/bin/env bash
# Bring up the whole stack on a local k3d cluster and train one example:
#   k3d cluster (host volume), then deploy/install.sh with k3d's image import: build both
#   images -> import -> Kubeflow training-operator -> the CRDs + operator
#   (deploy/) -> the example -> wait for Succeeded -> print where the model is.
# Needs docker (a running engine), k3d >= 5 and kubectl >= 1.27 on PATH.
# Settings (environment): DTR_CLUSTER, DTR_HOST_DIR, DTR_EXAMPLE, DTR_EXAMPLE_NAMESPACE (default default), DTR_TIMEOUT,
# DTR_STUCK_SECONDS (install.sh's), DTR_SKIP_BUILD=1 (reuse images already built). Step-by-step notes: docs/k3d.md.
set -euo pipefail

# shellcheck source=deploy/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
readonly CLUSTER="${DTR_CLUSTER:-dtr}"
readonly HOST_DIR="${DTR_HOST_DIR:-${HOME}/.dtr/k3d/${CLUSTER}}"
readonly EXAMPLE="${DTR_EXAMPLE:-${ROOT}/examples/mnist.yaml}"
# Where k3s's local-path provisioner puts PersistentVolumes inside the node; the
# host directory is mounted there, so a run's volume (and its model) is on the host.
readonly NODE_STORAGE="/var/lib/rancher/k3s/storage"

require_tools() {
  local tool
  for tool in docker k3d kubectl; do
    command -v "${tool}" >/dev/null 2>&1 || die "${tool} not found on PATH (see docs/k3d.md, 'Prerequisites')"
  done
  # shellcheck disable=SC2310 # with_timeout's status is its command's: set -e inside it changes nothing
  with_timeout 20 docker info >/dev/null 2>&1 || die "the Docker engine is not reachable ('docker info' failed); start it first"
  [[ -f "${EXAMPLE}" ]] || die "example ${EXAMPLE} not found (DTR_EXAMPLE)"
}

create_cluster() {
  step "cluster ${CLUSTER}: one k3s node, ${HOST_DIR} -> ${NODE_STORAGE}"
  mkdir -p "${HOST_DIR}"
  if k3d cluster get "${CLUSTER}" >/dev/null 2>&1; then
    echo "cluster ${CLUSTER} exists; reusing it"
  else
    # One node: the local-path volumes are ReadWriteOnce, so all workers of a
    # run must share a node (docs/k3d.md, "RWO volume with workers on two nodes").
    k3d cluster create "${CLUSTER}" \
      --servers 1 --agents 0 \
      --volume "${HOST_DIR}:${NODE_STORAGE}@server:0" \
      --k3s-arg "--disable=traefik@server:0" \
      --wait --timeout 300s
  fi
  kubectl config use-context "k3d-${CLUSTER}" >/dev/null
  kubectl wait --for=condition=Ready node --all --timeout=180s
}

main() {
  require_tools
  create_cluster
  # The rest is the same on every cluster: images, training-operator, operator, the example.
  # A cluster of its own: the example trains in `default` unless DTR_EXAMPLE_NAMESPACE says otherwise.
  DTR_IMPORT=k3d DTR_CLUSTER="${CLUSTER}" DTR_HOST_DIR="${HOST_DIR}" DTR_EXAMPLE="${EXAMPLE}" \
    DTR_EXAMPLE_NAMESPACE="${DTR_EXAMPLE_NAMESPACE:-default}" exec bash "${ROOT}/deploy/install.sh"
}

main "$@"
