"""safeattn's SpeedSuite medians at 75a328c (read from the asv log of an H100 run whose
results were lost when the lent machine was reclaimed) against the committed results of
669e2e1 (results/nvidia-h100-80gb-hbm3) and 4418cfe: geometric means of head/base per pass
and causal, and the rows that moved by more than 5 %. Run from the repository root:
``python docs/perf/guard_vs_669e2e1_from_log.py LOG``."""

import ast
import math
import re
import sys

from regress.results import load_results

with open(sys.argv[1]) as f:
    log = f.read()
head = {}
for m in re.finditer(r"^\[speed\] (\('safeattn'.*?\)): forward=([\d.]+)ms backward=([\d.]+)ms "
                     r"fwd_bwd=([\d.]+)ms", log, re.M):
    combo = ast.literal_eval(m.group(1))[1:]
    head[combo] = dict(forward=float(m.group(2)), backward=float(m.group(3)),
                       fwd_bwd=float(m.group(4)))
t = load_results("results").table
h100 = t.machine == "nvidia-h100-80gb-hbm3"
t = t[h100 & (t.suite == "speed.SpeedSuite") & (t.impl == "safeattn")]
for base in ("669e2e1", "4418cfe"):
    b = t[t.commit.str.startswith(base)]
    ratios = {}
    moved = []
    for _, r in b.iterrows():
        combo = (r["dtype"], int(r["head_dim"]), int(r["seq_len"]), bool(r["causal"]),
                 int(r["gqa"]))
        metric = r.metric.removesuffix("_ms")
        if combo not in head or not (r.value > 0):
            continue
        ratio = head[combo][metric] / r.value
        ratios.setdefault((metric, combo[3]), []).append(ratio)
        if abs(ratio - 1) > 0.05:
            moved.append((metric, combo, round(r.value, 3), head[combo][metric], round(ratio, 2)))
    print(f"== 75a328c (log) vs {base} (results): geometric mean of time ratio head/base")
    for (metric, causal), rs in sorted(ratios.items()):
        gm = math.exp(sum(map(math.log, rs)) / len(rs))
        print(f"   {metric:8s} causal={causal!s:5s} n={len(rs):2d} {gm:.3f}")
    print(f"   rows moved > 5 %: {len(moved)}")
    for row in sorted(moved):
        print("     ", row)
