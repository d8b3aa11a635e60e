#!/usr/bin/env bash
# `sam local invoke` of template.yaml's functions against the local stack, on any Linux machine:
#
#   infra/sam-local.sh invoke FUNCTION EVENT   # e.g. GetUsersFunction infra/events/manual-run.json
#   infra/sam-local.sh test                    # every function with every sample event, checked
#   infra/sam-local.sh install                 # only install what the two above need
#
# It installs what is missing (idempotently): the SAM CLI (pinned, in .venv-tools), the
# functions (cargo, for this machine, laid out as `sam build` lays them out: infra/sam-build.py;
# MAILFLOW_SAM_BUILD_DIR=.aws-sam/build uses what your own `sam build` made instead) and, when
# no Docker engine answers, Debian's docker.io. With a Docker engine of yours it uses it and
# SAM pulls the ordinary Lambda images. Without one (CI) it runs its own dockerd inside a
# network namespace it creates (Docker's bridge is a private-range network, which must not exist
# outside it), with the stack and the command inside the same namespace, and a Lambda base image
# made locally (no image can be pulled there). The local stack binds to the Docker bridge's
# gateway, where the function containers reach it. Everything it starts (the stack, dockerd,
# containers, the namespace) it stops and removes on exit, by pid.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
WORK="$ROOT/.local/sam"
VENV="$ROOT/.venv-tools"

log() { echo "sam-local: $*" >&2; }
usage() { echo "usage: $0 invoke FUNCTION EVENT_FILE | test | install" >&2; exit 2; }

mode="${1:-}"
case "$mode" in
  invoke) [[ $# == 3 ]] || usage ;;
  test | install) [[ $# == 1 ]] || usage ;;
  *) usage ;;
esac

case "$(uname -m)" in
  x86_64) ARCH=x86_64 ;;
  aarch64) ARCH=arm64 ;;
  *) log "unsupported machine $(uname -m): Lambda runs x86_64 and arm64"; exit 1 ;;
esac
BASE_IMAGE="public.ecr.aws/lambda/provided:al2023-$ARCH"

# Debian's docker.io, when no Docker engine answers (then this script runs its own).
install_docker() {
  if ! command -v dockerd >/dev/null || [[ ! -x /usr/bin/docker ]]; then
    log "installing Debian's docker.io"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends docker.io >/dev/null ||
      { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends docker.io >/dev/null; }
  fi
}

mkdir -p "$WORK"
infra/tools-venv.sh
if [[ "$mode" == install ]]; then
  if [[ -z "${MAILFLOW_SAM_OWN_DOCKER:-}" ]] && docker info >/dev/null 2>&1; then exit 0; fi
  if [[ $EUID == 0 ]]; then install_docker; fi
  exit 0
fi
# mailctl, the functions and the tests (debug, every target as infra/test.sh builds them, so
# nothing is rebuilt): inside the namespace there is no registry to fetch from.
source infra/build-env.sh
cargo build --quiet --locked --workspace --all-targets
if [[ -n "${MAILFLOW_SAM_BUILD_DIR:-}" ]]; then
  # What your own `sam build` made (.aws-sam/build), used as it is.
  BUILD="$(cd "$MAILFLOW_SAM_BUILD_DIR" && pwd)"
  log "using the functions in $BUILD"
else
  # The debug binaries laid out as `sam build` lays them out (see infra/sam-build.py).
  BUILD="$WORK/build"
  "$VENV/bin/python" infra/sam-build.py template.yaml target/debug "$BUILD"
fi

