#!/usr/bin/env bash
# The tests of one area, after a change to it: builds what changed (the same way as
# infra/test.sh, so the two share every artifact), starts the local stack if it is not
# running, and runs the tests that FILTER selects (a cargo-nextest filter expression).
#
#   infra/test-area.sh 'test(/^exactly_once::/)'      # a module of the local-stack tests
#   infra/test-area.sh 'package(mailflow)'            # the library's unit tests
#   infra/test-area.sh 'test(/^(preferences|open_content)::/)'   # the browser suites
#
# docs/testing.md lists the areas and how long each takes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[[ $# -ge 1 ]] || { sed -n '2,10p' "$0" >&2; exit 2; }
filter="$1"; shift
# As infra/test.sh builds (clippy-driver wrapping rustc for the workspace's crates).
export RUSTC_WORKSPACE_WRAPPER="${RUSTC_WORKSPACE_WRAPPER:-$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver)}"
export CLIPPY_ARGS="-Dwarnings"
eval "$(infra/browser.sh)"
exec infra/with-local-stack.sh cargo nextest run --workspace --locked -E "$filter" "$@"
