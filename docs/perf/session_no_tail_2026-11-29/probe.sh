#!/usr/bin/env bash
# The NO_TAIL builds against d4e734f (the last commit before them), one device call:
#   $OUT/gpu_tests.log    pytest --gpu -k no_tail (the builds give the general results)
#   $OUT/*.jsonl          docs/perf/dkdv_tiles_probe.py rows, tree "new" (this checkout) and
#                         "old" (d4e734f's safeattn and benchmarks, unpacked into _old/)
# Run from the repository root with _old/ in place (git archive d4e734f safeattn benchmarks).
set -u
export PYTHONUNBUFFERED=1
python3 -m pytest -q --gpu -n 4 tests/test_kernels.py -k no_tail > "$OUT/gpu_tests.log" 2>&1
tail -3 "$OUT/gpu_tests.log"
NEW=docs/perf/dkdv_tiles_probe.py
OLD=_old/docs/perf/dkdv_tiles_probe.py
run() { echo "== $*"; timeout 200 python3 "$@" 2> >(tail -5 >&2); }
run $NEW --label new --causal --configs M32-N64-w4-s3,M64-N64-w4-s2 --whole >> "$OUT/dkdv_causal.jsonl"
run $OLD --label old --causal --configs M32-N64-w4-s3 --whole >> "$OUT/dkdv_causal.jsonl"
run $NEW --label new --kernel bwd_dq --configs M128-N64-w8-s4,M128-N64-w8-s3,M64-N64-w4-s2 --whole >> "$OUT/dq_dense.jsonl"
run $OLD --label old --kernel bwd_dq --configs M128-N64-w8-s4 --whole >> "$OUT/dq_dense.jsonl"
python3 - "$OUT" <<'PY'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/*.jsonl")):
    for line in open(f):
        r = json.loads(line)
        print(f"{r['tree']:4} {r['kernel']:8} c={int(r['causal'])} n={r['n']} g={r['gqa']} {r['config']:15} "
              f"dkdv={r.get('bwd_dkdv_us')} dq={r.get('bwd_dq_us')} regs={r.get('registers')} sp={r.get('spills')} "
              f"ser={r.get('serial_ms')} ovl={r.get('overlap_ms')} {r.get('error', '')}")
PY
