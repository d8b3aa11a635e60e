#!/usr/bin/env bash
# The main job, locally: start the local stack, provision it from template.yaml, seed users,
# run one weekly campaign through GetUsers -> CreateEmails -> SendEmail, print the summary and
# write the campaign's report page (target/demo/report.html).
# Arguments go to `mailctl demo` (e.g. --users 5000 --send-rate 100 --json).
# `--example orders` runs the orders example definition instead (campaigns/orders): its
# customers and orders seeded as `mailctl seed --orders` seeds them, the folder pushed, its
# campaign run, the same summary and report.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
mkdir -p target/demo
log="$ROOT/target/demo/build.log"
echo "demo: building mailctl, the operator tool that runs the demo (about 7 minutes on a fresh clone, seconds after; output in target/demo/build.log)" >&2
if ! cargo build --locked --quiet -p mailctl >"$log" 2>&1; then
  cat "$log" >&2
  echo "demo: the build failed (above)" >&2
  exit 1
fi
echo "demo: starting the local stack (moto and SecantusDB on 127.0.0.1; the first time, their virtualenv: about a minute)" >&2
exec infra/with-local-stack.sh "${CARGO_TARGET_DIR:-$ROOT/target}/debug/mailctl" demo --report "$ROOT/target/demo/report.html" "$@"
