#!/usr/bin/env bash
# The benchmark: builds the function binaries as they are deployed (release) and runs
# `mailctl bench` on the local stack (started and stopped here). Arguments go to it, e.g.
#   infra/bench.sh --users 10000
#   infra/bench.sh --users 100000 --get-users-only
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
cargo build --quiet --locked --release -p get-users -p create-emails -p send-email
# mailctl only drives and measures (its own CPU is not counted): a debug build, as infra/test.sh
# makes it, rather than a second size-optimised link.
cargo build --quiet --locked -p mailctl --bin mailctl
exec infra/with-local-stack.sh "$ROOT/target/debug/mailctl" bench --bin-dir "$ROOT/target/release" "$@"
