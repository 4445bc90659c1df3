#!/usr/bin/env bash
# Everything after a cluster exists, on any cluster (docs/clusters.md):
#   build both images -> import them into the node, or push them to a registry -> Kubeflow training-operator
#   (standalone overlay, unless one is there) -> the CRDs + operator (deploy/) -> [apply an
#   example in a namespace you name, wait for Succeeded, print where the model is]. It prints what it will
#   create cluster-wide before it acts, and stops there unless you are cluster-admin.
# Run by deploy/k3d/up.sh (import with k3d) and by the local real node (import with ctr);
# steps in docs/k3d.md. Needs kubectl (current context = the cluster) and docker.
# Settings (environment):
#   DTR_IMPORT       how images get onto the node (default k3d):
#                    k3d | kind | minikube   that tool's image import (no registry)
#                    ctr                     docker save | the node's ctr (DTR_CTR)
#                    registry                push to DTR_REGISTRY, deploy through that overlay (deploy/images/push.sh)
#                    none                    the node already has them, or pulls them itself
#   DTR_CLUSTER      the k3d or kind cluster name, the minikube profile (default dtr; minikube's: minikube)
#   DTR_REGISTRY     host[:port][/path] the cluster pulls from (DTR_IMPORT=registry)
#   DTR_CTR          the ctr command line that reaches the node's containerd (DTR_IMPORT=ctr)
#   DTR_TRAINING_OPERATOR  auto | install | skip (default auto): auto leaves a training-operator that is
#                    already there alone (a Deployment labelled control-plane=kubeflow-training-operator,
#                    or only the TFJob CRD) and installs the pinned one where there is neither; install
#                    applies the pinned one over whatever is there; skip never touches it
#   DTR_TRAINING_OPERATOR_KUSTOMIZE   the standalone overlay (default: upstream on GitHub)
#   DTR_DEPLOY       the kustomization to apply (default deploy/; deploy/namespaced for one namespace; deploy/team
#                    for one more team's operator beside deploy/namespaced, in its own namespace)
#   DTR_EXAMPLE      a DistTrainingRun file to apply and wait for (default: none, install only), in
#   DTR_EXAMPLE_NAMESPACE  the namespace to train it in (required with DTR_EXAMPLE)
#   DTR_HOST_DIR     the host directory holding the node's local-path volumes (to print the model)
#   DTR_TIMEOUT      seconds to wait for the example (default 1800)
#   DTR_STUCK_SECONDS  stop waiting once its workers cannot start for this long (default 180)
#   DTR_SKIP_BUILD=1 reuse the images already built
#   DTR_OPERATOR_EGRESS  apiserver | open (default apiserver): the operator's pod may open connections only to the
#                    API server (a NetworkPolicy of the addresses the cluster names now), or to anything
set -euo pipefail

# shellcheck source=deploy/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
readonly IMPORT="${DTR_IMPORT:-k3d}"
readonly CLUSTER="${DTR_CLUSTER:-dtr}"
readonly SOURCE_DEPLOY="${DTR_DEPLOY:-${ROOT}/deploy}"
if [[ "${IMPORT}" == registry ]]; then
  # The overlay push.sh writes: SOURCE_DEPLOY with the images on the registry.
  DEPLOY="${DTR_OVERLAY:-${STATE}/deploy-registry}"
else
  DEPLOY="${SOURCE_DEPLOY}"
fi
readonly DEPLOY
readonly EXAMPLE="${DTR_EXAMPLE:-}"
readonly EXAMPLE_NS="${DTR_EXAMPLE_NAMESPACE:-}"
readonly TRAINING_OPERATOR_MODE="${DTR_TRAINING_OPERATOR:-auto}"
readonly HOST_DIR="${DTR_HOST_DIR:-}"
readonly TIMEOUT="${DTR_TIMEOUT:-1800}"
readonly OPERATOR_EGRESS="${DTR_OPERATOR_EGRESS:-apiserver}"
# The training-operator at its pin (devcluster/versions.env, the one home of the version).
# shellcheck source=devcluster/versions.env disable=SC1091
source "${ROOT}/devcluster/versions.env"
readonly TRAINING_OPERATOR_REF="${TRAINING_OPERATOR_VERSION:?not in devcluster/versions.env}"
readonly TRAINING_OPERATOR_KUSTOMIZE="${DTR_TRAINING_OPERATOR_KUSTOMIZE:-github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref=${TRAINING_OPERATOR_REF}}"

