#!/usr/bin/env bash
# The benchmark: builds the function binaries as they are deployed (release) and runs
# `mailctl bench` on the local stack (started and stopped here). Arguments go to it, e.g.
#   infra/bench.sh --users 10000
#   infra/bench.sh --users 100000 --get-users-only
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# Built apart, as infra/test.sh builds them, so both share the same release artifacts.
cargo build --quiet --locked --release -p get-users -p create-emails -p send-email
cargo build --quiet --locked --release -p mailctl
exec infra/with-local-stack.sh "$ROOT/target/release/mailctl" bench "$@"
