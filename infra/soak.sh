#!/usr/bin/env bash
# The soak: the chaos run at full size, before a release rather than on every change (the
# test command runs it at its smallest, tests/chaos.rs). 5,000 users by default, a local-time
# campaign released slot by slot while every fault plays at once, with the default fault
# shares; it prints the report and exits non-zero on any violation (a lost user, an email
# beyond the one window no key closes, a panic). Figures: docs/reliability.md.
#
#   infra/soak.sh                 # 5,000 users
#   infra/soak.sh --users 20000   # any `mailctl chaos` option (target/debug/mailctl chaos --help)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# Every target, as the test command builds them (features resolve the same: no rebuild).
source infra/build-env.sh
cargo build --quiet --locked --workspace --all-targets
args=("$@")
[[ " $* " == *" --users "* ]] || args=(--users 5000 "${args[@]}")
export MAILFLOW_STACK_DIR="$ROOT/.local/soak" MAILFLOW_MOTO_PORT="${MAILFLOW_SOAK_MOTO_PORT:-4568}" \
  MAILFLOW_MONGO_PORT="${MAILFLOW_SOAK_MONGO_PORT:-27029}"
exec infra/with-local-stack.sh "$ROOT/target/debug/mailctl" chaos --local-time --max-seconds 7200 \
  "${args[@]}"
