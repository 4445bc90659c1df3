#!/usr/bin/env bash
# Build the local control plane from Go modules into a cache outside the repo.
# Each binary is rebuilt only when its pinned version (devcluster/versions.env) changes.
#   etcd                      go.etcd.io/etcd/server/v3
#   kube-apiserver            k8s.io/kubernetes/cmd/kube-apiserver
#   kube-controller-manager   k8s.io/kubernetes/cmd/kube-controller-manager
#   kube-scheduler, kubelet, kube-proxy (the node's; same module and version)
#   training-operator         github.com/kubeflow/training-operator/cmd/training-operator.v1 (+ its TFJob CRD)
#   kueue                     sigs.k8s.io/kueue/cmd/kueue (+ its config/ manifests); not by default:
#                             build_node.sh builds it for the node's images
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
cache=${DTR_CACHE:-$HOME/.cache/dtr}
bin="$cache/bin"
work="$cache/build"
mkdir -p "$bin" "$work"
# shellcheck source=goenv.sh
. "$here/goenv.sh"
export CGO_ENABLED=0

log() { printf '[build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
# Seconds since the given start (bash's SECONDS), for the cold-build figures in docs/cluster.md.
took() { echo "$((SECONDS - $1)) s"; }

stamp_ok() { [ -x "$bin/$1" ] && [ "$(cat "$bin/$1.version" 2>/dev/null)" = "$2" ]; }
stamp() { echo "$2" > "$bin/$1.version"; }

build_etcd() {
  stamp_ok etcd "$ETCD_VERSION" && { log "etcd $ETCD_VERSION cached"; return; }
  local d="$work/etcd" t0=$SECONDS; rm -rf "$d"; mkdir -p "$d"
  log "building etcd $ETCD_VERSION"
  cat > "$d/go.mod" <<MOD
module dtr.local/etcd

go 1.26.0
MOD
  cat > "$d/main.go" <<'GO'
// etcd as a plain main, because go install refuses server/v3's replace directives.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  (cd "$d" && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" && go mod tidy \
     && go build -trimpath -ldflags "-s -w" -o "$bin/etcd" .)
  stamp etcd "$ETCD_VERSION"; log "etcd $ETCD_VERSION built in $(took "$t0")"
}

# The k8s.io/kubernetes commands built from one module graph: the control plane's two, and the
# node's three (kubelet, kube-scheduler, kube-proxy, as k3s bundles them). Each is stamped on its
# own, so adding one to this list builds only that one.
K8S_COMMANDS="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy"

k8s_module_dir() {
  # A go.mod that requires k8s.io/kubernetes at the pin, kept while the pin stays (a second
  # call reuses the resolved graph and Go's build cache).
  local d="$work/k8s"
  if [ "$(cat "$d/.version" 2>/dev/null)" = "$K8S_VERSION" ] && [ -f "$d/go.sum" ]; then echo "$d"; return; fi
  rm -rf "$d"; mkdir -p "$d"
  local gomod staging minor c
  gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  # Staging modules are required at v0.0.0 with replaces that a dependant cannot see;
  # each k8s.io/kubernetes vX.Y.Z matches the published vX-1.Y.Z tags of its staging modules.
  staging=$(sed -n 's|^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/src/.*|\1|p' "$gomod")
  minor=${K8S_VERSION#v1.}
  {
    echo "module dtr.local/k8s"; echo; echo "go 1.26.0"; echo
    echo "require k8s.io/kubernetes $K8S_VERSION"; echo
    echo "replace ("
    for m in $staging; do echo "	$m => $m v0.$minor"; done
    echo ")"
  } > "$d/go.mod"
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for c in $K8S_COMMANDS; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
    printf ')\n'
  } > "$d/tools.go"
  (cd "$d" && go mod tidy -e >/dev/null 2>&1 || true
   cd "$d" && go mod download all >/dev/null 2>&1 || true)
  echo "$K8S_VERSION" > "$d/.version"
  echo "$d"
}

