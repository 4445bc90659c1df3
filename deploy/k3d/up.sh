#!/usr/bin/env bash
# Bring up the whole stack on a local k3d cluster and train one example:
#   k3d cluster (host volume) -> build + import both images -> Kubeflow
#   training-operator v1.9.4 -> DistTrainingRun CRD + operator (deploy/) ->
#   examples/mnist.yaml -> wait for Succeeded -> print where the model is.
# Needs docker (a running engine), k3d >= 5 and kubectl >= 1.27 on PATH.
# Settings (environment): DTR_CLUSTER, DTR_HOST_DIR, DTR_EXAMPLE, DTR_TIMEOUT,
# DTR_SKIP_BUILD=1 (reuse images already built). Step-by-step notes: docs/k3d.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
readonly ROOT
readonly CLUSTER="${DTR_CLUSTER:-dtr}"
readonly HOST_DIR="${DTR_HOST_DIR:-${HOME}/.dtr/k3d/${CLUSTER}}"
readonly EXAMPLE="${DTR_EXAMPLE:-${ROOT}/examples/mnist.yaml}"
readonly TIMEOUT="${DTR_TIMEOUT:-1800}"
readonly OPERATOR_IMAGE="distml/operator:0.1.0"
readonly TRAINER_IMAGE="distml/trainer:0.1.0"
readonly TRAINING_OPERATOR_REF="v1.9.4"
readonly TRAINING_OPERATOR_KUSTOMIZE="github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref=${TRAINING_OPERATOR_REF}"
# Where k3s's local-path provisioner puts PersistentVolumes inside the node; the
# host directory is mounted there, so a run's volume (and its model) is on the host.
readonly NODE_STORAGE="/var/lib/rancher/k3s/storage"

step() { printf '\n==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

require_tools() {
  local tool
  for tool in docker k3d kubectl; do
    command -v "${tool}" >/dev/null 2>&1 || die "${tool} not found on PATH (see docs/k3d.md, 'Prerequisites')"
  done
  docker info >/dev/null 2>&1 || die "the Docker engine is not reachable ('docker info' failed); start it first"
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

build_and_import_images() {
  if [[ "${DTR_SKIP_BUILD:-0}" != 1 ]]; then
    step "build ${OPERATOR_IMAGE} and ${TRAINER_IMAGE}"
    docker build -f "${ROOT}/Dockerfile.operator" -t "${OPERATOR_IMAGE}" "${ROOT}"
    docker build -f "${ROOT}/Dockerfile.trainer" -t "${TRAINER_IMAGE}" "${ROOT}"
  fi
  step "import both images into the cluster (no registry involved)"
  k3d image import --cluster "${CLUSTER}" "${OPERATOR_IMAGE}" "${TRAINER_IMAGE}"
}

install_training_operator() {
  step "Kubeflow training-operator ${TRAINING_OPERATOR_REF} (standalone overlay, namespace kubeflow)"
  kubectl apply --server-side --force-conflicts -k "${TRAINING_OPERATOR_KUSTOMIZE}"
  kubectl wait --for=condition=Established crd/tfjobs.kubeflow.org --timeout=120s
  kubectl -n kubeflow rollout status deployment/training-operator --timeout=300s
}

install_dtr_operator() {
  step "DistTrainingRun CRD and the operator (kubectl apply -k deploy/)"
  kubectl apply -k "${ROOT}/deploy"
  kubectl wait --for=condition=Established crd/disttrainingruns.distml.dev --timeout=120s
  kubectl -n dtr-system rollout status deployment/dtr-operator --timeout=180s
}

# A field of the run in the example file, read by kubectl (needs the CRD installed).
example_field() {
  kubectl create --dry-run=client -f "${EXAMPLE}" -o jsonpath="{.metadata.$1}"
}

wait_for_run() {
  local ns="$1" name="$2" phase message deadline now
  step "waiting for ${ns}/${name} to finish (timeout ${TIMEOUT}s; watch: kubectl get dtr -n ${ns} -w)"
  deadline=$((SECONDS + TIMEOUT))
  while ((SECONDS < deadline)); do
    phase="$(kubectl -n "${ns}" get disttrainingrun "${name}" -o jsonpath='{.status.phase}' 2>/dev/null || true)"
    message="$(kubectl -n "${ns}" get disttrainingrun "${name}" -o jsonpath='{.status.message}' 2>/dev/null || true)"
    now="$(date +%H:%M:%S)"
    printf '  %s  phase=%-9s %s\n' "${now}" "${phase:-<none>}" "${message}"
    case "${phase}" in
      Succeeded) return 0 ;;
      Failed)
        kubectl -n "${ns}" describe disttrainingrun "${name}" >&2 || true
        die "run ${ns}/${name} failed: ${message}" ;;
      *) ;;  # not created yet, Pending or Running: keep waiting
    esac
    sleep 10
  done
  die "run ${ns}/${name} did not finish in ${TIMEOUT}s (see docs/k3d.md, 'Troubleshooting')"
}

print_model() {
  local ns="$1" name="$2" model_path claim volume host_path
  model_path="$(kubectl -n "${ns}" get disttrainingrun "${name}" -o jsonpath='{.status.model.path}')"
  claim="$(kubectl -n "${ns}" get disttrainingrun "${name}" -o jsonpath='{.status.model.claim}')"
  volume="$(kubectl -n "${ns}" get pvc "${claim}" -o jsonpath='{.spec.volumeName}')"
  step "done"
  kubectl -n "${ns}" get disttrainingrun "${name}"
  echo "model (in the pods):  ${model_path}  on PVC ${ns}/${claim}"
  # local-path names a volume's directory <pv>_<namespace>_<pvc>; the volume is
  # mounted at /mnt/dtr in the pods, so strip that prefix to get the host path.
  host_path="${HOST_DIR}/${volume}_${ns}_${claim}${model_path#/mnt/dtr}"
  if [[ -d "${host_path}" ]]; then
    echo "model (on this host): ${host_path}"
    ls -l "${host_path}"
  else
    echo "model (on this host): expected at ${host_path}, not found there (another storage class?)"
  fi
}

main() {
  require_tools
  create_cluster
  build_and_import_images
  install_training_operator
  install_dtr_operator
  local ns name
  name="$(example_field name)"
  ns="$(example_field namespace)"
  ns="${ns:-default}"
  step "apply ${EXAMPLE} (run ${ns}/${name})"
  kubectl apply -f "${EXAMPLE}"
  wait_for_run "${ns}" "${name}"
  print_model "${ns}" "${name}"
}

main "$@"
