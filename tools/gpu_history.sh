#!/usr/bin/env bash
# Benchmark the last N commits of this repository on this GPU machine, offline, into results/.
#
#   bash tools/gpu_history.sh [N] [extra tools/run.py options, e.g. --same]
#   bash tools/gpu_history.sh 8 --same --gpus all    # every GPU of the host at once
#
# N (default 5) commits: HEAD~N..HEAD, oldest first, one tools/run.py call per commit,
# the GPU suites only (run.py --suite gpu: LiveResources, Speed, Memory, Numerics,
# ModelStep, MaskedSpeed; give --suite/--bench to choose others). Suites already measured
# for a commit on this machine (in results/) are skipped, so a second call resumes where a
# first one stopped.
# --same imports each commit from a git worktree instead of building it in asv's virtualenv
# (no build or install per suite: the cheaper choice under a device-time budget).
#
# Environment:
#   SAFEATTN_HISTORY_BUDGET_S=480   start no suite after that many seconds (a 10-minute
#                                   command limit: leave the slowest suite's time spare)
#   SAFEATTN_RESULTS_MIRROR="$OUT"  copy results/ there after every suite (a killed command
#                                   still hands back everything measured before the kill)
#   SAFEATTN_WHEELS=DIR             asv's wheels (default .whl), installed with --target
#                                   when asv is not importable (no network needed)
#   SAFEATTN_PREWARM=0              skip the parallel compile warm-up (tools/prewarm.py)
#                                   that runs once before the first commit; it compiles
#                                   what the chosen --suite's use (all for a --bench)
#
# Needs a git checkout. The device machine's copy of the repository has no .git: bundle the
# repository here and clone the bundle there (the bundle has no HEAD, hence -b main):
#   here:    git bundle create .bundle/repo.bundle main
#   device:  git clone -q -b main .bundle/repo.bundle /tmp/r && cp -r .whl /tmp/r/ && cd /tmp/r
#            SAFEATTN_HISTORY_BUDGET_S=480 SAFEATTN_RESULTS_MIRROR="$OUT" \
#              bash tools/gpu_history.sh 3 --same
#   (.bundle/ and .whl/ are git-ignored: name them in the device call's carry list.)
# Also needs torch and triton installed, and asv with its dependencies importable or as wheels
# in .whl/: asv, asv_runner, virtualenv, python-discovery, distlib, platformdirs, json5,
# pympler, importlib-metadata (10.x also needs lazy-importer), zipp, packaging, filelock, tabulate (asv's commands import it),
# pyyaml, and for the default (virtualenv) mode wheel, build and pyproject_hooks too.
#
# Cost per commit: benchmarks/speed.py's module docstring ("Cost") has the figures measured
# so far and the estimates; run.py prints every suite's wall time as it goes.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! git rev-parse --git-dir >/dev/null 2>&1; then
  cat >&2 <<EOF
[gpu_history] $(pwd) is not a git checkout: asv measures commits, so it needs the history.
(The device machine's copy of the repository is a working tree without .git.)
HINT: here:   git bundle create .bundle/repo.bundle main   (then carry .bundle and .whl)
      there:  git clone -q -b main .bundle/repo.bundle /tmp/r && cp -r .whl /tmp/r/ && cd /tmp/r
              bash tools/gpu_history.sh ${1:-5} --same
      (-b main: a bundle has no HEAD, a plain clone of it checks nothing out)
EOF
  exit 2
fi

N="${1:-5}"
shift || true
if ! git rev-parse --verify --quiet "HEAD~${N}" >/dev/null; then
  echo "[gpu_history] need a git checkout with more than ${N} commits here ($(pwd))" >&2
  exit 2
fi

if ! python3 -c "import asv, asv_runner, virtualenv, tabulate" 2>/dev/null; then
  wheels="${SAFEATTN_WHEELS:-.whl}"
  site="${SAFEATTN_WHEEL_SITE:-/tmp/safeattn-asv-site}"
  if ! ls "${wheels}"/*.whl >/dev/null 2>&1; then
    echo "[gpu_history] asv is not importable and ${wheels}/ holds no wheels (see the header)" >&2
    exit 2
  fi
  echo "[gpu_history] installing asv from ${wheels}/ into ${site} (no network)"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "${site}" "${wheels}"/*.whl
  export PYTHONPATH="${site}${PYTHONPATH:+:${PYTHONPATH}}"
fi

# The GPU suites unless the caller chose (run.py refuses --suite together with --bench).
# The prewarm compiles what the chosen suites use (all of it for a --bench selection).
select=(--suite gpu)
warm=()
prev=""
bench=""
for arg in "$@"; do
  case "${arg}" in
    -s | --suite) select=() ;;
    -b | --bench | --bench=*) select=(); bench=1 ;;
    --suite=*) select=(); warm+=(--suite "${arg#--suite=}") ;;
  esac
  case "${prev}" in
    -s | --suite) warm+=(--suite "${arg}") ;;
  esac
  prev="${arg}"
done
[ -z "${bench}" ] || warm=()
mirror=()
if [ -n "${SAFEATTN_RESULTS_MIRROR:-}" ]; then
  mirror=(--mirror "${SAFEATTN_RESULTS_MIRROR}")
fi

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
# Once for all commits (run.py would warm per call): the caches serve every commit whose
# kernels are the working tree's.
if [ "${SAFEATTN_PREWARM:-1}" != "0" ]; then
  python3 -m tools.prewarm "${warm[@]}" || true
fi
budget="${SAFEATTN_HISTORY_BUDGET_S:-0}"
start=$(date +%s)
status=0
gpus=""
for arg in "$@"; do
  case "${arg}" in --gpus | --gpus=*) gpus=1 ;; esac
done
if [ -n "${gpus}" ]; then
  # Several GPUs: one run.py call hands the whole range out (tools/runner/gpus.py).
  limit=()
  [ "${budget}" -le 0 ] || limit=(--budget-s "${budget}")
  python3 tools/run.py --range "HEAD~${N}..HEAD" --skip-existing --no-prewarm "${select[@]}" \
    "${limit[@]}" "${mirror[@]}" "$@" || status=$?
  echo "[gpu_history] ${N} commits on several GPUs in $(($(date +%s) - start)) s (status ${status})"
  exit "${status}"
fi
for sha in $(git rev-list --first-parent --reverse "HEAD~${N}..HEAD"); do
  elapsed=$(($(date +%s) - start))
  limit=()
  if [ "${budget}" -gt 0 ]; then
    if [ "${elapsed}" -ge "${budget}" ]; then
      echo "[gpu_history] budget of ${budget} s used (${elapsed} s): stopping before ${sha:0:8}"
      break
    fi
    limit=(--budget-s "$((budget - elapsed))")
  fi
  commit_start=$(date +%s)
  python3 tools/run.py --range "${sha}^!" --skip-existing --no-prewarm "${select[@]}" \
    "${limit[@]}" "${mirror[@]}" "$@" || status=$?
  echo "[gpu_history] ${sha:0:8}: $(($(date +%s) - commit_start)) s"
done
echo "[gpu_history] ${N} commits looked at in $(($(date +%s) - start)) s (run.py status ${status})"
if python3 -c "import pandas" 2>/dev/null; then
  PYTHONPATH="$(pwd)${PYTHONPATH:+:${PYTHONPATH}}" python3 tools/peer_ratios.py || true
else
  echo "[gpu_history] no pandas here: run python3 tools/peer_ratios.py where results/ goes"
fi
exit "${status}"