build_k8s() {
  local c missing=()
  for c in $K8S_COMMANDS; do stamp_ok "$c" "$K8S_VERSION" || missing+=("$c"); done
  if [ ${#missing[@]} -eq 0 ]; then log "kubernetes $K8S_VERSION cached"; return; fi
  local d t0=$SECONDS
  d=$(k8s_module_dir)
  log "kubernetes $K8S_VERSION modules resolved in $(took "$t0")"
  local minor=${K8S_VERSION#v1.} major=${K8S_VERSION#v}; major=${major%%.*}
  local minor_only=${minor%%.*}
  local ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor_only -X $p.gitTreeState=clean"
  done
  for c in "${missing[@]}"; do
    local t1=$SECONDS
    log "building $c $K8S_VERSION (slow on a cold cache)"
    (cd "$d" && go build -tags tools -trimpath -ldflags "$ld" -o "$bin/$c" "k8s.io/kubernetes/cmd/$c")
    stamp "$c" "$K8S_VERSION"
    log "$c $K8S_VERSION built in $(took "$t1")"
  done
  log "kubernetes $K8S_VERSION built in $(took "$t0")"
}

build_training_operator() {
  if stamp_ok training-operator "$TRAINING_OPERATOR_VERSION"; then
    [ -f "$cache/crds/kubeflow.org_tfjobs.yaml" ] \
      && [ "$(cat "$cache/training-operator/version" 2>/dev/null)" = "$TRAINING_OPERATOR_VERSION" ] \
      || copy_training_operator_manifests
    log "training-operator $TRAINING_OPERATOR_VERSION cached"; return
  fi
  local d="$work/training-operator" t0=$SECONDS; rm -rf "$d"; mkdir -p "$d"
  log "building training-operator $TRAINING_OPERATOR_VERSION"
  local mod=github.com/kubeflow/training-operator
  printf 'module dtr.local/training-operator\n\ngo 1.26.0\n' > "$d/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s/cmd/training-operator.v1"\n' "$mod" > "$d/tools.go"
  (cd "$d" && go get "$mod@$TRAINING_OPERATOR_VERSION" && go mod tidy -e >/dev/null 2>&1 || true
   cd "$d" && go build -trimpath -ldflags "-s -w" -o "$bin/training-operator" "$mod/cmd/training-operator.v1")
  copy_training_operator_manifests
  stamp training-operator "$TRAINING_OPERATOR_VERSION"; log "training-operator $TRAINING_OPERATOR_VERSION built in $(took "$t0")"
}

# Its TFJob CRD (the host-process control plane applies it) and its kustomize manifests (the real
# node installs the standalone overlay from them, as a k3d user does from GitHub).
copy_training_operator_manifests() {
  local src
  src=$(go mod download -json "github.com/kubeflow/training-operator@$TRAINING_OPERATOR_VERSION" \
        | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  mkdir -p "$cache/crds"
  cp "$src/manifests/base/crds/kubeflow.org_tfjobs.yaml" "$cache/crds/"
  chmod u+w "$cache/crds/kubeflow.org_tfjobs.yaml"
  rm -rf "$cache/training-operator"; mkdir -p "$cache/training-operator"
  cp -r "$src/manifests" "$cache/training-operator/"
  chmod -R u+w "$cache/training-operator"
  echo "$TRAINING_OPERATOR_VERSION" > "$cache/training-operator/version"
}

build_kueue() {
  if stamp_ok kueue "$KUEUE_VERSION" && [ "$(cat "$cache/kueue/version" 2>/dev/null)" = "$KUEUE_VERSION" ]; then
    log "kueue $KUEUE_VERSION cached"; return
  fi
  local src t0=$SECONDS
  log "building kueue $KUEUE_VERSION"
  src=$(go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  # In the module's own directory (read-only in Go's cache: -mod=readonly writes nothing), as its Makefile's
  # `build` does; its go.mod has no replace directives.
  (cd "$src" && GOFLAGS="-mod=readonly -gcflags=all=-dwarf=false" go build -trimpath \
     -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" -o "$bin/kueue" ./cmd/kueue)
  # Its kustomize manifests, which devcluster/kueue.py renders and adjusts for the node.
  rm -rf "$cache/kueue"; mkdir -p "$cache/kueue"
  cp -r "$src/config" "$cache/kueue/"
  chmod -R u+w "$cache/kueue"
  echo "$KUEUE_VERSION" > "$cache/kueue/version"
  stamp kueue "$KUEUE_VERSION"; log "kueue $KUEUE_VERSION built in $(took "$t0")"
}

want=${*:-etcd k8s training-operator}
for w in $want; do
  case $w in
    etcd) build_etcd ;;
    k8s) build_k8s ;;
    training-operator) build_training_operator ;;
    kueue) build_kueue ;;
    *) echo "unknown component: $w" >&2; exit 2 ;;
  esac
done
echo "$bin"