build_images() {
  if [[ "${DTR_SKIP_BUILD:-0}" == 1 ]]; then
    docker image inspect "${OPERATOR_IMAGE}" "${TRAINER_IMAGE}" >/dev/null 2>&1 \
      || die "DTR_SKIP_BUILD=1 but ${OPERATOR_IMAGE} or ${TRAINER_IMAGE} is not built; run make images"
    return
  fi
  step "build ${OPERATOR_IMAGE} and ${TRAINER_IMAGE}"
  bash "${ROOT}/deploy/images/build.sh"
}

import_images() {
  step "both images onto the node (${IMPORT})"
  case "${IMPORT}" in
    k3d) k3d image import --cluster "${CLUSTER}" "${OPERATOR_IMAGE}" "${TRAINER_IMAGE}" ;;
    kind) kind load docker-image --name "${CLUSTER}" "${OPERATOR_IMAGE}" "${TRAINER_IMAGE}" ;;
    minikube) minikube -p "${DTR_CLUSTER:-minikube}" image load "${OPERATOR_IMAGE}" "${TRAINER_IMAGE}" ;;
    registry)
      DTR_DEPLOY="${SOURCE_DEPLOY}" DTR_OVERLAY="${DEPLOY}" bash "${ROOT}/deploy/images/push.sh" "${DTR_REGISTRY}" ;;
    ctr)
      # What k3d image import does inside the k3s node: docker save | ctr -n k8s.io images import.
      # shellcheck disable=SC2086 # DTR_CTR is a command line
      docker save "${OPERATOR_IMAGE}" "${TRAINER_IMAGE}" | ${DTR_CTR} -n k8s.io images import - ;;
    *) echo "skipped (DTR_IMPORT=none: the node pulls them itself)" ;;  # main() checked DTR_IMPORT
  esac
}

# Each ResourceQuota of a kustomization, as "namespace name", one per line.
resource_quotas() {
  kubectl kustomize "$1" | awk '
    /^---/ { if (kind == "ResourceQuota" && name != "") print ns " " name; kind = ""; name = ""; ns = ""; meta = 0; next }
    /^kind: / { kind = $2 }
    /^metadata:/ { meta = 1; next }
    /^[^ ]/ { meta = 0 }
    meta && /^  name: / && name == "" { name = $2 }
    meta && /^  namespace: / && ns == "" { ns = $2 }
    END { if (kind == "ResourceQuota" && name != "") print ns " " name }'
}

# How many runs a quota counts now, empty while Kubernetes' quota controller has not counted every resource the
# quota holds (runs and sweeps: both CRDs come together, so both are counted or neither).
quota_used_runs() {
  local used
  # shellcheck disable=SC2016 # $hard and $n are the template's variables, not the shell's
  used="$(kubectl -n "$1" get resourcequota "$2" -o go-template='{{$hard := .spec.hard}}{{with .status.used}}
    {{- $n := 0}}{{range $k, $_ := $hard}}{{if not (index $.status.used $k)}}{{$n = 1}}{{end}}{{end}}
    {{- if eq $n 0}}{{index . "count/disttrainingruns.distml.dev"}}{{end}}{{end}}' 2>/dev/null || true)"
  [[ "${used}" == "<no value>" ]] || printf '%s' "${used}"
}

# The run quotas of the install (deploy/namespaced/quota.yaml) counted before any run is made. Kubernetes' quota
# controller counts a resource it discovered after the quota was made only at its next full resync (5 min by
# default), and the API server refuses every run until then ("status unknown for quota"); a quota made again once
# the controller knows the resource (it looks every 30 s) is counted at once.
settle_run_quotas() {
  local ns name used tries quotas
  quotas="$(resource_quotas "${DEPLOY}")"
  while read -r ns name; do
    [[ -n "${name}" ]] || continue
    used=""
    for ((tries = 1; tries <= 12; tries++)); do
      used="$(quota_used_runs "${ns}" "${name}")"
      [[ -n "${used}" ]] && break
      if ((tries % 3 == 0)); then
        kubectl kustomize "${DEPLOY}" | awk -v name="${name}" '
          /^---/ { if (kind == "ResourceQuota" && found) printf "%s", doc; doc = ""; kind = ""; found = 0; next }
          { doc = doc $0 "\n" }
          /^kind: / { kind = $2 }
          $0 == "  name: " name { found = 1 }
          END { if (kind == "ResourceQuota" && found) printf "%s", doc }' | kubectl replace --force -f - >/dev/null
      fi
      sleep 5
    done
    if [[ -n "${used}" ]]; then
      info "run quota ${ns}/${name}: counted (${used} runs)"
    else
      info "run quota ${ns}/${name}: not counted yet: runs there are refused ('status unknown for quota') until Kubernetes' quota controller counts them (at most 5 min)"
    fi
  done <<<"${quotas}"
}

