"""Masked dK/dV probe (issue 13's "no spills in any live kernel"), one GPU, one process:
LiveBuildResourcesSuite found the D=128 dK/dV of the bool_mask build spilling 32 B and that
of varlen_docs 8 B (H200, torch's ptxas, the table's M32-N64-w4-s3). Here every shipped dK/dV
candidate of those builds, and of key_padding_causal (the founding workload) for comparison,
plus the configs that compile without spills in the static replica (M16-N64-w4-s3 for both,
M32-N64-w4-s2 for varlen; sm90, both assemblers), is tuned afresh with the tuner's spill
filter off: each one's kernel time (the tuner's median) and live spill bytes. The builds are
called as MaskedSpeedSuite calls them (``benchmarks.resources.live_build``), so the process
assembles with torch's ptxas, as every benchmark process does.

    python docs/perf/masked_dkdv_probe.py >> masked_dkdv.jsonl
    python docs/perf/masked_dkdv_probe.py --table masked_dkdv.jsonl

Options (2026-12-01): ``--build`` any of ``benchmarks.resources.LIVE_BUILDS`` and ``dense``
(default: the three above), ``--extra M,N,W,S`` configs tried beside the shipped ones
(default: the two above; ``bwd_dq:M,N,W,S`` for the dQ kernel), ``--kernel bwd_dq`` to probe
the dQ kernel's candidates too. The kernels not probed run their first candidate only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

BUILDS = ["bool_mask", "varlen_docs", "key_padding_causal"]
EXTRA = [(16, 64, 4, 3), (32, 64, 4, 2)]  # beside the shipped D=128 dK/dV candidates


def probe(
    dtypes: list[str], builds: list[str], extra_cfgs: list[tuple], kernels: list[str]
) -> None:
    os.environ.update(SAFEATTN_TUNING_TABLE="0", SAFEATTN_TUNING_CACHE="0", SAFEATTN_AUTOTUNE="1")
    import torch

    from benchmarks import resources  # pins torch's ptxas, as the suites do
    from safeattn.kernels import configs, launch, tuning

    shipped, seen = configs.candidates, []

    def candidates(kernel, bd, dtype, smem_limit=None, masked=False, tma=False, dropout=False):
        listed = shipped(kernel, bd, dtype, smem_limit, masked, tma, dropout)
        if kernel not in kernels or bd != 128:
            return listed[:1]
        extra = [configs.KernelConfig(*c) for k, c in extra_cfgs if k == kernel]
        return listed + [c for c in extra if c not in listed]

    def every_candidate(fitting, spills, dtype, head_dim_block):
        seen.append({str(c): spills.get(c) for c in fitting})
        return fitting

    configs.candidates, tuning.spill_free_first = candidates, every_candidate
    for dtype in dtypes:
        for build in builds:
            launch.clear_choices()
            seen.clear()
            fn, (q, k, v, grad_out) = resources.live_build(build, dtype, 128)()
            fn(q, k, v).backward(grad_out)
            torch.cuda.synchronize()
            for kernel in kernels:
                timed = next(t for key, t in launch.tuning_timings().items() if key[0] == kernel)
                spills = next(s for s in seen if set(s) == {c for c, _ in timed})
                row = dict(
                    gpu=torch.cuda.get_device_name(),
                    dtype=dtype,
                    build=build,
                    kernel=kernel,
                    ptxas=os.environ.get("TRITON_PTXAS_PATH", "triton's"),
                    dkdv={c: [round(ms, 4), spills[c]] for c, ms in timed},
                )
                print(json.dumps(row), flush=True)
            del q, k, v, grad_out
            torch.cuda.empty_cache()


def _extra(text: str) -> tuple[str, tuple]:
    """``[KERNEL:]M,N,W,S`` (KERNEL default bwd_dkdv) -> (kernel, (M, N, W, S))."""
    kernel, _, cfg = text.rpartition(":")
    return kernel or "bwd_dkdv", tuple(map(int, cfg.split(",")))


def table(path: str) -> None:
    rows = [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]
    for r in rows:
        best = min(ms for ms, _ in r["dkdv"].values())
        cells = "  ".join(
            f"{c} {ms:.3f}ms ({ms / best:.2f}x)/{sp}B" for c, (ms, sp) in r["dkdv"].items()
        )
        kernel = r.get("kernel", "bwd_dkdv")
        print(f"{r['dtype']:9s} {r['build']:19s} {kernel:8s} {cells}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table")
    ap.add_argument("--dtype", action="append", choices=("bfloat16", "float16"))
    ap.add_argument("--build", action="append", help=f"a live build (default: {BUILDS})")
    ap.add_argument("--extra", action="append", help="[KERNEL:]M,N,W,S beside the shipped")
    ap.add_argument("--kernel", action="append", choices=("bwd_dkdv", "bwd_dq"))
    args = ap.parse_args()
    if args.table:
        table(args.table)
    else:
        extra = [_extra(e) for e in args.extra] if args.extra else [("bwd_dkdv", c) for c in EXTRA]
        probe(
            args.dtype or ["bfloat16", "float16"],
            args.build or BUILDS,
            extra,
            args.kernel or ["bwd_dkdv"],
        )
    sys.exit(0)
