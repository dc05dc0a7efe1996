# Shared by the scripts in this folder: find the CLI, and print-or-run commands.
# DRY_RUN=1 (or --dry-run as the first argument of a script) prints each command instead of
# running it, quoted so it can be pasted; nothing is ever eval'ed.
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
if [ -x "$ROOT/.venv/bin/mlperf-vllm" ]; then MLPERF_VLLM=("$ROOT/.venv/bin/mlperf-vllm")
elif command -v mlperf-vllm >/dev/null 2>&1; then MLPERF_VLLM=(mlperf-vllm)
else MLPERF_VLLM=(python3 -m harness.cli); fi
DRY_RUN=${DRY_RUN:-0}

run_cmd() {
  if [ "$DRY_RUN" = 1 ]; then printf '%q ' "$@"; printf '\n'; else "$@"; fi
}

need() {  # need VAR "what it is"
  if [ -z "${!1:-}" ]; then echo "error: set $1 ($2)" >&2; exit 2; fi
}