# "namespace/name image" of each training-operator Deployment already in the cluster, one per line.
training_operators() {
  kubectl get deployments --all-namespaces -l control-plane=kubeflow-training-operator \
    -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name} {.spec.template.spec.containers[0].image}{"\n"}{end}'
}

# The TFJob versions the API serves, empty when there is no TFJob CRD.
tfjob_versions() {
  kubectl get crd tfjobs.kubeflow.org -o jsonpath='{.spec.versions[?(@.served==true)].name}' 2>/dev/null || true
}

# "install|keep<TAB>why", from DTR_TRAINING_OPERATOR and what the cluster has.
training_operator_decision() {
  local found served absent="nothing (no TFJob CRD: runs will say TFJobCRDMissing)"
  found="$(training_operators)"
  found="${found//$'\n'/, }"
  served="$(tfjob_versions)"
  case "${TRAINING_OPERATOR_MODE}" in
    install) printf 'install\tDTR_TRAINING_OPERATOR=install: %s is applied over what is there (%s)\n' \
      "${TRAINING_OPERATOR_REF}" "${found:-none found}" ;;
    skip) printf 'keep\tDTR_TRAINING_OPERATOR=skip: not touched; TFJob served as %s\n' "${served:-${absent}}" ;;
    *)
      if [[ -n "${found}" ]]; then
        printf 'keep\tfound %s; TFJob served as %s: left alone (DTR_TRAINING_OPERATOR=install applies %s over it)\n' \
          "${found}" "${served:-${absent}}" "${TRAINING_OPERATOR_REF}"
      elif [[ -n "${served}" ]]; then
        printf 'keep\tthe TFJob CRD is there (served as %s) but no Deployment labelled %s: left alone; if nothing runs TFJobs, runs stay TFJobSubmitted (DTR_TRAINING_OPERATOR=install)\n' \
          "${served}" control-plane=kubeflow-training-operator
      else
        printf 'install\tnone found: %s (standalone overlay, namespace kubeflow) is installed\n' "${TRAINING_OPERATOR_REF}"
      fi ;;
  esac
}

# What will change, before anything does: this operator's cluster-wide objects, then (for a cluster-admin
# only: anyone else stops here) what happens to the training-operator, with its objects when it is installed.
plan() {
  local context user decided why minor too_old
  context="$(kubectl config current-context 2>/dev/null || true)"
  step "plan (cluster: ${context:-?})"
  minor="$(server_minor)"
  # shellcheck disable=SC2310 # a test: set -e inside it changes nothing
  if too_old="$(kubernetes_too_old "${minor}")"; then
    die "${too_old}"
  fi
  info "cluster-wide objects this creates or updates (cluster-admin needed):"
  cluster_objects "${SOURCE_DEPLOY}" | sed 's/^/      /'
  OPERATOR_NS="$(operator_namespace "${SOURCE_DEPLOY}")"
  # shellcheck disable=SC2310 # a failed render failed above (cluster_objects)
  if ! brings_crd "${SOURCE_DEPLOY}" && ! kubectl get crd disttrainingruns.distml.dev >/dev/null 2>&1; then
    die "${SOURCE_DEPLOY#"${ROOT}"/} installs an operator beside one that brings the DistTrainingRun CRD, and the cluster has none: install deploy/namespaced/ first (docs/clusters.md#one-operator-per-team)"
  fi
  if [[ "$(kubectl auth can-i '*' '*' --all-namespaces 2>/dev/null || true)" != yes ]]; then
    user="$(kubectl config view --minify -o jsonpath='{.contexts[0].context.user}' 2>/dev/null || true)"
    die "this install creates the cluster-wide objects above and needs cluster-admin, which ${user:-your user} does not have (kubectl auth can-i '*' '*' --all-namespaces: no); ask a cluster admin to run it (docs/clusters.md)"
  fi
  decided="$(training_operator_decision)"
  DECISION="${decided%%$'\t'*}"
  why="${decided#*$'\t'}"
  info "training-operator: ${why}"
  if [[ "${DECISION}" == install ]]; then
    info "and the training-operator's:"
    cluster_objects "${TRAINING_OPERATOR_KUSTOMIZE}" | sed 's/^/      /'
  fi
  info "in namespaces: ${OPERATOR_NS} (the operator)${EXAMPLE:+; the example ${EXAMPLE#"${ROOT}"/} in ${EXAMPLE_NS}}"
  [[ -n "${EXAMPLE}" ]] || info "no example run (DTR_EXAMPLE=FILE DTR_EXAMPLE_NAMESPACE=NS to train one)"
}

