#!/usr/bin/env bash
# Every check and test: formatting, template validation, clippy, unit tests, the tests
# against the local stack (moto + SecantusDB on 127.0.0.1, started and stopped here; sent
# emails opened in headless Chromium, installed by infra/browser.sh), and every
# function with every sample event through `sam local invoke` (infra/sam-local.sh, which
# starts and removes its own Docker engine when the machine has none). CI runs exactly this.
#
# The 5,000-user chaos run (tests/chaos.rs) takes most of the time and leaves a core partly
# idle while it waits on timeouts, so it starts as soon as everything is built, on a local
# stack of its own (its deep queues would slow the other tests), and the other checks and
# tests run beside it. Both always run to the end; the script fails if either failed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
cargo fmt --all -- --check
# Everything the tests run, debug (the release build is infra/bench.sh's): the test binaries,
# mailctl (tests/cli.rs, the chaos run) and the functions (tests/runtime_api.rs).
cargo build --workspace --all-targets --locked

mkdir -p .local
# Headless Chromium and playwright-core for the browser tests (tests/open_content.rs).
eval "$(infra/browser.sh)"

chaos_log=.local/chaos-test.log
MAILFLOW_STACK_DIR="$ROOT/.local/chaos" MAILFLOW_MOTO_PORT="${MAILFLOW_CHAOS_MOTO_PORT:-4567}" \
  MAILFLOW_MONGO_PORT="${MAILFLOW_CHAOS_MONGO_PORT:-27028}" \
  infra/with-local-stack.sh cargo test --locked -p mailflow-tests --test integration -- --ignored chaos:: \
  >"$chaos_log" 2>&1 &
chaos=$!
echo "test: the chaos run started beside the other tests; its output: $chaos_log" >&2

rest=0
{
  infra/validate-template.sh &&
    # Its own target directory: clippy checks rather than builds, so it shares no artifacts
    # with the build above, and it must not hold the build lock the chaos run may need.
    cargo clippy --workspace --all-targets --locked --target-dir target/clippy -- -D warnings &&
    infra/with-local-stack.sh cargo test --workspace --locked &&
    infra/sam-local.sh test
} || rest=$?

chaos_status=0
wait "$chaos" || chaos_status=$?
echo "--- the chaos run (tests/chaos.rs), exit status $chaos_status:" >&2
if [[ $chaos_status == 0 ]]; then grep -E "^test |test result" "$chaos_log" >&2; else tail -n 200 "$chaos_log" >&2; fi
if [[ $rest != 0 || $chaos_status != 0 ]]; then
  echo "test: FAILED (checks and tests: exit $rest; chaos run: exit $chaos_status)" >&2
  exit 1
fi
echo "test: everything passed" >&2
