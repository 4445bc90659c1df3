#!/usr/bin/env bash
# Build what a real Kubernetes node of the local test cluster runs, from Go modules and Debian packages, into
# the same cache as build.sh (${DTR_CACHE:-~/.cache/dtr}). Each piece is rebuilt only when its pin in
# versions.env (or its input here) changes.
#   containerd               containerd, ctr, containerd-shim-runc-v2  github.com/containerd/containerd/v2
#   runc                     runc, static, cgo + seccomp               github.com/opencontainers/runc
#   coredns                  CoreDNS with only the plugins below       github.com/coredns/coredns
#   local-path-provisioner   + its deploy manifest in manifests/       github.com/rancher/local-path-provisioner
#   kube-network-policies    NetworkPolicy enforcement (nftables, NFQUEUE) sigs.k8s.io/kube-network-policies
#   flannel                  (not by default: several nodes only, `make multinode-build`)
#                            flanneld, static, cgo (UDP backend)       github.com/flannel-io/flannel
#                            + CNI plugin flannel in bin/cni/          github.com/containernetworking/plugins
#   seaweedfs                (not by default: `make s3-build`; 6-10 min cold, docs/cluster.md#an-s3-server)
#                            weed, an S3 server (devcluster/s3.py), + its image   github.com/seaweedfs/seaweedfs
#   images                   OCI image tars in images/ for `ctr -n k8s.io images import` (ociimage.py):
#                            pause, coredns, local-path-provisioner, busybox, training-operator, kueue; each rewritten
#                            when its arguments, its files' contents or ociimage.py change
#   check-images             (not by default; root) import and run each image in a throw-away containerd
#                            under /tmp/ocitest, then stop it and remove everything
# Usage: build_node.sh [component ...]    (default: all but flannel and check-images; prints the bin dir)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=versions.env disable=SC1091
. "${here}/versions.env"
: "${CONTAINERD_VERSION:?}" "${RUNC_VERSION:?}" "${COREDNS_VERSION:?}" "${LOCAL_PATH_PROVISIONER_VERSION:?}"
: "${KUBE_NETWORK_POLICIES_VERSION:?}" "${FLANNEL_VERSION:?}" "${FLANNEL_CNI_PLUGINS_VERSION:?}"
: "${TRAINING_OPERATOR_VERSION:?}" "${PAUSE_IMAGE:?}" "${COREDNS_IMAGE:?}" "${BUSYBOX_IMAGE:?}"
: "${LOCAL_PATH_PROVISIONER_IMAGE:?}" "${TRAINING_OPERATOR_IMAGE:?}" "${KUEUE_VERSION:?}" "${KUEUE_IMAGE:?}"
: "${SEAWEEDFS_VERSION:?}" "${SEAWEEDFS_IMAGE:?}"
cache=${DTR_CACHE:-${HOME}/.cache/dtr}
bin="${cache}/bin"
work="${cache}/build"
images="${cache}/images"
manifests="${cache}/manifests"
mkdir -p "${bin}" "${work}" "${images}" "${manifests}"
# shellcheck source-path=SCRIPTDIR source=goenv.sh disable=SC1091
. "${here}/goenv.sh"
py=${DTR_PYTHON:-python3}

# A cluster DNS: the Corefile kubeadm writes, less forward, loop and reload (no upstream DNS here); prometheus
# costs nothing, the kubernetes plugin links it anyway.
# Adding one here rebuilds CoreDNS; names are plugin.cfg's directive names.
COREDNS_PLUGINS="errors health ready kubernetes cache loadbalance log prometheus"

