#!/usr/bin/env bash
# The main job, locally: start the local stack, provision it from template.yaml, seed users,
# run one weekly campaign through GetUsers -> CreateEmails -> SendEmail and print the summary.
# Arguments go to `mailctl demo` (e.g. --users 5000 --send-rate 100 --json).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
cargo build --quiet --locked -p mailctl
exec infra/with-local-stack.sh "$ROOT/target/debug/mailctl" demo "$@"
