#!/usr/bin/env bash
# Runs a command with the local stack up and its environment loaded. Starts what is not
# running yet and stops, by pid, only what it started.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STACK="$ROOT/infra/local-stack.sh"

already="$("$STACK" status | grep -c ': running' || true)"
"$STACK" start
if [[ "$already" != 2 ]]; then
  trap '"$STACK" stop' EXIT
fi
eval "$("$STACK" env)"
"$@"