log() { printf '[build-node %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

# The version a binary in bin/ was built at (its stamp), empty when it is missing.
built() {
  [[ -x "${bin}/$1" ]] || return 0
  cat "${bin}/$1.version" 2>/dev/null || true
}
stamp() { echo "$2" > "${bin}/$1.version"; }
# The first 12 hex digits of a file's SHA-256.
sha12() {
  local sum
  sum=$(sha256sum "$1")
  echo "${sum:0:12}"
}

# Debian packages a step needs: installs the missing ones when root, else says which to install.
need_pkgs() {
  local p status missing=()
  for p in "$@"; do
    status=$(dpkg-query -W -f='${Status}' "${p}" 2>/dev/null || true)
    [[ ${status} = *" ok installed" ]] || missing+=("${p}")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  if [[ ${EUID} -ne 0 ]]; then
    echo "build_node.sh needs these Debian packages: ${missing[*]} (apt-get install -y ${missing[*]})" >&2
    exit 1
  fi
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1
  # The lock timeout: make test builds the images (which may install docker.io) at the same time.
  local apt=(apt-get -o DPkg::Lock::Timeout=600)
  if ! "${apt[@]}" install -y -q --no-install-recommends "${missing[@]}" >/dev/null; then
    "${apt[@]}" update -q >/dev/null
    "${apt[@]}" install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# The module cache directory of module $1 at version $2 (downloaded, checksum-verified).
module_dir() {
  local json
  json=$(cd "${work}" && go mod download -json "$1@$2") || { echo "${json}" >&2; exit 1; }
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<< "${json}"
}

# A writable copy of module $1@$2 in $3, built there with its own go.mod and go.sum, so upstream's
# pins and replace directives hold (go install pkg@version refuses replaces; a main package at a
# module's root cannot be imported from a wrapper module).
module_src() {
  local dir
  dir=$(module_dir "$1" "$2")
  rm -rf "$3"
  cp -r "${dir}" "$3"
  chmod -R u+w "$3"
}

build_containerd() {
  local v=${CONTAINERD_VERSION} c have=""
  for c in containerd ctr containerd-shim-runc-v2; do have+="$(built "${c}") "; done
  if [[ ${have} = "${v} ${v} ${v} " ]]; then log "containerd ${v} cached"; return; fi
  local d="${work}/containerd" t0=${SECONDS} pkg=github.com/containerd/containerd/v2
  log "building containerd ${v}"
  module_src "${pkg}" "${v}" "${d}"
  # Pure Go: btrfs (cgo), devmapper and zfs snapshotters left out; the shim without gRPC, as upstream's Makefile.
  local tags="urfave_cli_no_docs no_btrfs no_devmapper no_zfs"
  local ld="-s -w -X ${pkg}/version.Version=${v} -X ${pkg}/version.Package=${pkg}"
  (cd "${d}"
   CGO_ENABLED=0 go build -trimpath -tags "${tags}" -ldflags "${ld}" -o "${bin}/containerd" ./cmd/containerd
   CGO_ENABLED=0 go build -trimpath -tags "${tags}" -ldflags "${ld}" -o "${bin}/ctr" ./cmd/ctr
   CGO_ENABLED=0 go build -trimpath -tags "${tags} no_grpc" -ldflags "${ld}" -o "${bin}/containerd-shim-runc-v2" \
     ./cmd/containerd-shim-runc-v2)
  for c in containerd ctr containerd-shim-runc-v2; do stamp "${c}" "${v}"; done
  rm -rf "${d}"
  log "containerd ${v} built in $((SECONDS - t0)) s"
}

build_runc() {
  local v=${RUNC_VERSION} have
  have=$(built runc)
  if [[ ${have} = "${v}" ]]; then log "runc ${v} cached"; return; fi
  need_pkgs gcc libc6-dev libseccomp-dev pkgconf
  local d="${work}/runc" t0=${SECONDS}
  log "building runc ${v}"
  module_src github.com/opencontainers/runc "${v}" "${d}"
  # Upstream's `make static`, less libpathrs (a Rust library Debian 12 lacks): libseccomp.a linked in.
  (cd "${d}" && CGO_ENABLED=1 go build -trimpath -buildmode=pie -tags "seccomp urfave_cli_no_docs netgo osusergo" \
     -ldflags "-s -w -linkmode external -extldflags -static-pie" -o "${bin}/runc" .)
  stamp runc "${v}"
  rm -rf "${d}"
  log "runc ${v} built in $((SECONDS - t0)) s"
}

build_coredns() {
  local v=${COREDNS_VERSION} key="${COREDNS_VERSION} plugins: ${COREDNS_PLUGINS}" have
  have=$(built coredns)
  if [[ ${have} = "${key}" ]]; then log "coredns ${v} cached"; return; fi
  local d="${work}/coredns" t0=${SECONDS} mod=github.com/coredns/coredns
  log "building coredns ${v} (${COREDNS_PLUGINS})"
  rm -rf "${d}"; mkdir -p "${d}"
  local dir p name path directives="" imports=""
  dir=$(module_dir "${mod}" "${v}")
  # plugin.cfg (name:package) orders the plugins as a query passes them; upstream generates zdirectives.go from it.
  while IFS=: read -r name path; do
    [[ ${name} =~ ^[[:space:]]*(#|$) ]] && continue
    for p in ${COREDNS_PLUGINS}; do
      [[ ${p} = "${name}" ]] || continue
      directives+="	\"${name}\","$'\n'
      [[ ${path} = */* ]] || path="${mod}/plugin/${path}"
      imports+="	_ \"${path}\""$'\n'
    done
  done < "${dir}/plugin.cfg"
  for p in ${COREDNS_PLUGINS}; do
    [[ ${directives} = *"\"${p}\","* ]] || { echo "coredns ${v}: no plugin ${p} in plugin.cfg" >&2; exit 1; }
  done
  printf 'module dtr.local/coredns\n\ngo 1.26.0\n\nrequire %s %s\n' "${mod}" "${v}" > "${d}/go.mod"
  cat > "${d}/main.go" <<GO
// CoreDNS with only the plugins a cluster DNS needs; generated by devcluster/build_node.sh.
// (Upstream's coredns.go imports core/plugin, which links every plugin.)
package main

import (
	"fmt"
	"os"

	"${mod}/core/dnsserver"
	"${mod}/coremain"

${imports})

// In plugin.cfg's order.
var directives = []string{
${directives}}

func main() {
	if err := dnsserver.SetDirectives(directives); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	coremain.Run()
}
GO
  (cd "${d}" && go mod tidy && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${bin}/coredns" .)
  stamp coredns "${key}"
  log "coredns ${v} built in $((SECONDS - t0)) s"
}

build_local_path() {
  local v=${LOCAL_PATH_PROVISIONER_VERSION} have
  have=$(built local-path-provisioner)
  if [[ ${have} = "${v}" ]] && [[ -f "${manifests}/local-path-storage.yaml" ]]; then
    log "local-path-provisioner ${v} cached"; return
  fi
  local d="${work}/local-path-provisioner" t0=${SECONDS}
  log "building local-path-provisioner ${v}"
  module_src github.com/rancher/local-path-provisioner "${v}" "${d}"
  (cd "${d}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.VERSION=${v}" \
     -o "${bin}/local-path-provisioner" .)
  cp "${d}/deploy/local-path-storage.yaml" "${manifests}/local-path-storage.yaml"
  stamp local-path-provisioner "${v}"
  rm -rf "${d}"
  log "local-path-provisioner ${v} built in $((SECONDS - t0)) s"
}

# The node's NetworkPolicy engine, a host process as kube-proxy is (devcluster/node.py), with
# patches/kube-network-policies.patch: upstream's main reads only the in-cluster config (a pod's token at a
# fixed path), the patched one reads $KUBECONFIG (unset: the in-cluster config, as before); and it queues
# packets with iptables' NFQUEUE target (nft_compat), since kernels built without nft_queue (CONFIG_NFT_QUEUE,
# this one) refuse upstream's nftables `queue` rule and with it the whole table.
build_network_policies() {
  local v=${KUBE_NETWORK_POLICIES_VERSION} patch="${here}/patches/kube-network-policies.patch" key have
  key="${v} patch:$(sha12 "${patch}")"
  have=$(built kube-network-policies)
  if [[ ${have} = "${key}" ]]; then log "kube-network-policies ${v} cached"; return; fi
  need_pkgs patch
  local d="${work}/kube-network-policies" t0=${SECONDS}
  log "building kube-network-policies ${v}"
  module_src sigs.k8s.io/kube-network-policies "${v}" "${d}"
  patch -p1 --forward --fuzz=0 --quiet -d "${d}" < "${patch}" \
    || { echo "kube-network-policies ${v}: ${patch} does not apply; update it" >&2; exit 1; }
  (cd "${d}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${bin}/kube-network-policies" ./cmd)
  stamp kube-network-policies "${key}"
  rm -rf "${d}"
  log "kube-network-policies ${v} built in $((SECONDS - t0)) s"
}

# flanneld, with patches/flannel.patch: upstream's main links the tencentvpc backend, whose module
# (tencentcloud-sdk-go/tencentcloud/vpc v1.3.188) the Go module proxy refuses (403; its go.mod is served, so
# go.mod and go.sum stay as they are). As upstream's Makefile on amd64: cgo for the UDP backend, linked
# statically (netgo, osusergo: no glibc NSS in a static binary, as runc).
build_flannel() {
  local v=${FLANNEL_VERSION} patch="${here}/patches/flannel.patch" key have
  key="${v} patch:$(sha12 "${patch}")"
  have=$(built flanneld)
  if [[ ${have} = "${key}" ]]; then log "flanneld ${v} cached"; return; fi
  need_pkgs gcc libc6-dev patch
  local d="${work}/flannel" t0=${SECONDS} mod=github.com/flannel-io/flannel
  log "building flanneld ${v}"
  module_src "${mod}" "${v}" "${d}"
  patch -p1 --forward --fuzz=0 --quiet -d "${d}" < "${patch}" \
    || { echo "flannel ${v}: ${patch} does not apply; update it" >&2; exit 1; }
  (cd "${d}" && CGO_ENABLED=1 go build -trimpath -tags "netgo osusergo" \
     -ldflags "-s -w -X ${mod}/pkg/version.Version=${v} -extldflags -static" -o "${bin}/flanneld" .)
  stamp flanneld "${key}"
  rm -rf "${d}"
  log "flanneld ${v} built in $((SECONDS - t0)) s"
}

# The CNI plugin `flannel` (it writes the bridge's config from flanneld's subnet.env and delegates to bridge and
# host-local, Debian's in /usr/lib/cni), in a directory of its own: bin/cni/, a second CNI bin_dir for containerd.
# From containernetworking/plugins (versions.env says why). Its module zip keeps only vendor/modules.txt (no
# vendored code), which would make go build -mod=vendor if GOFLAGS lost -mod=mod: removed.
build_flannel_cni() {
  local v=${FLANNEL_CNI_PLUGINS_VERSION} have
  have=$(built cni/flannel)
  if [[ ${have} = "${v}" ]]; then log "CNI plugin flannel (plugins ${v}) cached"; return; fi
  local d="${work}/cni-plugins" t0=${SECONDS}
  log "building CNI plugin flannel (plugins ${v})"
  module_src github.com/containernetworking/plugins "${v}" "${d}"
  rm -rf "${d}/vendor"
  mkdir -p "${bin}/cni"
  (cd "${d}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${bin}/cni/flannel" ./plugins/meta/flannel)
  stamp cni/flannel "${v}"
  rm -rf "${d}"
  log "CNI plugin flannel (plugins ${v}) built in $((SECONDS - t0)) s"
}

# SeaweedFS's single binary `weed` (master, volume server, filer and S3 gateway in one), the S3 server of
# devcluster/s3.py, and its image. Pure Go, static (CGO_ENABLED=0), stripped (-s -w: 164 MB, not 233 MB).
build_seaweedfs() {
  local v=${SEAWEEDFS_VERSION} have
  have=$(built weed)
  if [[ ${have} = "${v}" ]]; then
    log "seaweedfs ${v} cached"
  else
    local d="${work}/seaweedfs" t0=${SECONDS} mod=github.com/seaweedfs/seaweedfs
    log "building seaweedfs ${v}"
    module_src "${mod}" "${v}" "${d}"
    # `weed version` names the commit: a pseudo-version's last part.
    (cd "${d}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X ${mod}/weed/util/version.COMMIT=${v##*-}" \
       -o "${bin}/weed" ./weed)
    stamp weed "${v}"
    rm -rf "${d}"
    log "seaweedfs ${v} built in $((SECONDS - t0)) s"
  fi
  # In images/optional/: node.py imports it only for a node with S3 (a second import at every start otherwise).
  mkdir -p "${images}/optional"
  base_files
  image optional/seaweedfs --ref "${SEAWEEDFS_IMAGE}" "${base[@]}" \
    --file "${bin}/weed" /weed 0755 --entrypoint '["/weed"]' --user 65532:65532
}

# image NAME ociimage.py-args...: writes images/NAME.tar unless its stamp (NAME.tar.version) says it was written
# from the same arguments, the same --file contents and the same ociimage.py. The stamp's first word is the reference.
image() {
  local name=$1 t0=${SECONDS} args=("${@:2}") i ref="" h key have out
  h=$(sha12 "${here}/ociimage.py")
  key="ociimage.py:${h}"
  h=$(printf '%s\n' "${args[@]}" | sha256sum)
  key+=" args:${h:0:12}"
  for ((i = 0; i < ${#args[@]} - 1; i++)); do
    case ${args[i]} in
      --ref) ref=${args[i + 1]} ;;
      --file) h=$(sha12 "${args[i + 1]}"); key+=" ${args[i + 2]}:${h}" ;;
      *) ;;
    esac
  done
  key="${ref} ${key}"
  have=$(cat "${images}/${name}.tar.version" 2>/dev/null || true)
  if [[ -f "${images}/${name}.tar" ]] && [[ ${have} = "${key}" ]]; then log "image ${name} cached"; return; fi
  out=$("${py}" "${here}/ociimage.py" --out "${images}/${name}.tar" "${args[@]}")
  echo "${key}" > "${images}/${name}.tar.version"
  log "image ${name}: ${out} in $((SECONDS - t0)) s"
}

# The reference the training-operator's standalone overlay deploys (its kustomize images: name + newTag).
training_operator_upstream_ref() {
  local dir k name tag
  dir=$(module_dir github.com/kubeflow/training-operator "${TRAINING_OPERATOR_VERSION}")
  k="${dir}/manifests/overlays/standalone/kustomization.yaml"
  name=$(sed -n '/^images:/,/^[^ -]/s/^[[:space:]]*-[[:space:]]*name:[[:space:]]*//p' "${k}")
  tag=$(sed -n '/^images:/,/^[^ -]/s/^[[:space:]]*newTag:[[:space:]]*//p' "${k}")
  echo "${name}:${tag}"
}

# distroless's users and groups, and /tmp, for the images upstream builds FROM distroless or alpine: sets base,
# ociimage.py's arguments for them.
# Each file written to a temporary name and renamed: `make s3-build` may run beside the images' build.
base_files() {
  local d="${work}/images"
  mkdir -p "${d}"
  printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
    'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' > "${d}/passwd.$$"
  printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'nonroot:x:65532:' > "${d}/group.$$"
  mv "${d}/passwd.$$" "${d}/passwd"
  mv "${d}/group.$$" "${d}/group"
  base=(--file "${d}/passwd" /etc/passwd 0644 --file "${d}/group" /etc/group 0644 --dir /tmp 1777)
}

build_images() {
  need_pkgs gcc libc6-dev busybox-static
  build_coredns
  build_local_path
  local have upstream
  have=$(built training-operator)
  [[ ${have} = "${TRAINING_OPERATOR_VERSION}" ]] || bash "${here}/build.sh" training-operator >/dev/null
  have=$(built kueue)
  [[ ${have} = "${KUEUE_VERSION}" ]] || bash "${here}/build.sh" kueue >/dev/null
  upstream=$(training_operator_upstream_ref)
  if [[ ${upstream} != "${TRAINING_OPERATOR_IMAGE}" ]]; then
    echo "TRAINING_OPERATOR_IMAGE=${TRAINING_OPERATOR_IMAGE}, but training-operator ${TRAINING_OPERATOR_VERSION}'s" \
      "standalone overlay deploys ${upstream}: update versions.env" >&2
    exit 1
  fi
  local d="${work}/images"
  base_files

  # pause: upstream's image is FROM scratch, /pause, USER 65535:65535.
  local src gcc_version pause_key
  src=$(sha12 "${here}/images/pause.c")
  gcc_version=$(gcc -dumpfullversion)
  pause_key="pause.c:${src} gcc-${gcc_version}"
  have=$(cat "${d}/pause.version" 2>/dev/null || true)
  if [[ ${have} != "${pause_key}" ]] || [[ ! -x "${d}/pause" ]]; then
    gcc -static -O2 -s -o "${d}/pause" "${here}/images/pause.c"
    echo "${pause_key}" > "${d}/pause.version"
  fi
  image pause --ref "${PAUSE_IMAGE}" \
    --file "${d}/pause" /pause 0755 --entrypoint '["/pause"]' --user 65535:65535

  # coredns: as upstream's Dockerfile, distroless nonroot (65532) with cap_net_bind_service on /coredns for :53.
  image coredns --ref "${COREDNS_IMAGE}" "${base[@]}" \
    --file "${bin}/coredns" /coredns 0755 --caps /coredns=net_bind_service \
    --entrypoint '["/coredns"]' --user 65532:65532

  # local-path-provisioner: upstream's is alpine with /usr/bin/local-path-provisioner, CMD by name, as root.
  image local-path-provisioner --ref "${LOCAL_PATH_PROVISIONER_IMAGE}" "${base[@]}" \
    --file "${bin}/local-path-provisioner" /usr/bin/local-path-provisioner 0755 --cmd '["local-path-provisioner"]'

  # busybox, for local-path's helper pods and tests: Debian's static busybox with a /bin link per applet.
  local applets links=() a
  applets=$(/bin/busybox --list)
  for a in ${applets}; do
    [[ ${a} = busybox ]] || links+=(--symlink "/bin/${a}" busybox)
  done
  image busybox --ref "${BUSYBOX_IMAGE}" "${base[@]}" \
    --file /bin/busybox /bin/busybox 0755 "${links[@]}" --cmd '["sh"]'

  # training-operator: as upstream's build/images/training-operator/Dockerfile, distroless static:latest
  # (root), ENTRYPOINT /manager.
  image training-operator --ref "${TRAINING_OPERATOR_IMAGE}" "${base[@]}" \
    --file "${bin}/training-operator" /manager 0755 \
    --entrypoint '["/manager"]'

  # kueue: as upstream's Dockerfile, distroless static:nonroot, USER 65532:65532, ENTRYPOINT /manager.
  image kueue --ref "${KUEUE_IMAGE}" "${base[@]}" \
    --file "${bin}/kueue" /manager 0755 --entrypoint '["/manager"]' --user 65532:65532

  local n ref
  for n in pause coredns local-path-provisioner busybox training-operator kueue; do
    read -r ref _ < "${images}/${n}.tar.version"
    log "$(printf '%-60s %s' "${ref}" "${images}/${n}.tar")"
  done
}

# Everything check_images started: its containerd, mounts under /tmp/ocitest, the directory.
ocitest_cleanup() {
  local t=/tmp/ocitest pid m mounts
  pid=$(cat "${t}/containerd.pid" 2>/dev/null || true)
  if [[ -n ${pid} ]] && kill -0 "${pid}" 2>/dev/null; then
    kill "${pid}"
    for _ in {1..50}; do kill -0 "${pid}" 2>/dev/null || break; sleep 0.2; done
  fi
  mounts=$(findmnt -rn -o TARGET | sort -r || true)
  while IFS= read -r m; do
    [[ ${m} = "${t}"/* ]] && { umount -l "${m}" || true; }
  done <<< "${mounts}"
  rm -rf "${t}"
  for m in /sys/fs/cgroup/*/ocitest; do [[ ! -d ${m} ]] || rmdir "${m}"/* "${m}" 2>/dev/null || true; done
}

# A containerd of our own under /tmp/ocitest (its own root, state and socket; no CRI, no NRI) imports every
# image tar and runs each image once; then it is stopped and everything under /tmp/ocitest unmounted and removed.
# (Each shim's socket is in /run/containerd/s/, named by a hash that includes our socket path; gone with the shim.)
check_images() {
  [[ ${EUID} -eq 0 ]] || { echo "check-images runs containers: root only" >&2; exit 1; }
  local t=/tmp/ocitest
  local sock="${t}/containerd.sock"
  ocitest_cleanup
  trap ocitest_cleanup EXIT
  mkdir -p "${t}"
  cat > "${t}/config.toml" <<TOML
version = 3
root = "${t}/root"
state = "${t}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images",
  "io.containerd.nri.v1.nri"]
[grpc]
  address = "${sock}"
[ttrpc]
  address = "${sock}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "${t}/opt"
TOML
  # The shim and runc are found on PATH: ours first.
  PATH="${bin}:${PATH}" "${bin}/containerd" --config "${t}/config.toml" >"${t}/containerd.log" 2>&1 &
  echo $! > "${t}/containerd.pid"
  for _ in {1..100}; do [[ -S ${sock} ]] && break; sleep 0.1; done
  export CONTAINERD_SUPPRESS_DEPRECATION_WARNINGS=1  # ctr's "cgroup v1 is deprecated" on every call
  local ctr=("${bin}/ctr" -a "${sock}" -n k8s.io) n out
  # runc's state, the FIFOs and the cgroups of our own, not /run/containerd/{runc,fifo} and /k8s.io.
  local run=(run --runc-binary "${bin}/runc" --runc-root "${t}/runc" --fifo-dir "${t}/fifo")
  for n in pause coredns local-path-provisioner busybox training-operator; do
    "${ctr[@]}" images import "${images}/${n}.tar" >/dev/null
  done
  out=$("${ctr[@]}" images ls -q)
  log "imported: ${out//$'\n'/ }"

  out=$("${ctr[@]}" "${run[@]}" --rm --cgroup /ocitest/t1 "${BUSYBOX_IMAGE}" t1 /bin/busybox echo ok)
  [[ ${out} = ok ]] || { echo "busybox: ${out}" >&2; exit 1; }
  out=$("${ctr[@]}" "${run[@]}" --rm --cgroup /ocitest/t2 "${BUSYBOX_IMAGE}" t2 \
    sh -c 'mkdir -p /tmp/a/b && ls -d /tmp/a/b && rm -r /tmp/a && id -u')
  [[ ${out} = $'/tmp/a/b\n0' ]] || { echo "busybox: ${out}" >&2; exit 1; }
  log "busybox: echo ok; sh, mkdir, ls, rm, id ok"

  out=$("${ctr[@]}" "${run[@]}" --rm --cgroup /ocitest/t3 "${COREDNS_IMAGE}" t3 /coredns -version)
  log "coredns: ${out//$'\n'/ }"
  # As uid 65532 it can bind :53 only through the file capability the image puts on /coredns.
  printf '.:53 {\n    errors\n    health 127.0.0.1:8080\n    ready 127.0.0.1:8181\n}\n' > "${t}/Corefile"
  "${ctr[@]}" "${run[@]}" -d --log-uri "file://${t}/coredns.log" \
    --mount "type=bind,src=${t}/Corefile,dst=/etc/coredns/Corefile,options=rbind:ro" \
    --cgroup /ocitest/t4 "${COREDNS_IMAGE}" t4 /coredns -conf /etc/coredns/Corefile >/dev/null
  for _ in {1..50}; do grep -q '^CoreDNS-' "${t}/coredns.log" 2>/dev/null && break; sleep 0.2; done
  sleep 1
  local tasks pid uid capeff
  tasks=$("${ctr[@]}" task ls)
  pid=$(awk '$1 == "t4" && $3 == "RUNNING" {print $2}' <<< "${tasks}")
  [[ -n ${pid} ]] || { echo "coredns is not running:" >&2; cat "${t}/coredns.log" >&2; exit 1; }
  uid=$(awk '/^Uid:/ {print $2}' "/proc/${pid}/status")
  capeff=$(awk '/^CapEff:/ {print $2}' "/proc/${pid}/status")
  [[ ${uid} = 65532 ]] || { echo "coredns runs as uid ${uid}, not 65532" >&2; exit 1; }
  out=$(grep -m1 '^\.:53' "${t}/coredns.log")
  log "coredns: uid ${uid}, CapEff ${capeff}, serving ${out}"
  "${ctr[@]}" task kill -s SIGTERM t4
  for _ in {1..50}; do
    tasks=$("${ctr[@]}" task ls)
    [[ ${tasks} = *$'\n't4*STOPPED* ]] && break
    sleep 0.2
  done
  "${ctr[@]}" task rm t4 >/dev/null
  "${ctr[@]}" container rm t4

  out=$("${ctr[@]}" "${run[@]}" --rm --cgroup /ocitest/t5 "${LOCAL_PATH_PROVISIONER_IMAGE}" t5 \
    local-path-provisioner --version)
  log "local-path-provisioner: ${out}"
  out=$("${ctr[@]}" "${run[@]}" --rm --cgroup /ocitest/t6 "${TRAINING_OPERATOR_IMAGE}" t6 /manager --help 2>&1 \
    || true)
  [[ ${out} = *-enable-scheme* ]] || { echo "training-operator: ${out}" >&2; exit 1; }
  log "training-operator: /manager --help lists -enable-scheme"

  # pause: runs as the sandbox's PID 1, exits 0 on SIGTERM.
  "${ctr[@]}" "${run[@]}" --rm --cgroup /ocitest/t7 "${PAUSE_IMAGE}" t7 >/dev/null 2>&1 &
  local cpid=$! rc=0
  for _ in {1..50}; do
    tasks=$("${ctr[@]}" task ls)
    [[ ${tasks} = *$'\n't7*RUNNING* ]] && break
    sleep 0.2
  done
  [[ ${tasks} = *$'\n't7*RUNNING* ]] || { echo "pause did not start" >&2; exit 1; }
  "${ctr[@]}" task kill -s SIGTERM t7
  wait "${cpid}" || rc=$?
  [[ ${rc} = 0 ]] || { echo "pause exited ${rc} on SIGTERM" >&2; exit 1; }
  log "pause: ran, exit 0 on SIGTERM"
  ocitest_cleanup
  trap - EXIT
  log "every image imported and ran; ${t} removed"
}

# What the node itself runs on the host (devcluster/node.py): the CNI plugins (bridge,
# host-local, portmap in /usr/lib/cni), iptables for kube-proxy and the bridge's FORWARD rule,
# nftables to look at (and remove) kube-network-policies' table.
host_packages() {
  need_pkgs containernetworking-plugins iptables iproute2 nftables
}

want=${*:-host containerd runc coredns local-path-provisioner network-policies images}
for w in ${want}; do
  case ${w} in
    host) host_packages ;;
    containerd) build_containerd ;;
    runc) build_runc ;;
    coredns) build_coredns ;;
    local-path-provisioner) build_local_path ;;
    network-policies) build_network_policies ;;
    flannel) build_flannel; build_flannel_cni ;;
    seaweedfs) build_seaweedfs ;;
    images) build_images ;;
    check-images) check_images ;;
    *) echo "unknown component: ${w}" >&2; exit 2 ;;
  esac
done
echo "${bin}"
