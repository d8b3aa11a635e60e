#!/usr/bin/env bash
# Local stack for mailflow: moto (SQS, DynamoDB, SES v2) and SecantusDB (MongoDB wire protocol),
# both from PyPI, both bound to 127.0.0.1. Idempotent: `start` reuses servers it started before.
#
#   infra/local-stack.sh install # create or update .venv (start does it too)
#   infra/local-stack.sh start   # create .venv if needed, start both servers, wait until healthy
#   infra/local-stack.sh stop    # stop the servers this script started (by pid)
#   infra/local-stack.sh env     # print the environment the code and tests need (eval-able)
#   infra/local-stack.sh status
#
# Ports: MAILFLOW_MOTO_PORT (default 4566), MAILFLOW_MONGO_PORT (default 27027). Pid files and
# logs go to MAILFLOW_STACK_DIR (default .local): a second stack (the test command runs the
# chaos run on one of its own) needs its own directory and ports. MAILFLOW_BIND_HOST (default
# 127.0.0.1) is for infra/sam-local.sh only, which binds the servers to the Docker bridge of a
# network namespace it made itself, so that the function containers can reach them.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STATE="${MAILFLOW_STACK_DIR:-$ROOT/.local}"
MOTO_PORT="${MAILFLOW_MOTO_PORT:-4566}"
MONGO_PORT="${MAILFLOW_MONGO_PORT:-27027}"
HOST="${MAILFLOW_BIND_HOST:-127.0.0.1}"
PYTHON="${PYTHON:-python3}"

log() { echo "local-stack: $*" >&2; }

ensure_venv() {
  local stamp="$VENV/.requirements"
  # Two stacks may start at once: one creates the venv, the other waits for it.
  mkdir -p "$ROOT/.local"
  exec 9>"$ROOT/.local/venv.lock"
  flock 9
  if ! { [[ -x "$VENV/bin/python" ]] && cmp -s "$ROOT/infra/requirements-local.txt" "$stamp"; }; then
    log "creating virtualenv $VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$ROOT/infra/requirements-local.txt"
    cp "$ROOT/infra/requirements-local.txt" "$stamp"
  fi
  flock -u 9
  exec 9>&-
}

# alive NAME: the pid in .local/NAME.pid is a running process.
alive() {
  local pidfile="$STATE/$1.pid"
  [[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

wait_healthy() { # NAME CHECK-COMMAND...
  local name="$1"; shift
  for _ in $(seq 1 150); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    if ! alive "$name"; then
      log "$name exited during start; last log lines:"; tail -n 20 "$STATE/$name.log" >&2 || true
      return 1
    fi
    sleep 0.2
  done
  log "$name did not become healthy within 30s; see $STATE/$name.log"
  return 1
}

moto_healthy() { curl -fsS "http://$HOST:$MOTO_PORT/moto-api/data.json" -o /dev/null; }
mongo_healthy() { port_open "$MONGO_PORT" && grep -q "listening" "$STATE/mongo.log"; }

start_one() { # NAME PORT HEALTH-FN COMMAND...
  local name="$1" port="$2" health="$3"; shift 3
  if alive "$name"; then
    wait_healthy "$name" "$health"
    return
  fi
  if port_open "$port"; then
    log "port $HOST:$port is taken by a process this script did not start; set MAILFLOW_${name^^}_PORT to a free port"
    return 1
  fi
  log "starting $name on $HOST:$port"
  nohup "$@" >"$STATE/$name.log" 2>&1 &
  echo $! >"$STATE/$name.pid"
  wait_healthy "$name" "$health"
}

stop_one() {
  local name="$1" pidfile="$STATE/$1.pid"
  if alive "$name"; then
    local pid cpu; pid="$(cat "$pidfile")"
    # Its CPU time (user + system): which server a slow run waited on.
    cpu=$(awk -v hz="$(getconf CLK_TCK)" '{sub(/^.*\) /, ""); printf "%.0f", ($12 + $13) / hz}' "/proc/$pid/stat" 2>/dev/null || echo "?")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    log "stopped $name (pid $pid, $cpu CPU seconds)"
  fi
  rm -f "$pidfile"
}

print_env() {
  cat <<ENV
export AWS_ENDPOINT_URL=http://$HOST:$MOTO_PORT
export AWS_REGION=\${AWS_REGION:-us-east-1}
export AWS_ACCESS_KEY_ID=test
export AWS_SECRET_ACCESS_KEY=test
export MONGODB_URI=mongodb://$HOST:$MONGO_PORT/?directConnection=true
ENV
  # Quoted: a clone in a folder whose path has a space still evaluates.
  printf 'export MAILFLOW_SECANTUSD=%q\n' "$VENV/bin/secantusd-py"
}

case "${1:-}" in
  start)
    mkdir -p "$STATE"
    ensure_venv
    # moto_server.py: moto with fixes for atomic conditional writes, deep queues and keep-alive (see the file).
    start_one moto "$MOTO_PORT" moto_healthy "$VENV/bin/python" "$ROOT/infra/moto_server.py" -H "$HOST" -p "$MOTO_PORT"
    start_one mongo "$MONGO_PORT" mongo_healthy "$VENV/bin/secantusd-py" --host "$HOST" --port "$MONGO_PORT" --storage-path :memory:
    ;;
  install) ensure_venv ;;
  stop) stop_one moto; stop_one mongo ;;
  env) print_env ;;
  status)
    for n in moto mongo; do if alive "$n"; then echo "$n: running (pid $(cat "$STATE/$n.pid"))"; else echo "$n: stopped"; fi; done ;;
  *) echo "usage: $0 install|start|stop|env|status" >&2; exit 2 ;;
esac
