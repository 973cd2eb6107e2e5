#!/usr/bin/env bash
# Driver of docs/perf/live_determinism.py on a GPU machine: fresh processes, each with an
# empty Triton cache, under random and fixed PYTHONHASHSEEDs and from a second copy of the
# tree at another path. Output: $OUT/live_determinism.jsonl and a table of the dK/dV rows.
set -u
OUT="${OUT:?}"
rm -rf /tmp/other && mkdir -p /tmp/other && cp -r safeattn benchmarks regress /tmp/other/
run() {  # label, dir, extra env
  local label=$1 dir=$2; shift 2
  (cd "$dir" && env "$@" TRITON_CACHE_DIR="$(mktemp -d)" timeout 240 python3 \
    "$OLDPWD/docs/perf/live_determinism.py" --label "$label") >>"$OUT/live_determinism.jsonl" \
    2>>"$OUT/live_determinism.err"
  echo "$label rc=$?"
}
run random-1 . X=1
run random-2 . X=1
run random-3 . X=1
run seed0-1 . PYTHONHASHSEED=0
run seed0-2 . PYTHONHASHSEED=0
run seed1 . PYTHONHASHSEED=1
run other-path /tmp/other PYTHONHASHSEED=0
python3 - "$OUT/live_determinism.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    if r["kernel"] in ("bwd_dkdv", "forward", "bwd_dq"):
        print(f'{r["label"]:10} {r["dtype"]:8} D={r["D"]:<3} {r["kernel"]:8} {r["config"]:15} '
              f'regs {r["regs"]:3} spills {r["spills"]:3} ptx {r["ptx"]} cubin {r["cubin"]}')
PY
