#!/usr/bin/env bash
# Tear down what deploy/k3d/up.sh made: delete the k3d cluster.
# The host volume directory (the trained models) stays unless --purge is given.
set -euo pipefail

readonly CLUSTER="${DTR_CLUSTER:-dtr}"
readonly HOST_DIR="${DTR_HOST_DIR:-${HOME}/.dtr/k3d/${CLUSTER}}"
readonly NODE_STORAGE="/var/lib/rancher/k3s/storage"

purge=0
case "${1:-}" in
  "") ;;
  --purge) purge=1 ;;
  *) printf 'usage: %s [--purge]   (--purge also deletes %s)\n' "$0" "${HOST_DIR}" >&2; exit 2 ;;
esac

command -v k3d >/dev/null 2>&1 || { echo "error: k3d not found on PATH" >&2; exit 1; }

if k3d cluster get "${CLUSTER}" >/dev/null 2>&1; then
  if ((purge)); then
    # The pods wrote the volume as their own (non-root) user; the node runs as
    # root, so it can empty the mounted directory whoever owns the files.
    docker exec "k3d-${CLUSTER}-server-0" sh -c "rm -rf ${NODE_STORAGE:?}/*" || true
  fi
  k3d cluster delete "${CLUSTER}"
else
  echo "no k3d cluster named ${CLUSTER}; nothing to delete"
fi

if ((purge)); then
  rm -rf -- "${HOST_DIR}"
  echo "removed ${HOST_DIR}"
else
  echo "kept ${HOST_DIR} (the run volumes and models); '$0 --purge' removes it"
fi
