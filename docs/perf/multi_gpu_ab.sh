#!/usr/bin/env bash
# Issue 18's measurement: one commit range on 2 GPUs against the same range on 1 GPU.
#
#   bash docs/perf/multi_gpu_ab.sh [N=4] [suite ...]   # on a 2-GPU host, from a git checkout
# (asv importable: on the device machines, pip install --no-index --target /tmp/site .whl/*.whl
# and PYTHONPATH=/tmp/site, as tools/gpu_history.sh does).
#
# Both runs measure HEAD~N..HEAD with tools/run.py --same into their own results folders
# (fresh, so nothing is skipped), after one shared prewarm (both find the compile caches
# warm). Prints each run's wall time and commit count, the speed-up, and whether both
# wrote the same result files with the same benchmark names. Logs under $OUT (or /tmp).
set -euo pipefail
cd "$(dirname "$0")/../.."
N="${1:-4}"
shift || true
suites=("$@")
[ "${#suites[@]}" -gt 0 ] || suites=(LiveResourcesSuite ModelStepSuite)
select=()
for s in "${suites[@]}"; do select+=(--suite "${s}"); done
out="${OUT:-/tmp}/multi_gpu_ab"
mkdir -p "${out}"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee "${out}/gpus.txt"
python3 -m tools.prewarm "${select[@]}" > "${out}/prewarm.log" 2>&1 || true

measure() {  # name, --gpus spec; prints "seconds exit-status"
  local start end rc=0
  rm -rf "/tmp/multi_gpu_ab_$1"
  start=$(date +%s)
  python3 tools/run.py --range "HEAD~${N}..HEAD" --same --no-prewarm "${select[@]}" \
    --results "/tmp/multi_gpu_ab_$1" --gpus "$2" > "${out}/$1.log" 2>&1 || rc=$?
  end=$(date +%s)
  echo "$((end - start)) ${rc}"
}

one=$(measure one_gpu 0)
two=$(measure two_gpus 0,1)
python3 - ${one} ${two} "${N}" <<'EOF' | tee "${out}/summary.txt"
import json, sys
from pathlib import Path

one, one_rc, two, two_rc, n = map(int, sys.argv[1:6])
shapes = {}
for name in ("one_gpu", "two_gpus"):
    root = Path(f"/tmp/multi_gpu_ab_{name}")
    files = {}
    for path in root.glob("*/*.json"):
        if path.name.startswith("versions-") or path.name == "machine.json":
            continue
        data = json.loads(path.read_text())
        files[(path.parent.name, data["commit_hash"])] = sorted(data["results"])
    shapes[name] = files
    print(f"{name}: {len(files)} commit result file(s) of {n}")
print(f"wall: 1 GPU {one} s, 2 GPUs {two} s, speed-up {one / max(two, 1):.2f}x (target >= 1.8x)")
same = shapes["one_gpu"] == shapes["two_gpus"]
print("same files and benchmark names in both runs:", same)
# A failed run is fast: its wall time says nothing about the scheduler.
if one_rc or two_rc or any(len(files) != n for files in shapes.values()):
    print(f"NOT A MEASUREMENT: exit status 1 GPU {one_rc}, 2 GPUs {two_rc}, or a commit missing")
    sys.exit(1)
EOF
