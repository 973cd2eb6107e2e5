"""Is the live dK/dV binary the same from one process to the next? (issue 13, 2026-11-28)

LiveResourcesSuite reported the H200's bwd_dkdv at the same table config and the same kernel
source as 229 registers / 0 B spilled (f7a50a5, 9b32c1e, a367fb7) and as 232 / 8 B (82c66b4,
dba853f). This runs the suite's forward+backward (N=4096, MHA, non-causal, D=64 and 128,
bf16 and fp16) and prints, per kernel: config, registers, spill bytes and the sha256 of the
PTX and the cubin Triton made. The driver (docs/perf/live_determinism.sh) runs it in fresh
processes, each with an empty Triton cache, under different PYTHONHASHSEEDs and tree paths.

    TRITON_CACHE_DIR=$(mktemp -d) python docs/perf/live_determinism.py --label L
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

sys.path.insert(0, os.getcwd())  # the tree under test: run from its root

import torch

import safeattn
from benchmarks._attention import attention_inputs
from safeattn.kernels import launch

_COMPILED: dict[str, object] = {}
_record = launch._record


def _keep(name, cfg, compiled, source):
    _COMPILED[name] = compiled
    _record(name, cfg, compiled, source)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default="")
    label = ap.parse_args().label
    launch._record = _keep
    for dtype in ("bfloat16", "float16"):
        for d in (64, 128):
            q, k, v, do = attention_inputs("safeattn", dtype, 4096, d, 1)
            safeattn.attention(q, k, v).backward(do)
            torch.cuda.synchronize()
            for name, res in launch.launched_kernels().items():
                c = _COMPILED[name]
                print(json.dumps({
                    "label": label, "seed": os.environ.get("PYTHONHASHSEED", "random"),
                    "tree": os.getcwd(), "dtype": dtype, "D": d, "kernel": name,
                    "config": res.config, "regs": res.registers, "spills": res.spills,
                    "ptx": hashlib.sha256(c.asm["ptx"].encode()).hexdigest()[:12],
                    "cubin": hashlib.sha256(c.asm["cubin"]).hexdigest()[:12],
                }), flush=True)


if __name__ == "__main__":
    main()
