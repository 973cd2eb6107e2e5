"""Does the causal rows' swing (README of this folder, section 3) follow the inputs' place in
memory, within one process? ``tree_ab.measure_shape`` (safeattn and cuDNN, forward and
backward, do_bench medians) on the same shape eight times in one process, each time after
a pad allocation of a different size is kept alive, so the inputs land at other addresses.
D = 256 causal bf16 (the swinging row), D = 128 causal bf16 N = 4096 and D = 256 dense as
controls.

    PYTHONPATH=. python docs/perf/session_mark_2026-12-02/causal_swing.py >> swing.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from tree_ab import measure_shape

SHAPES = [("bfloat16", 256, 4096, True), ("bfloat16", 128, 4096, True),
          ("bfloat16", 256, 4096, False)]  # fmt: skip
PADS_MB = [0, 1, 3, 7, 33, 129, 2, 65]

pads = []
for trial, pad_mb in enumerate(PADS_MB):
    pads.append(torch.empty(pad_mb * 2**20 + 4096 * trial, dtype=torch.uint8, device="cuda"))
    for shape in SHAPES:
        row = measure_shape(f"trial{trial}", *shape)
        row.update(trial=trial, pad_mb=pad_mb, clock=torch.cuda.clock_rate())
        print(json.dumps(row), flush=True)
