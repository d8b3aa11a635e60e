#!/usr/bin/env bash
# The benchmark of this checkout against another revision, on the same machine, one run of
# each in turn: a figure in µs holds only beside another measured at the same time (this
# machine's speed wanders by a third within the hour; docs/benchmarks.md). Usage:
#   infra/bench-compare.sh REV [--runs N] [--here "ARGS"] [--max-ratio R] [BENCH ARGS...]   # default: --runs 3 --users 3000
# BENCH ARGS go to both sides; --here's (split on spaces) to this checkout's only, e.g.
#   infra/bench-compare.sh cc1b70d~1 --runs 3 --here "--definition digest" --users 3000
# compares this checkout's digest, pushed as a definition, with REV's compiled digest (this
# checkout's functions run only definitions: without --here they run the bundled digest). Each pair ends
# with the ratio of this checkout's CPU per email to REV's; with --max-ratio R (the regression
# guard: docs/benchmarks.md, "CPU per email against a reference") the script fails when any
# pair's ratio is above R.
# REV is checked out once as a git worktree in .local/bench-against/SHA, with its own target/,
# virtualenv and local stack (a first run builds it: about 10 minutes on two cores, and installs
# the servers from PyPI). Remove it with `git worktree remove .local/bench-against/SHA`. Each
# run's JSON report is kept in .local/bench-against/reports/.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage() {
  echo "usage: $0 REV [--runs N] [--here \"ARGS\"] [--max-ratio R] [BENCH ARGS...]" >&2
  exit 2
}
[[ $# -ge 1 && $1 != -* ]] || usage
rev="$1"
shift
runs=3
here_args=()
max_ratio=""
while [[ ${1:-} == --runs || ${1:-} == --here || ${1:-} == --max-ratio ]]; do
  [[ $# -ge 2 ]] || usage
  case "$1" in
    --runs) runs="$2" ;;
    --here) read -r -a here_args <<<"$2" ;;
    --max-ratio) max_ratio="$2" ;;
  esac
  shift 2
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "--runs needs a whole number of runs, at least 1" >&2; exit 2; }
[[ -z $max_ratio || $max_ratio =~ ^[0-9]+(\.[0-9]+)?$ ]] ||
  { echo "--max-ratio needs a number such as 1.10, not $max_ratio" >&2; exit 2; }
[[ $# -gt 0 ]] || set -- --users 3000

sha="$(git -C "$ROOT" rev-parse --verify --quiet "$rev^{commit}")" ||
  { echo "$rev is not a commit of this repository" >&2; exit 2; }
sha="${sha:0:12}"
other="$ROOT/.local/bench-against/$sha"
# Both sides start their own local stack on the same ports: one already up would serve one
# side warm and refuse the other.
for dir in "$ROOT" "$other"; do
  if [[ -x $dir/infra/local-stack.sh && $("$dir/infra/local-stack.sh" status 2>/dev/null) == *': running'* ]]; then
    echo "a local stack is running for $dir: stop it first ($dir/infra/local-stack.sh stop)" >&2
    exit 1
  fi
done
if [[ ! -d $other ]]; then
  git -C "$ROOT" worktree prune # forgets a worktree whose directory was deleted by hand
  git -C "$ROOT" worktree add --quiet --detach "$other" "$sha"
fi
here="$(git -C "$ROOT" rev-parse --short=12 HEAD)$(git -C "$ROOT" diff --quiet HEAD || echo '+changes')"
((${#here_args[@]} == 0)) || here+=" ${here_args[*]}"
reports="$ROOT/.local/bench-against/reports"
mkdir -p "$reports"
stamp="$(date -u +%Y%m%dT%H%M%SZ)"

# One line per run: which code, the total and each stage's CPU µs per email, requests and
# MongoDB round trips per email, GetUsers' users enqueued per second.
summary() {
  python3 - "$1" "$2" <<'PY'
import json, sys
name, path = sys.argv[1:3]
r = json.load(open(path))
cpu = r["cpuMicrosPerEmail"]
stages = ", ".join(f"{k.removesuffix('Function')} {v:.0f}" for k, v in sorted(cpu.items()) if k != "total")
print(f"{name:<32} total {cpu['total']:.0f} µs/email ({stages}); requests/email "
      f"{r['billableRequestsPerEmail']:.3f}; MongoDB round trips/email {r['mongodbRoundTripsPerEmail']:.3f}; "
      f"GetUsers {r['usersEnqueuedPerSecond']:.0f} users/s")
PY
}

bench() { # SIDE RUN
  local dir="$ROOT" name="$here" extra=("${here_args[@]}")
  if [[ $1 == other ]]; then dir="$other" name="$sha" extra=(); fi
  local out="$reports/$stamp-run$2-$1.json"
  "$dir/infra/bench.sh" "${args[@]}" "${extra[@]}" --json >"$out"
  summary "$name (run $2)" "$out"
}

# The pair's ratio of this checkout's CPU per email to REV's; fails (1) above --max-ratio.
ratio() { # RUN
  python3 - "$reports/$stamp-run$1-this.json" "$reports/$stamp-run$1-other.json" "${max_ratio:-inf}" <<'PY'
import json, sys
this, other = (json.load(open(p))["cpuMicrosPerEmail"]["total"] for p in sys.argv[1:3])
limit = float(sys.argv[3])
print(f"pair ratio {this / other:.2f} (this / REV CPU per email)" + (f", above {limit:.2f}" if this / other > limit else ""))
sys.exit(1 if this / other > limit else 0)
PY
}

args=("$@")
above=0
for i in $(seq "$runs"); do
  # The order alternates, so that a machine speeding up or slowing down over the runs
  # favours neither side.
  if ((i % 2)); then bench this "$i"; bench other "$i"; else bench other "$i"; bench this "$i"; fi
  ratio "$i" || above=$((above + 1))
done
if ((above > 0)); then
  echo "$above of $runs pairs used more CPU per email than $sha by more than ${max_ratio}x" >&2
  exit 1
fi
