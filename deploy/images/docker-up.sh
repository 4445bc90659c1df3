#!/usr/bin/env bash
# Make sure a Docker engine answers `docker info` (make docker-up).
#   - already answering: print its version and exit (well under a second);
#   - else, not on Linux (macOS: Docker Desktop, colima): exit 1 with one line saying to start it;
#   - else, as root: install docker.io if dockerd is missing and CI=true or DTR_INSTALL=1,
#     start dockerd in the background (log and pidfile in ${DTR_STATE:-.dtr}/docker/),
#     wait up to DTR_DOCKER_TIMEOUT (60) seconds for it to answer;
#   - else: exit 1 with one line saying what to do.
# The engine keeps running after this script; stop it with: kill "$(cat .dtr/docker/dockerd.pid)".
set -euo pipefail

# shellcheck source=deploy/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

readonly DOCKER_STATE="${STATE}/docker"
readonly LOG="${DOCKER_STATE}/dockerd.log"
readonly PIDFILE="${DOCKER_STATE}/dockerd.pid"
readonly TIMEOUT="${DTR_DOCKER_TIMEOUT:-60}"

report() {
  local versions
  versions="$(docker version --format 'client {{.Client.Version}} (API {{.Client.APIVersion}}), engine {{.Server.Version}} (API {{.Server.APIVersion}})')" ||
    die "'docker info' works but 'docker version' does not: the client and the engine disagree on the API (try DOCKER_API_VERSION=1.41, or /usr/bin/docker)"
  echo "Docker engine answers: ${versions}"
}

# The client is needed either way (docker.io ships both it and dockerd).
need_packages docker:docker.io

# shellcheck disable=SC2310 # with_timeout's status is its command's: set -e inside it changes nothing
if with_timeout 20 docker info >/dev/null 2>&1; then
  report
  exit 0
fi

# Starting dockerd (setsid, the docker.io package) is Linux's; elsewhere the engine is an app's to start.
os="$(uname -s)"
[[ "${os}" == Linux ]] ||
  die "the Docker engine is not reachable ('docker info' failed): start Docker Desktop (or colima start), wait until 'docker info' answers, and run this again"

((EUID == 0)) ||
  die "the Docker engine is not reachable ('docker info' failed) and only root can start it: start it (sudo systemctl start docker, or sudo make docker-up), or check you may use its socket (the docker group)"
need_packages dockerd:docker.io

# A dockerd that is starting already (ours, or one with the default pidfile): wait for it.
pid=""
for file in "${PIDFILE}" /var/run/docker.pid; do
  if [[ -s "${file}" ]]; then
    pid="$(<"${file}")"
    if [[ "${pid}" =~ ^[0-9]+$ ]] && kill -0 "${pid}" 2>/dev/null; then break; fi
    pid=""
  fi
done
if [[ -n "${pid}" ]]; then
  echo "dockerd (pid ${pid}) is running but not answering yet; waiting"
else
  mkdir -p "${DOCKER_STATE}"
  echo "starting dockerd (log: ${LOG})"
  now="$(date +%Y-%m-%dT%H:%M:%S%z)"
  printf '\n=== %s docker-up.sh starts dockerd\n' "${now}" >>"${LOG}"
  # Its own session, so that neither make's exit nor a Ctrl-C in this terminal stops the engine.
  setsid dockerd --pidfile "${PIDFILE}" >>"${LOG}" 2>&1 </dev/null &
  pid=$!  # setsid execs dockerd in place (a background job is no process group leader)
fi

start=${SECONDS}
# shellcheck disable=SC2310 # with_timeout's status is its command's: set -e inside it changes nothing
until with_timeout 20 docker info >/dev/null 2>&1; do
  if ! kill -0 "${pid}" 2>/dev/null; then
    tail -n 20 "${LOG}" >&2 || true
    die "dockerd (pid ${pid}) exited; its log is ${LOG} (last lines above)"
  fi
  if ((SECONDS - start >= TIMEOUT)); then
    tail -n 20 "${LOG}" >&2 || true
    die "dockerd did not answer 'docker info' within ${TIMEOUT}s; its log is ${LOG} (last lines above)"
  fi
  sleep 1
done
echo "dockerd answered after $((SECONDS - start))s"
report
