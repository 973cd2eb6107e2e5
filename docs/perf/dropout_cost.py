"""Dropout's cost over plain attention in safeattn, at FeatureSpeedSuite's shape (GPU only).

B=4, H=16, N=4096, D=128, bf16, non-causal (``regress/workloads.FEATURE_SHAPE``), p = 0.1:
forward and forward + backward, plain and with dropout, medians of ``triton.testing.do_bench``.
Run it with ``SAFEATTN_AUTOTUNE=0`` to compare both at their first shipped config (no tuning:
seconds instead of minutes of compiling); the asv suite (features.FeatureSpeedSuite) is the
measurement of record.

    SAFEATTN_AUTOTUNE=0 python docs/perf/dropout_cost.py
"""

from __future__ import annotations

import os
import sys

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import safeattn
from regress import workloads


def main() -> int:
    s = workloads.FEATURE_SHAPE
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(s.batch, s.heads, s.seq_len, s.head_dim, device="cuda",
                    dtype=torch.bfloat16, generator=gen).requires_grad_()
        for _ in range(3)
    )  # fmt: skip
    do = torch.randn_like(q)
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__} triton "
          f"{triton.__version__} SAFEATTN_AUTOTUNE={os.environ.get('SAFEATTN_AUTOTUNE', '1')}")
    rows = {}
    for p in (0.0, workloads.FEATURE_DROPOUT_P):
        def fwd(p=p):
            return safeattn.attention(q, k, v, dropout_p=p)

        def fwd_bwd(p=p):
            torch.autograd.grad(safeattn.attention(q, k, v, dropout_p=p), (q, k, v), do)

        fwd_bwd()  # compile (and tune) first
        ms = [triton.testing.do_bench(f, warmup=10, rep=50, return_mode="median")
              for f in (fwd, fwd_bwd)]  # fmt: skip
        rows[p] = ms
        print(f"p={p:<4} forward {ms[0]:7.3f} ms  fwd+bwd {ms[1]:7.3f} ms", flush=True)
    plain, drop = rows[0.0], rows[workloads.FEATURE_DROPOUT_P]
    print(f"dropout / plain: forward {drop[0] / plain[0]:.2f}x, fwd+bwd {drop[1] / plain[1]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
