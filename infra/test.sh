#!/usr/bin/env bash
# Every check and test: formatting, clippy, template validation, unit tests, the tests
# against the local stack (moto + SecantusDB on 127.0.0.1, started and stopped here; sent
# emails and pages opened in headless Chromium, installed by infra/browser.sh), the chaos
# run, and every function with every sample event through `sam local invoke`
# (infra/sam-local.sh, which starts and removes its own Docker engine when the machine has
# none). CI runs exactly this; docs/testing.md says how to run one area, docs/test-times.md
# how long each part takes.
#
# Where the time goes and why it is arranged so (two cores):
# - What the tests need besides cargo (the virtualenvs, Chromium, docker.io) is installed
#   while cargo builds: those are mostly downloads.
# - Clippy lints the workspace as part of the one build (clippy-driver wraps rustc for the
#   workspace's own crates, as `cargo clippy` does), so no second compilation of the
#   dependencies is needed for it. The same variables stay set for the whole script, so the
#   tests' own `cargo build` calls find everything built.
# - The tests run under cargo-nextest in two shards, each on a local stack of its own (one
#   moto is one Python thread), several tests at once in each (most of their time is spent
#   waiting on queues, leases and timeouts), beside the chaos run on a third stack and
#   `sam local invoke` in its own network namespace. (Starting all the slowest tests first
#   was tried: they then all ran at once and each took twice as long; only the three longest
#   start early, by their priority in .config/nextest.toml.) The chaos run here is
#   the smallest that still meets every fault; the 5,000-user run is infra/soak.sh.
# - At the end: how long each phase took and the slowest tests.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
mkdir -p .local
timings=.local/test-phases.txt
: >"$timings"
# This run's logs only (the failures are read back from them at the end).
rm -f .local/shard1-test.log .local/shard2-test.log .local/sam-local-test.log .local/chaos-test.log \
  target/nextest/shard1/junit.xml target/nextest/shard2/junit.xml
