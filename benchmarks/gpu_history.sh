#!/usr/bin/env bash
# Benchmark the last N commits of this repository on this GPU machine, offline, into results/.
#
#   bash benchmarks/gpu_history.sh [N] [--same] [extra benchmarks/run.py options]
#
# N (default 5) commits: HEAD~N..HEAD, oldest first, through asv's virtualenv environment
# (offline build, the machine's own torch/triton); --same imports each commit from a git
# worktree instead of building it (asv run --python=same --set-commit-hash). Then prints
# the wall time and the safeattn-vs-peers ratio table of the newest commit. Commits already
# measured on this machine (in results/) are skipped.
#
# SAFEATTN_HISTORY_BUDGET_S=540 stops starting new commits after that many seconds.
#
# Needs: a git checkout with at least N+1 commits; torch and triton installed; asv and its
# dependencies either importable or as wheels in .whl/ (installed here with --target, no
# network): asv, asv_runner, virtualenv, python-discovery, distlib, platformdirs, json5,
# pympler, importlib-metadata, zipp, packaging, filelock (see the README).
set -euo pipefail
cd "$(dirname "$0")/.."

N="${1:-5}"
shift || true

if ! git rev-parse --verify --quiet "HEAD~${N}" >/dev/null; then
  echo "[gpu_history] need a git checkout with more than ${N} commits here ($(pwd))" >&2
  exit 2
fi

if ! python3 -c "import asv, asv_runner, virtualenv" 2>/dev/null; then
  site="${SAFEATTN_WHEEL_SITE:-/tmp/safeattn-asv-site}"
  echo "[gpu_history] installing asv from .whl/ into ${site} (no network)"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "${site}" .whl/*.whl
  export PYTHONPATH="${site}${PYTHONPATH:+:${PYTHONPATH}}"
fi

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
# One run.py call per commit, oldest first, so that a time budget (seconds, e.g. under a
# 10-minute command limit) stops between commits instead of losing one half-measured.
# --skip-existing: commits already in results/ for this machine are not measured again.
budget="${SAFEATTN_HISTORY_BUDGET_S:-0}"
start=$(date +%s)
done_count=0
for sha in $(git rev-list --first-parent --reverse "HEAD~${N}..HEAD"); do
  elapsed=$(($(date +%s) - start))
  if [ "${budget}" -gt 0 ] && [ "${elapsed}" -ge "${budget}" ]; then
    echo "[gpu_history] budget of ${budget} s used (${elapsed} s): stopping before ${sha:0:8}"
    break
  fi
  python3 benchmarks/run.py --range "${sha}^!" --skip-existing "$@"
  done_count=$((done_count + 1))
done
end=$(date +%s)
echo "[gpu_history] ${done_count} of ${N} commits in $((end - start)) s"
PYTHONPATH="$(pwd)${PYTHONPATH:+:${PYTHONPATH}}" python3 benchmarks/peer_ratios.py || true
