#!/usr/bin/env bash
# Validates template.yaml offline with pinned tools (git-ignored .venv-tools):
# cfn-lint, `sam validate`, `sam validate --lint`, and cfn-lint on the CloudFormation the SAM
# translator produces (which is what actually checks SAM event properties).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv-tools"
cd "$ROOT"
infra/tools-venv.sh

export AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}" SAM_CLI_TELEMETRY=0
mkdir -p .local
"$VENV/bin/cfn-lint" template.yaml
"$VENV/bin/sam" validate --template template.yaml --region "$AWS_DEFAULT_REGION" >/dev/null
"$VENV/bin/sam" validate --lint --template template.yaml --region "$AWS_DEFAULT_REGION" >/dev/null
"$VENV/bin/python" infra/translate-template.py template.yaml > .local/template.cfn.json
"$VENV/bin/cfn-lint" .local/template.cfn.json
echo "validate-template: template.yaml is valid (cfn-lint, sam validate --lint, translated cfn-lint)" >&2
