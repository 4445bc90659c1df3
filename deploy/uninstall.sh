#!/usr/bin/env bash
# Undo deploy/install.sh (docs/clusters.md#uninstall): the operator, its RBAC, admission policies, namespace and, for
# an install that brought them (deploy/, deploy/namespaced/), the CRDs, with which the API server deletes every
# DistTrainingRun and DistTrainingSweep of the cluster, and the garbage collector their TFJobs, pods, policies,
# budgets and the volumes of runs with reclaimPolicy Delete. What it keeps: the volumes of runs with reclaimPolicy
# Retain (their models), every namespace but the operator's (dtr-runs of deploy/namespaced/ with what is in it), the
# Kubeflow training-operator. It prints that plan first and acts only with DTR_UNINSTALL=yes.
# Settings (environment):
#   DTR_DEPLOY     the kustomization that was installed (default deploy/; deploy/namespaced, deploy/team)
#   DTR_UNINSTALL  yes: act on the plan (default: the plan only, nothing changed)
set -euo pipefail

# shellcheck source=deploy/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
readonly DEPLOY="${DTR_DEPLOY:-${ROOT}/deploy}"
readonly RETAINED='{{range .items}}{{if not .metadata.ownerReferences}}{{.metadata.namespace}}/{{.metadata.name}}{{"\n"}}{{end}}{{end}}'

# The kustomization's objects without its Namespaces but the operator's: the namespace of runs holds people's data.
objects_to_delete() {
  kubectl kustomize "${DEPLOY}" | awk -v keep="$1" '
    function flush() { if (!(kind == "Namespace" && name != keep)) printf "%s", doc; doc = ""; kind = ""; name = ""; meta = 0 }
    /^---/ { flush(); print "---"; next }
    { doc = doc $0 "\n" }
    /^kind: / { kind = $2 }
    /^metadata:/ { meta = 1; next }
    /^[^ ]/ { meta = 0 }
    meta && /^  name: / && name == "" { name = $2 }
    END { flush() }'
}

# ns/name of each claim a run made with reclaimPolicy Retain (labelled by the operator, owned by nothing).
retained_claims() {
  kubectl get pvc --all-namespaces -l app.kubernetes.io/managed-by=dtr-operator -o go-template="${RETAINED}" \
    2>/dev/null | paste -sd ' ' - || true
}

count() {
  local n
  n="$(kubectl get "$1" --all-namespaces --no-headers 2>/dev/null | wc -l)" || true
  printf '%s' "${n// /}"
}

plan() {
  local context ns="$1" runs sweeps kept_namespaces claims
  context="$(kubectl config current-context 2>/dev/null || true)"
  step "plan (cluster: ${context:-?}; ${DEPLOY#"${ROOT}"/})"
  info "deleted:"
  cluster_objects "${DEPLOY}" | grep -v "^Namespace/" | sed 's/^/      /'
  info "  Namespace/${ns} (the operator's) and everything in it"
  # shellcheck disable=SC2310 # a failed render failed above (cluster_objects)
  if brings_crd "${DEPLOY}"; then
    runs="$(count disttrainingruns.distml.dev)"
    sweeps="$(count disttrainingsweeps.distml.dev)"
    info "  with the CRDs, in every namespace: ${runs} DistTrainingRuns and ${sweeps} DistTrainingSweeps, their" \
      "TFJobs, pods and NetworkPolicies, and the volumes of runs with reclaimPolicy Delete; runs of any other" \
      "operator of these CRDs (deploy/team/) too"
  else
    info "  the CRDs stay (this install did not bring them): runs in its namespaces stay, served by no operator"
  fi
  kept_namespaces="$(cluster_objects "${DEPLOY}")"
  kept_namespaces="$(sed -n 's|^Namespace/||p' <<<"${kept_namespaces}" | grep -vx "${ns}" | tr '\n' ' ' || true)"
  claims="$(retained_claims)"
  info "kept:"
  info "  the volumes of runs with reclaimPolicy Retain (their models): ${claims:-none now}"
  [[ -z "${kept_namespaces}" ]] || info "  Namespace ${kept_namespaces}(runs' namespaces, with their volumes)"
  info "  the Kubeflow training-operator, and every other namespace"
}

main() {
  command -v kubectl >/dev/null 2>&1 || die "kubectl not found"
  local ns context
  context="$(kubectl config current-context 2>/dev/null || echo none)"
  kubectl version >/dev/null 2>&1 || die "no cluster answers kubectl (current context: ${context})"
  ns="$(operator_namespace "${DEPLOY}")"
  plan "${ns}"
  if [[ "${DTR_UNINSTALL:-}" != yes ]]; then
    info "nothing changed: run it again with DTR_UNINSTALL=yes to delete the above"
    return 0
  fi
  step "delete (kubectl delete of ${DEPLOY#"${ROOT}"/} but the runs' namespaces)"
  objects_to_delete "${ns}" | kubectl delete --ignore-not-found --wait=true --timeout=300s -f -
  step "done"
  local claims
  claims="$(retained_claims)"
  info "kept volumes: ${claims:-none}"
  info "install again: deploy/install.sh (docs/clusters.md); the kept volumes are read by a run naming one in" \
    "spec.storage.claimName"
}

main "$@"
