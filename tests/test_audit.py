"""The static resource audit cross-compiles without a GPU and catches configs over a limit.

The full audit (every kernel, config, dtype, head dim and architecture: ~1,000 compiles) is
``python -m safeattn.audit``; CI audits the tightest architecture for one kernel.
"""

from __future__ import annotations

import torch

from safeattn import audit
from safeattn.gpu_limits import ARCHS
from safeattn.kernels import configs
from safeattn.kernels.configs import KernelConfig


def test_every_config_shipped_to_sm86_fits_it():
    rows = audit.audit(
        archs=["sm86"], kernels=["forward"], dtypes=[torch.bfloat16], head_dims=[128],
        variants=["causal"], workers=1,
    )  # fmt: skip
    shipped = configs.candidates("forward", 128, torch.bfloat16, ARCHS["sm86"].smem_optin_bytes)
    assert {r.config for r in rows} == {str(c) for c in shipped}
    for r in rows:
        assert not r.error, r
        assert 0 < r.shared_bytes <= r.smem_limit == 101_376, r
        assert 0 < r.registers <= 255, r


def test_audit_flags_a_config_over_the_limit():
    """A Hopper-sized config, compiled for sm86, needs more than sm86 has: fits=False."""
    big = KernelConfig(128, 128, 8, 3)
    assert big in configs.candidates("forward", 128, torch.bfloat16, None)
    assert big not in configs.candidates("forward", 128, torch.bfloat16, 101_376)
    [row] = audit.audit(
        archs=["sm86"], kernels=["forward"], dtypes=[torch.bfloat16], head_dims=[128],
        variants=["causal"], workers=1, configs_override=[big],
    )  # fmt: skip
    assert row.config == str(big)
    assert row.shared_bytes > row.smem_limit and not row.fits