# kubectl wait fails at once, without waiting, on a CRD just applied whose status.conditions is still null
# (kubernetes/kubernetes#66439; it failed the shared node's start in a CI run of fe15fde): that error is tried again
# each second, up to the same 120 s; any other ends the install.
wait_established() {
  local out tries=0
  while ! out="$(kubectl wait --for=condition=Established --timeout=120s "$@" 2>&1)"; do
    if [[ "${out}" != *"accessor error: <nil>"* ]] || ((++tries >= 120)); then
      printf '%s\n' "${out}" >&2
      return 1
    fi
    sleep 1
  done
  printf '%s\n' "${out}"
}

install_training_operator() {
  step "Kubeflow training-operator ${TRAINING_OPERATOR_REF} (standalone overlay, namespace kubeflow)"
  kubectl apply --server-side --force-conflicts -k "${TRAINING_OPERATOR_KUSTOMIZE}"
  wait_established crd/tfjobs.kubeflow.org
  kubectl -n kubeflow rollout status deployment/training-operator --timeout=300s
}

install_dtr_operator() {
  step "the CRDs and the operator (kubectl apply -k ${DEPLOY#"${ROOT}"/})"
  local existed=0
  kubectl -n "${OPERATOR_NS}" get deployment/dtr-operator >/dev/null 2>&1 && existed=1
  kubectl apply -k "${DEPLOY}"
  wait_established crd/disttrainingruns.distml.dev crd/disttrainingsweeps.distml.dev
  # The image tag stays 0.1.0 when the image is rebuilt: restart so the new one runs.
  if ((existed)) && [[ "${IMPORT}" != none ]]; then
    kubectl -n "${OPERATOR_NS}" rollout restart deployment/dtr-operator
  fi
  kubectl -n "${OPERATOR_NS}" rollout status deployment/dtr-operator --timeout=180s
}

# The operator's pod may open connections only to the API server (security review R4: a stolen token then cannot
# reach the runs' TensorFlow ports, the cloud's metadata service or the internet from it): the addresses and port of
# the default namespace's kubernetes Service's endpoints as the cluster names them now, and the Service's own address
# (for a plugin that applies policies before the Service's NAT); and DNS (port 53, wherever the cluster's resolver
# is), since kopf reaches the API server by name (kubernetes.default.svc). Made again at each install: an API server
# that moves to other addresses needs install.sh again (docs/operator.md#who-the-operator-reaches).
hold_operator_egress() {
  local addresses port service service_port address cidr to=""
  if [[ "${OPERATOR_EGRESS}" == open ]]; then
    kubectl -n "${OPERATOR_NS}" delete networkpolicy dtr-operator-egress --ignore-not-found >/dev/null
    return 0
  fi
  addresses="$(kubectl -n default get endpointslices -l kubernetes.io/service-name=kubernetes \
    -o jsonpath='{.items[*].endpoints[*].addresses[*]}')"
  port="$(kubectl -n default get endpointslices -l kubernetes.io/service-name=kubernetes \
    -o jsonpath='{.items[0].ports[0].port}')"
  service="$(kubectl -n default get service kubernetes -o jsonpath='{.spec.clusterIP}')"
  service_port="$(kubectl -n default get service kubernetes -o jsonpath='{.spec.ports[0].port}')"
  [[ -n "${addresses}" && -n "${port}" && -n "${service}" && -n "${service_port}" ]] ||
    die "cannot read the API server's addresses (EndpointSlices of service kubernetes in default) for the operator's egress policy; DTR_OPERATOR_EGRESS=open installs without it"
  for address in ${addresses}; do
    cidr="${address}/32"
    [[ "${address}" == *:* ]] && cidr="${address}/128"
    to+="        - ipBlock: {cidr: \"${cidr}\"}"$'\n'
  done
  cidr="${service}/32"
  [[ "${service}" == *:* ]] && cidr="${service}/128"
  step "the operator's egress: the API server only (${addresses// /, } port ${port}; Service ${service}:${service_port})"
  kubectl apply -f - <<EOF
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: dtr-operator-egress
  namespace: ${OPERATOR_NS}
  labels:
    app.kubernetes.io/name: dtr-operator
    app.kubernetes.io/part-of: distml
spec:
  podSelector:
    matchLabels:
      app.kubernetes.io/name: dtr-operator
  policyTypes: ["Egress"]
  egress:
    - to:
${to}      ports:
        - {protocol: TCP, port: ${port}}
    - to:
        - ipBlock: {cidr: "${cidr}"}
      ports:
        - {protocol: TCP, port: ${service_port}}
    - ports:
        - {protocol: UDP, port: 53}
        - {protocol: TCP, port: 53}
EOF
}

