"""FlexAttention time / safeattn time per MaskedSpeedSuite mask, pass and head dim at one
commit, from results/ (the README's table averages D=64 and D=128; this splits them).

    python docs/perf/masked_ratio_split.py [commit-prefix]    # default: the newest measured
"""

import math
import sys

from regress.results import load_results

table = load_results("results").table
masked = table[table.suite == "speed.MaskedSpeedSuite"]
prefix = sys.argv[1] if len(sys.argv) > 1 else None
if prefix is None:
    prefix = masked.sort_values("date").commit.iloc[-1]
masked = masked[masked.commit.str.startswith(prefix)]
MASKS = ("key_padding_causal", "sliding_window", "varlen_docs", "bool_mask")

print(f"flex / safeattn at {prefix[:8]} (geometric mean of fp16, bf16; above 1: safeattn faster)")
print("| GPU | pass | D | " + " | ".join(MASKS) + " |")
print("|---|---|---|" + "---|" * len(MASKS))
for machine in sorted(masked.machine.unique()):
    for metric in ("forward_ms", "backward_ms", "fwd_bwd_ms"):
        for head_dim in (64, 128):
            cells = []
            for mask in MASKS:
                logs = []
                for dtype in ("float16", "bfloat16"):
                    rows = masked[(masked.machine == machine) & (masked.metric == metric)
                                  & (masked.head_dim == head_dim) & (masked["mask"] == mask)
                                  & (masked.dtype == dtype)]
                    value = dict(zip(rows.impl, rows.value, strict=True))
                    logs.append(math.log(value["flex"] / value["safeattn"]))
                cells.append(f"{math.exp(sum(logs) / len(logs)):.2f}")
            name = metric.removesuffix("_ms")
            print(f"| {machine} | {name} | {head_dim} | " + " | ".join(cells) + " |")
