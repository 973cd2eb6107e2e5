"""FlexAttention time / safeattn time per MaskedSpeedSuite mask, pass and head dim at one
commit, from results/ (the README's table averages D=64 and D=128; this splits them).
The ratios are regress.ratios' (the README's and the dashboard's computation).

    python docs/perf/masked_ratio_split.py [commit-prefix]    # default: the newest measured
"""

import sys

from regress.ratios import MASKED_SUITE, geomean, peer_over_own
from regress.results import load_results

table = load_results("results").table
masked = table[table.suite == MASKED_SUITE]
prefix = sys.argv[1] if len(sys.argv) > 1 else masked.sort_values("date").commit.iloc[-1]
masked = masked[masked.commit.str.startswith(prefix)]
MASKS = ("key_padding_causal", "sliding_window", "varlen_docs", "bool_mask")

ratios = peer_over_own(masked, ["machine", "metric", "head_dim", "mask", "dtype"])["flex"]
print(f"flex / safeattn at {prefix[:8]} (geometric mean of fp16, bf16; above 1: safeattn faster)")
print("| GPU | pass | D | " + " | ".join(MASKS) + " |")
print("|---|---|---|" + "---|" * len(MASKS))
for machine in sorted(masked.machine.unique()):
    for metric in ("forward_ms", "backward_ms", "fwd_bwd_ms"):
        for head_dim in (64, 128):
            cells = [f"{geomean(ratios[machine, metric, head_dim, mask])[0]:.2f}" for mask in MASKS]
            name = metric.removesuffix("_ms")
            print(f"| {machine} | {name} | {head_dim} | " + " | ".join(cells) + " |")