# shellcheck source=deploy/podsecurity.sh
source "$(dirname "${BASH_SOURCE[0]}")/podsecurity.sh"
# The namespaces where a host-network pod could reach a run's workers past its NetworkPolicy, said once.
warn_pod_security() {
  local weak
  # shellcheck disable=SC2310 # a list that cannot be read says nothing: set -e inside it changes nothing
  weak="$(weak_namespaces)" || return 0
  [[ -n "${weak}" ]] || return 0
  info "namespaces that enforce neither Pod Security baseline nor restricted: ${weak}"
  info "  a host-network pod there reaches any run's workers past its NetworkPolicy; runs in them say so"
  info "  (condition IsolationWeakened); label those tenants use: kubectl label namespace NAME ${PSA_ENFORCE_LABEL}=restricted"
  info "  (docs/operator.md#pod-security-a-precondition)"
}

# A field of the run in the example file, read by kubectl (needs the CRD installed).
example_field() {
  kubectl create --dry-run=client -f "${EXAMPLE}" -o jsonpath="{.metadata.$1}"
}

# Workers that cannot start (no node with room, a wrong image) rarely start by themselves: after this
# long in reason WorkerPodsNotStarting (none runs) or WorkersNotAllRunning (some do), stop waiting and say why.
readonly STUCK_SECONDS="${DTR_STUCK_SECONDS:-180}"

wait_for_run() {
  local ns="$1" name="$2" phase reason message deadline now stuck_since=""
  step "waiting for ${ns}/${name} to finish (timeout ${TIMEOUT}s; watch: kubectl get dtr -n ${ns} -w)"
  deadline=$((SECONDS + TIMEOUT))
  while ((SECONDS < deadline)); do
    IFS=$'\t' read -r phase reason message < <(kubectl -n "${ns}" get disttrainingrun "${name}" \
      -o jsonpath='{.status.phase}{"\t"}{.status.reason}{"\t"}{.status.message}{"\n"}' 2>/dev/null || echo) || true
    now="$(date +%H:%M:%S)"
    printf '  %s  phase=%-9s %s\n' "${now}" "${phase:-<none>}" "${message:-}"
    case "${phase}" in
      Succeeded) return 0 ;;
      Failed)
        kubectl -n "${ns}" describe disttrainingrun "${name}" >&2 || true
        die "run ${ns}/${name} failed: ${message}" ;;
      *) ;;  # not created yet, Pending or Running: keep waiting
    esac
    if [[ "${reason:-}" == WorkerPodsNotStarting || "${reason:-}" == WorkersNotAllRunning ]]; then
      stuck_since="${stuck_since:-${SECONDS}}"
      ((SECONDS - stuck_since < STUCK_SECONDS)) ||
        die "run ${ns}/${name}: its workers have not all started for ${STUCK_SECONDS}s: ${message} (see docs/clusters.md, '3. A run that cannot start says why')"
    else
      stuck_since=""
    fi
    sleep 10
  done
  die "run ${ns}/${name} did not finish in ${TIMEOUT}s (see docs/k3d.md, 'Troubleshooting')"
}

