#!/usr/bin/env bash
# Every check and test: formatting, template validation, clippy, unit tests, and the tests
# against the local stack (moto + SecantusDB on 127.0.0.1, started and stopped here).
# CI runs exactly this.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
cargo fmt --all -- --check
infra/validate-template.sh
cargo clippy --workspace --all-targets --locked -- -D warnings
# The binaries the tests run: mailctl (tests/cli.rs) and the functions, which
# tests/runtime_api.rs runs through a local Lambda Runtime API. Same features as the tests, so
# nothing is built twice; the release build (size-optimised, slow to link) is
# infra/bench.sh's.
cargo build --workspace --bins --locked
exec infra/with-local-stack.sh cargo test --workspace --locked
