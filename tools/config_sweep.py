"""Time a broad set of block configs per kernel on one shape (GPU only), to choose the
shipped candidate lists in ``safeattn/kernels/configs.py``. Not an asv suite.

    python tools/config_sweep.py --d 128 --n 4096 [--causal] [--path portable|hopper]
                                 [--kernels bwd_dkdv,bwd_dq]

``--path``: which kernels' configs are timed. ``auto`` (default) is what a call takes (on an
sm90 GPU: the Hopper path's forward and backward); ``portable`` and
``hopper`` set ``SAFEATTN_TMA`` to 0 / 1, e.g. to sweep the Hopper path's backward kernels
(``configs._HOPPER_BACKWARD``) apart from the portable ones. On the Hopper
path the backward grids add a fourth stage: TMA loads pipeline through shared memory instead of
holding addresses in registers, so deeper pipelines are affordable there.

``--kernels``: sweep only these kernels (the others launch their first shipped config that
fits), so that a sweep of the backward does not spend minutes compiling forward configs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys

# --path: the SAFEATTN_TMA setting (safeattn/kernels/hopper.py) of each choice.
PATHS = {"auto": "auto", "portable": "0", "hopper": "1"}


def broad(kernel: str, head_dim_block: int, tma: bool = False) -> list | None:
    """The configs to time for one kernel; at D = 256 smaller tiles and fewer stages (the
    D = 128 grid's tiles hold 2-4x the registers and shared memory there); ``tma``: the
    Hopper path, whose backward grids go to 4 stages."""
    from safeattn.kernels.configs import KernelConfig

    wide = head_dim_block >= 256
    stages = (1, 2, 3, 4) if tma else (1, 2, 3)
    if kernel == "forward":
        grid = itertools.product((64, 128), (32, 64, 128), (4, 8), (2, 3, 4))
    elif kernel == "bwd_dkdv" and wide:
        grid = itertools.product((16, 32, 64), (32, 64, 128), (4, 8), (1, 2))
    elif kernel == "bwd_dkdv":
        grid = itertools.product((32, 64), (64, 128), (4, 8), stages)
    elif kernel == "bwd_dq" and wide:
        grid = itertools.product((32, 64, 128), (16, 32, 64), (4, 8), (1, 2))
    elif kernel == "bwd_dq":
        grid = itertools.product((64, 128), (32, 64), (4, 8), stages)
    else:
        return None
    return [KernelConfig(*c) for c in grid]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--path", choices=sorted(PATHS), default="auto")
    ap.add_argument("--kernels", help="comma-separated kernels to sweep (default: all)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    os.environ["SAFEATTN_TMA"] = PATHS[args.path]

    # Time every config afresh: no tuning table, no persisted choice (and none persisted).
    os.environ.update(
        {"SAFEATTN_TUNING_TABLE": "0", "SAFEATTN_TUNING_CACHE": "0", "SAFEATTN_AUTOTUNE": "1"}
    )
    import torch

    import safeattn
    from safeattn.kernels import configs, launch

    swept = set(args.kernels.split(",")) if args.kernels else set(configs.KERNELS)
    if unknown := swept - set(configs.KERNELS):
        ap.error(f"--kernels: unknown {sorted(unknown)}; known: {', '.join(configs.KERNELS)}")
    shipped = configs.candidates

    def sweep_candidates(
        kernel, bd, dtype, smem_limit=None, masked=False, tma=False, dropout=False
    ):  # configs.candidates' signature: launch passes its arguments by position
        if kernel in swept and (grid := broad(kernel, bd, tma)):
            return grid
        listed = shipped(kernel, bd, dtype, smem_limit, masked, tma, dropout)
        return listed if kernel in swept else listed[:1]

    configs.candidates = sweep_candidates
    b, h = 16384 // args.n, 2048 // args.d
    q, k, v = (
        torch.randn(b, h, args.n, args.d, device="cuda", dtype=torch.bfloat16).requires_grad_()
        for _ in range(3)
    )
    out = safeattn.attention(q, k, v, causal=args.causal)
    out.backward(torch.randn_like(out))
    torch.cuda.synchronize()
    report = {}
    for key, timings in launch.tuning_timings().items():
        ranked = sorted(timings, key=lambda x: x[1])
        report[key[0]] = ranked
        print(f"== {key[0]} d={args.d} n={args.n} causal={args.causal} path={args.path}")
        for cfg, ms in ranked[:6]:
            print(f"   {cfg:<18} {ms:8.3f} ms")
    for name, res in sorted(launch.launched_kernels().items()):
        print(f"   launched {name}: {res}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