NS=""
DOCKERD_PID=""
STACK_STARTED=""
cleanup() {
  local status=$?
  set +e
  trap '' INT TERM # a second signal must not cut the cleanup short
  if [[ -n "$NS" ]]; then
    # Every container here is ours: this dockerd serves no one else.
    docker ps -aq 2>/dev/null | xargs -r docker rm -f >/dev/null 2>&1
  fi
  [[ -n "$STACK_STARTED" ]] && in_ns infra/local-stack.sh stop 2>/dev/null
  if [[ -n "$DOCKERD_PID" ]]; then
    kill "$DOCKERD_PID" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$DOCKERD_PID" 2>/dev/null
    log "stopped dockerd (pid $DOCKERD_PID)"
  fi
  if [[ -n "$NS" ]]; then
    # Anything still in the namespace was started by this script (nothing else enters it).
    for pid in $(ip netns pids "$NS" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
    ip netns delete "$NS" 2>/dev/null && log "deleted network namespace $NS"
  fi
  exit "$status"
}
trap cleanup EXIT
# A signal ends the script through `exit`, so that the cleanup above runs then too.
trap 'exit 130' INT TERM

in_ns() {
  if [[ -n "$NS" ]]; then nsenter --net="/var/run/netns/$NS" "$@"; else "$@"; fi
}

if [[ -z "${MAILFLOW_SAM_OWN_DOCKER:-}" ]] && docker info >/dev/null 2>&1; then
  # A Docker engine of yours: SAM uses it as usual and pulls the Lambda images.
  GATEWAY="$(docker network inspect bridge --format '{{(index .IPAM.Config 0).Gateway}}')"
  SKIP_PULL=0
  log "using your Docker engine; the local stack listens on its bridge, $GATEWAY"
else
  if [[ $EUID != 0 ]]; then
    log "no Docker engine answers, and starting one in a network namespace needs root: start Docker, or run this as root"
    exit 1
  fi
  install_docker
  # The engine's own client (a newer one elsewhere on PATH may not speak to it).
  docker() { /usr/bin/docker "$@"; }
  NS="mailflow-sam-$$"
  GATEWAY=172.31.254.1
  ip netns add "$NS"
  ip -n "$NS" link set lo up
  log "created network namespace $NS"
  mkdir -p "$WORK/docker"
  export DOCKER_HOST="unix://$WORK/docker/docker.sock"
  # nsenter rather than `ip netns exec`, which hides the cgroup mounts dockerd needs.
  setsid nsenter --net="/var/run/netns/$NS" dockerd \
    --host "$DOCKER_HOST" --pidfile "$WORK/docker/dockerd.pid" \
    --data-root "$WORK/docker/data" --exec-root "$WORK/docker/exec" \
    --bip "$GATEWAY/24" --storage-driver vfs >"$WORK/docker/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  for _ in $(seq 1 150); do docker info >/dev/null 2>&1 && break; sleep 0.2; done
  docker info >/dev/null 2>&1 || { log "dockerd did not start; see $WORK/docker/dockerd.log"; tail -n 20 "$WORK/docker/dockerd.log" >&2; exit 1; }
  log "started dockerd (pid $DOCKERD_PID) in $NS"

  # No registry is reachable from the namespace: the base image is made here, from this
  # machine's files. The functions are Rust binaries linked to glibc; SAM's own layer on top
  # needs sh, mv and chmod; the AWS SDK needs CA certificates (it refuses to start without).
  # Made again whenever the functions need other libraries than the image holds.
  files=(/bin/sh /bin/mv /bin/chmod /bin/cp /bin/rm)
  libs="$(for f in "${files[@]}" "$BUILD"/*/bootstrap; do ldd "$f" | grep -o '/[^ ]*'; done | sort -u)"
  if ! { docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 &&
         [[ "$libs" == "$(cat "$WORK/docker/base-image-libs" 2>/dev/null)" ]]; }; then
    log "making $BASE_IMAGE locally (no image can be pulled here)"
    rootfs="$WORK/rootfs"
    rm -rf "$rootfs"
    mkdir -p "$rootfs/tmp" "$rootfs/var/task" "$rootfs/var/runtime" "$rootfs/opt" \
      "$rootfs/etc/ssl/certs" "$rootfs/etc/pki/tls/certs"
    for file in "${files[@]}" $libs; do cp --parents -L "$file" "$rootfs/"; done
    cp -L /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
    cp -L /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/pki/tls/certs/ca-bundle.crt"
    tar -C "$rootfs" -c . | docker import --change 'WORKDIR /var/task' \
      --change 'ENV LAMBDA_TASK_ROOT=/var/task' --change 'ENV LAMBDA_RUNTIME_DIR=/var/runtime' \
      - "$BASE_IMAGE" >/dev/null
    echo "$libs" >"$WORK/docker/base-image-libs"
    # SAM's image with its emulator was built on the old base: have it built again.
    docker image rm -f "public.ecr.aws/lambda/provided:al2023-rapid-$ARCH" >/dev/null 2>&1 || true
  fi
  SKIP_PULL=1
fi

export MAILFLOW_STACK_DIR="$WORK/stack" MAILFLOW_BIND_HOST="$GATEWAY"
STACK_STARTED=1
in_ns infra/local-stack.sh start
eval "$(infra/local-stack.sh env)"
export AWS_DEFAULT_REGION="$AWS_REGION"
export MAILFLOW_SAM_CLI="$VENV/bin/sam" MAILFLOW_SAM_TEMPLATE="$BUILD/template.yaml" \
  MAILFLOW_SAM_SKIP_PULL="$SKIP_PULL" SAM_CLI_TELEMETRY=0

case "$mode" in
  test)
    in_ns cargo test --quiet --locked --workspace --test integration -- \
      --ignored --test-threads=1 runtime_api::sam_local
    ;;
  invoke)
    in_ns target/debug/mailctl sam-invoke --prefix sam "$2" "$3"
    ;;
esac