SECONDS=0
# Each phase's end, and how busy both cores were since the previous one (from /proc/stat):
# a phase near 100% is bound by CPU, one well below it by waiting.
# (%.0f: mawk prints a large sum in %.6g otherwise.)
cpu_ticks() { awk '/^cpu /{printf "%.0f %.0f\n", $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }
cpu_mark=$(cpu_ticks)
phase() {
  local now busy
  now=$(cpu_ticks)
  busy=$(awk -v a="$cpu_mark" -v b="$now" 'BEGIN{split(a,x," "); split(b,y," "); d=y[2]-x[2]; printf "%3d", (d > 0 ? 100 * (y[1] - x[1]) / d : 0)}')
  cpu_mark=$now
  printf '%-34s ends at %5d s, CPU %s%% busy\n' "$1" "$SECONDS" "$busy" | tee -a "$timings" >&2
}

cargo fmt --all -- --check

# Installs, beside the build.
(
  infra/tools-venv.sh
  infra/local-stack.sh install
  infra/browser.sh >.local/browser.env
  infra/sam-local.sh install
) >.local/test-setup.log 2>&1 &
setup=$!

# The build, linted: clippy's lints, warnings as errors, on the workspace's crates.
source infra/build-env.sh
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "cargo-nextest not found: this machine kind ships it; elsewhere: cargo install cargo-nextest --locked" >&2
  exit 1
fi
cargo build --workspace --all-targets --locked
phase "build (clippy included)"
if ! wait "$setup"; then
  echo "test: installing what the tests need failed:" >&2
  tail -n 40 .local/test-setup.log >&2
  exit 1
fi
eval "$(cat .local/browser.env)"
phase "installs (beside the build)"

chaos_log=.local/chaos-test.log
(
  MAILFLOW_STACK_DIR="$ROOT/.local/chaos" MAILFLOW_MOTO_PORT="${MAILFLOW_CHAOS_MOTO_PORT:-4567}" \
    MAILFLOW_MONGO_PORT="${MAILFLOW_CHAOS_MONGO_PORT:-27028}" \
    infra/with-local-stack.sh cargo test --locked --workspace --test integration -- \
    --ignored chaos::
) >"$chaos_log" 2>&1 &
chaos=$!
echo "test: the chaos run started beside the other tests; its output: $chaos_log" >&2

# shard N: the tests of shard N of 2 (every other test, in order), on a stack of its own.
shard() {
  MAILFLOW_STACK_DIR="$ROOT/.local/shard$1" MAILFLOW_MOTO_PORT="$((4570 + $1))" \
    MAILFLOW_MONGO_PORT="$((27030 + $1))" infra/with-local-stack.sh \
    cargo nextest run --workspace --locked --no-fail-fast --profile "shard$1" --partition "count:$1/2"
}

rest=0
{
  infra/validate-template.sh && phase "template validation" &&
    {
      # sam local invoke beside the tests: mostly waiting on containers, in its own network
      # namespace with a stack of its own.
      sam_log=.local/sam-local-test.log
      infra/sam-local.sh test >"$sam_log" 2>&1 &
      sam=$!
      shard2_log=.local/shard2-test.log
      shard 2 >"$shard2_log" 2>&1 &
      shard2=$!
      shard1_status=0
      shard 1 2>&1 | tee .local/shard1-test.log || shard1_status=${PIPESTATUS[0]}
      shard2_status=0
      wait "$shard2" || shard2_status=$?
      echo "--- the second shard of the tests (its output: $shard2_log), exit status $shard2_status:" >&2
      grep -E "^\s+(FAIL|SIGSEGV|SIGABRT|TIMEOUT)|Summary" "$shard2_log" >&2 || tail -n 50 "$shard2_log" >&2
      [[ $shard2_status == 0 ]] || sed -n '/^\s*FAIL \[/,$p' "$shard2_log" | head -n 400 >&2
      phase "unit and local-stack tests"
      sam_status=0
      wait "$sam" || sam_status=$?
      echo "--- sam local invoke of every function (its output: $sam_log), exit status $sam_status:" >&2
      if [[ $sam_status == 0 ]]; then grep -E "^test result" "$sam_log" >&2; else tail -n 100 "$sam_log" >&2; fi
      phase "sam local invoke (beside the tests)"
      [[ $shard1_status == 0 && $shard2_status == 0 && $sam_status == 0 ]]
    }
} || rest=$?

chaos_status=0
wait "$chaos" || chaos_status=$?
phase "chaos run (beside the tests)"
echo "--- the chaos run (tests/chaos.rs), exit status $chaos_status:" >&2
if [[ $chaos_status == 0 ]]; then grep -E "^test |test result" "$chaos_log" >&2; else tail -n 200 "$chaos_log" >&2; fi

echo "--- time per phase (seconds since the start):" >&2
cat "$timings" >&2
echo "--- the slowest tests:" >&2
python3 infra/slowest-tests.py 15 target/nextest/shard1/junit.xml target/nextest/shard2/junit.xml >&2 || true
if [[ $rest != 0 || $chaos_status != 0 ]]; then
  # The failures once more, last, where a reader of a long log looks first (a test that
  # passed on its retry panicked too: only a failed run prints them).
  for log in .local/shard1-test.log .local/shard2-test.log .local/sam-local-test.log "$chaos_log"; do
    if [[ -f $log ]] && grep -qE "panicked at|^\s+(TIMEOUT|SIGSEGV|SIGABRT) " "$log"; then
      echo "--- why it failed ($log):" >&2
      { grep -E -A 12 "panicked at|^\s+(TIMEOUT|SIGSEGV|SIGABRT) " "$log" |
        grep -v "^\s*[0-9]*: \|^\s*at " | head -n 60 >&2; } || true
    fi
  done
  echo "test: FAILED (checks and tests: exit $rest; chaos run: exit $chaos_status)" >&2
  exit 1
fi
echo "test: everything passed in $SECONDS s" >&2
