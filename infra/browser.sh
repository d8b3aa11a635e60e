#!/usr/bin/env bash
# Installs, idempotently, what the browser tests drive: Debian's Chromium and playwright-core
# (pinned, no browser download of its own) under .local/browser (git-ignored). Prints the
# variables the tests read; infra/test.sh evaluates them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="$ROOT/.local/browser"
PLAYWRIGHT_CORE=1.64.1
log() { echo "browser: $*" >&2; }

if [[ ! -x /usr/bin/chromium ]]; then
  log "installing Debian's chromium"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends chromium >/dev/null ||
    { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends chromium >/dev/null; }
fi
installed="$(node -p "require('$DIR/node_modules/playwright-core/package.json').version" 2>/dev/null || true)"
if [[ "$installed" != "$PLAYWRIGHT_CORE" ]]; then
  log "installing playwright-core $PLAYWRIGHT_CORE in $DIR"
  mkdir -p "$DIR"
  # No lock file (it would name the registry); playwright-core has no dependencies.
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --prefix "$DIR" --no-save --no-package-lock \
    --no-audit --no-fund --loglevel=error "playwright-core@$PLAYWRIGHT_CORE" >&2
fi
echo "export MAILFLOW_BROWSER_DIR=$DIR MAILFLOW_CHROMIUM=/usr/bin/chromium"
