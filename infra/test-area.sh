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
source infra/build-env.sh
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "cargo-nextest not found: this machine kind ships it; elsewhere: cargo install cargo-nextest --locked" >&2
  exit 1
fi
eval "$(infra/browser.sh)"
exec infra/with-local-stack.sh cargo nextest run --workspace --locked -E "$filter" "$@"
