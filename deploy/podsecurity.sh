# shellcheck shell=bash
# Sourced by deploy/install.sh and deploy/doctor.sh: which namespaces of the current kubectl context enforce no Pod
# Security level that keeps host-network pods out. A run's NetworkPolicy holds only against pods that cannot use the
# node's network (docs/operator.md#pod-security-a-precondition; security review R2). The label and the levels are
# operator/dtr_operator/podsecurity.py's (ENFORCE_LABEL, HOLDING_LEVELS); tests/unit/operator/test_podsecurity.py
# keeps the two in agreement.

# shellcheck disable=SC2034 # used by the scripts that source this one
readonly PSA_ENFORCE_LABEL="pod-security.kubernetes.io/enforce"
readonly PSA_HOLDING_LEVELS="baseline restricted"

# Prints "NAMESPACE LEVEL" (LEVEL "-" when none is enforced) for each namespace without baseline or restricted;
# nothing when every namespace has one. Fails when kubectl cannot list namespaces.
namespaces_without_pod_security() {
  local listing name level
  listing="$(kubectl get namespaces -o \
    "jsonpath={range .items[*]}{.metadata.name}{\"\\t\"}{.metadata.labels.pod-security\\.kubernetes\\.io/enforce}{\"\\n\"}{end}")" ||
    return 1
  while IFS=$'\t' read -r name level; do
    [[ -n "${name}" ]] || continue
    [[ " ${PSA_HOLDING_LEVELS} " == *" ${level} "* && -n "${level}" ]] && continue
    printf '%s %s\n' "${name}" "${level:--}"
  done <<<"${listing}"
}

# The same on one line: "name(level) name(level) ...".
weak_namespaces() {
  local listed
  listed="$(namespaces_without_pod_security)" || return 1
  [[ -n "${listed}" ]] || return 0
  awk '{printf "%s%s(%s)", (NR > 1 ? " " : ""), $1, $2}' <<<"${listed}"
}
