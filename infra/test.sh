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
# The binaries tests/cli.rs runs (same features as the tests: no rebuild), and release builds
# of the functions, which tests/runtime_api.rs runs through a local Lambda Runtime API.
cargo build --workspace --bins --locked
cargo build --release --locked -p get-users -p create-emails -p send-email
export MAILFLOW_FUNCTION_PROFILE=release
exec infra/with-local-stack.sh cargo test --workspace --locked
