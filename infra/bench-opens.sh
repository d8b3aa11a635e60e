#!/usr/bin/env bash
# The OpenContent benchmark: builds the function as it is deployed (release) and runs
# `mailctl opens` on the local stack (started and stopped here). Arguments go to it, e.g.
#   infra/bench-opens.sh --emails 300 --followers 20 --seconds 10
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
cargo build --quiet --locked --release -p open-content
cargo build --quiet --locked --workspace --bins
exec infra/with-local-stack.sh "$ROOT/target/debug/mailctl" opens --bin-dir "$ROOT/target/release" "$@"
