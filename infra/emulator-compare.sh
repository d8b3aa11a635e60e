#!/usr/bin/env bash
# moto against an alternative from the package registries, on our own hottest workload: the
# sends table's writes as SendEmail makes them (infra/emulator_compare.py: the claim, SENT,
# a second delivery's refused claim; eight at a time), against moto as the tests run it
# (infra/moto_server.py) and against dynalite (the npm registry's DynamoDB emulator, pinned,
# in memory). Each run starts its server afresh on 127.0.0.1 and stops it by pid, and prints
# the requests per second and the CPU seconds the server used. Then it tries the stack's own
# provisioning against dynalite (`mailctl bench`), which moto serves.
#
#   infra/emulator-compare.sh [USERS] [RUNS]     # defaults: 2000 users, 3 runs of each
#
# docs/local-stack.md has the figures and what they decided.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
users="${1:-2000}"
runs="${2:-3}"
DYNALITE_VERSION=3.2.2
emulators="$ROOT/.local/emulators"

source infra/build-env.sh
cargo build --workspace --bins --locked
infra/local-stack.sh install
if [[ ! -x "$emulators/node_modules/.bin/dynalite" ]] ||
  ! grep -q "\"version\": \"$DYNALITE_VERSION\"" "$emulators/node_modules/dynalite/package.json"; then
  command -v npm >/dev/null || { echo "emulator-compare: npm not found (Debian: apt-get install npm)" >&2; exit 1; }
  mkdir -p "$emulators"
  npm install --prefix "$emulators" --no-audit --no-fund --save-exact "dynalite@$DYNALITE_VERSION" >&2
fi

# CPU seconds (user + system) a process has used so far.
cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"; }

stack_dir="$ROOT/.local/compare"
moto_port=4590 mongo_port=27040 dynalite_port=4591
dynalite_pid=
stop_dynalite() {
  if [[ -n $dynalite_pid ]]; then kill "$dynalite_pid" 2>/dev/null || true; wait "$dynalite_pid" 2>/dev/null || true; fi
  dynalite_pid=
}
# Whatever fails, what this script started is stopped (by pid).
trap 'stop_dynalite; MAILFLOW_STACK_DIR="$stack_dir" infra/local-stack.sh stop >/dev/null 2>&1 || true' EXIT

one_run() { # $1: moto | dynalite
  local emulator=$1 pid endpoint
  export MAILFLOW_STACK_DIR="$stack_dir" MAILFLOW_MOTO_PORT=$moto_port MAILFLOW_MONGO_PORT=$mongo_port
  if [[ $emulator == moto ]]; then
    infra/local-stack.sh start >&2
    pid="$(cat "$stack_dir/moto.pid")" endpoint="http://127.0.0.1:$moto_port"
  else
    start_dynalite
    pid=$dynalite_pid endpoint="http://127.0.0.1:$dynalite_port"
  fi
  local before result
  before="$(cpu_seconds "$pid")"
  result="$(.venv/bin/python infra/emulator_compare.py "$endpoint" "$users")"
  local cpu; cpu="$(awk -v a="$before" -v b="$(cpu_seconds "$pid")" 'BEGIN{printf "%.1f", b-a}')"
  if [[ $emulator == moto ]]; then infra/local-stack.sh stop >&2; else stop_dynalite; fi
  echo "$emulator: $result, server CPU $cpu s"
}

start_dynalite() {
  # In memory; bound to 127.0.0.1 only (its own CLI listens on every interface).
  node -e "require('$emulators/node_modules/dynalite')({createTableMs: 0, deleteTableMs: 0, updateTableMs: 0}).listen($dynalite_port, '127.0.0.1')" &
  dynalite_pid=$!
  for _ in $(seq 1 50); do (echo >/dev/tcp/127.0.0.1/$dynalite_port) 2>/dev/null && return; sleep 0.1; done
  echo "emulator-compare: dynalite did not start" >&2
  exit 1
}

for _ in $(seq 1 "$runs"); do
  one_run moto
  one_run dynalite
done

# The stack itself on dynalite: DynamoDB there (AWS_ENDPOINT_URL_DYNAMODB), the rest on moto.
export MAILFLOW_STACK_DIR="$stack_dir" MAILFLOW_MOTO_PORT=$moto_port MAILFLOW_MONGO_PORT=$mongo_port
infra/local-stack.sh start >&2
eval "$(infra/local-stack.sh env)"
start_dynalite
if AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:$dynalite_port" \
  target/debug/mailctl bench --users 50 --bin-dir target/debug --json >/dev/null 2>"$stack_dir/stack-on-dynalite.log"; then
  echo "the stack on dynalite: provisioned and ran"
else
  echo "the stack on dynalite: $(grep -v '^\s*$' "$stack_dir/stack-on-dynalite.log" | tail -n 1)"
fi
stop_dynalite
infra/local-stack.sh stop >&2
