#!/usr/bin/env bash
# Creates or updates the git-ignored .venv-tools with the pinned tools of
# infra/requirements-tools.txt (cfn-lint, the SAM CLI and the AWS Lambda emulator its wheel
# ships). Idempotent: nothing happens when the pins are installed already. Used by
# infra/validate-template.sh and infra/sam-local.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv-tools"
PYTHON="${PYTHON:-python3}"

mkdir -p "$ROOT/.local"
# The test command may run two users of the venv at once: one creates it, the other waits.
exec 9>"$ROOT/.local/venv-tools.lock"
flock 9
if ! { [[ -x "$VENV/bin/sam" ]] && cmp -s "$ROOT/infra/requirements-tools.txt" "$VENV/.requirements"; }; then
  echo "tools-venv: creating virtualenv $VENV" >&2
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$ROOT/infra/requirements-tools.txt"
  cp "$ROOT/infra/requirements-tools.txt" "$VENV/.requirements"
fi
