#!/usr/bin/env bash
# 2026-12-04 #2: dK/dV on a high-priority side stream (SAFEATTN_BWD_OVERLAP=2) against dQ on
# the side stream (=1), then the suites at the commit the rule below picks, in one detached
# session (one machine start):
#   1. docs/perf/device_session.sh STEPS="smoke overlap" at main (=2 by default there): the
#      side-stream GPU tests, then bwd_overlap_ab.py --quick --settings 1,2;
#   2. the rule, fixed before the run: =2 is kept when the smoke passed, the geometric mean of
#      (=2 time / =1 time) over the A/B's rows is below 0.995 and no row is above 1.02;
#      else the session ends there (origin/alt, the same tree with =1 the default, is what
#      the suites measured at b48b7b2);
#   3. device_session.sh STEPS=suites at main, logged under $S/suites/.
# Launched as device_session.sh is (setsid, pid in $S.pid), polled with device_poll.sh.
set -u
S="${S:-/tmp/sess}"
SMOKE_TESTS="tests/test_kernels.py::test_side_stream_switch tests/test_kernels.py::test_side_stream_dq_gives_the_serial_gradients" \
  STEPS="smoke overlap" OVERLAP_ARGS="--quick --settings 1,2" OVERLAP_S="${OVERLAP_S:-240}" \
  S="$S" bash docs/perf/device_session.sh
smoke=$(grep -c "smoke rc=0" "$S/driver.log")
python3 - "$S/overlap.jsonl" "$smoke" >"$S/pick.txt" 2>&1 <<'PY'
import json, math, statistics, sys
from collections import defaultdict
by = defaultdict(lambda: defaultdict(list))
for line in open(sys.argv[1]):
    if line.strip():
        r = json.loads(line)
        by[r["shape"]][r["label"]].append(r["ms"])
ratios = {s: statistics.median(t["kv_first"]) / statistics.median(t["overlap"])
          for s, t in by.items() if t.get("kv_first") and t.get("overlap")}
for s, r in ratios.items():
    print(f"{s:30s} kv_first/overlap {r:.4f}")
geo = math.exp(statistics.mean(math.log(r) for r in ratios.values())) if ratios else float("nan")
keep = sys.argv[2] == "1" and len(ratios) >= 5 and geo < 0.995 and max(ratios.values()) <= 1.02
print(f"geomean {geo:.4f} over {len(ratios)} rows, smoke passed: {sys.argv[2] == '1'}")
print("pick main" if keep else "pick origin/alt")
PY
if [ "$(tail -1 "$S/pick.txt")" = "pick main" ]; then
  rm -f "$S/done"
  S="$S/suites" STEPS=suites SUITES_BUDGET_S="${SUITES_BUDGET_S:-360}" \
    SUITES_S="${SUITES_S:-480}" bash docs/perf/device_session.sh
fi
touch "$S/done"