print_model() {
  local ns="$1" name="$2" model_path claim uri version volume host_path
  model_path="$(kubectl -n "${ns}" get disttrainingrun "${name}" -o jsonpath='{.status.model.path}')"
  claim="$(kubectl -n "${ns}" get disttrainingrun "${name}" -o jsonpath='{.status.model.claim}')"
  uri="$(kubectl -n "${ns}" get disttrainingrun "${name}" -o jsonpath='{.status.model.storageUri}')"
  version="$(kubectl -n "${ns}" get disttrainingrun "${name}" -o jsonpath='{.status.model.version}')"
  volume="$(kubectl -n "${ns}" get pvc "${claim}" -o jsonpath='{.spec.volumeName}')"
  step "done"
  kubectl -n "${ns}" get disttrainingrun "${name}"
  echo "model (in the pods):  ${model_path}  on PVC ${ns}/${claim}"
  [[ -n "${HOST_DIR}" && -n "${uri}" ]] || return 0
  # local-path names a volume's directory <pv>_<namespace>_<pvc>; storageUri is pvc://<claim>/<the
  # model's directory on the volume>, which holds the version.
  host_path="${HOST_DIR}/${volume}_${ns}_${claim}/${uri#"pvc://${claim}/"}/${version}"
  if [[ -d "${host_path}" ]]; then
    echo "model (on this host): ${host_path}"
    ls -l "${host_path}"
  else
    echo "model (on this host): expected at ${host_path}, not found there (another storage class?)"
  fi
}

main() {
  local tool
  local tools=(docker kubectl)
  # The settings first: a wrong one must not wait for a build to be reported.
  case "${IMPORT}" in
    k3d | kind | minikube) tools+=("${IMPORT}") ;;
    ctr) [[ -n "${DTR_CTR:-}" ]] || die "DTR_IMPORT=ctr needs DTR_CTR (the ctr command that reaches the node's containerd)" ;;
    registry) [[ -n "${DTR_REGISTRY:-}" ]] || die "DTR_IMPORT=registry needs DTR_REGISTRY (host[:port][/path] the cluster pulls from)" ;;
    none) ;;
    *) die "DTR_IMPORT must be k3d, kind, minikube, ctr, registry or none, not '${IMPORT}'" ;;
  esac
  for tool in "${tools[@]}"; do
    command -v "${tool}" >/dev/null 2>&1 || die "${tool} not found on PATH (see docs/clusters.md, 'Prerequisites')"
  done
  [[ -z "${EXAMPLE}" || -f "${EXAMPLE}" ]] || die "example ${EXAMPLE} not found (DTR_EXAMPLE)"
  [[ -z "${EXAMPLE}" || -n "${EXAMPLE_NS}" ]] ||
    die "DTR_EXAMPLE needs DTR_EXAMPLE_NAMESPACE: the namespace to train it in (it must exist)"
  case "${OPERATOR_EGRESS}" in
    apiserver | open) ;;
    *) die "DTR_OPERATOR_EGRESS must be apiserver or open, not '${OPERATOR_EGRESS}'" ;;
  esac
  case "${TRAINING_OPERATOR_MODE}" in
    auto | install | skip) ;;
    *) die "DTR_TRAINING_OPERATOR must be auto, install or skip, not '${TRAINING_OPERATOR_MODE}'" ;;
  esac
  DECISION=""
  OPERATOR_NS=dtr-system
  plan
  build_images
  local started=${SECONDS}
  import_images
  info "images imported in $((SECONDS - started)) s"
  if [[ "${DECISION}" == install ]]; then
    install_training_operator
  else
    step "Kubeflow training-operator: left as it is"
  fi
  install_dtr_operator
  settle_run_quotas
  hold_operator_egress
  warn_pod_security
  [[ -n "${EXAMPLE}" ]] || return 0
  local name
  name="$(example_field name)"
  step "apply ${EXAMPLE} (run ${EXAMPLE_NS}/${name})"
  kubectl apply -n "${EXAMPLE_NS}" -f "${EXAMPLE}"
  wait_for_run "${EXAMPLE_NS}" "${name}"
  print_model "${EXAMPLE_NS}" "${name}"
}

main "$@"
