#!/usr/bin/env bash
# The main job, locally: start the local stack, provision it from template.yaml, seed users,
# run one weekly campaign through GetUsers -> CreateEmails -> SendEmail and print the summary.
# Arguments go to `mailctl demo` (e.g. --users 5000 --send-rate 100 --json).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
echo "demo: building mailctl, the operator tool that runs the demo (about 7 minutes on a fresh clone, seconds after)" >&2
cargo build --locked -p mailctl
echo "demo: starting the local stack (moto and SecantusDB on 127.0.0.1; the first time, their virtualenv: about a minute)" >&2
exec infra/with-local-stack.sh "$ROOT/target/debug/mailctl" demo "$@"
