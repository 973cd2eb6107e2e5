"""Why NumericsSuite has no FlexAttention figures on the score_mod families (GPU only).

Runs ``contract.rates`` on ``softcap``, ``trainable_bias`` and ``neginf_mask_rows`` (one trial,
the families' "gpu" size, bf16) with benchmarks/numerics.py's FlexAttention adapter, every
call of it compiled once with ``dynamic=True`` (what the suite used for these families before
3b78014) and once with ``dynamic=False`` (what it uses since), and prints the rates or the
first line of the error.

    python docs/perf/flex_score_mod_check.py
"""

from __future__ import annotations

import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from benchmarks import _attention, numerics
from safeattn import contract

FAMILIES = ("softcap", "trainable_bias", "neginf_mask_rows")


def main() -> int:
    for dynamic in (True, False):
        numerics.compiled_flex = lambda dynamic_=dynamic, **_: _attention.compiled_flex(dynamic_)
        for family in FAMILIES:
            start = time.time()
            try:
                impl = numerics._impl("flex")
                result = contract.rates(family, impl, torch.bfloat16, "cuda", 1, "gpu")
            except Exception as exc:  # report and go on: the point is which ones fail
                first = (str(exc).strip().splitlines() or [repr(exc)])[0][:240]
                result = f"{type(exc).__name__}: {first}"
            print(f"dynamic={dynamic!s:<5} {family:<18} {result}  ({time.time() - start:.0f} s)",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
