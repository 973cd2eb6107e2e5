"""Live kernel resources of every build under one assembler (issue 13: "no spills in any live
kernel"), one GPU, one process per assembler: the dense multi-head build of
LiveResourcesSuite and the 28 causal, GQA and masked builds of LiveBuildResourcesSuite,
called exactly as those suites call them (``benchmarks.resources.live_build``), with the
shared memory, registers and spill bytes of each kernel launched.

Why a probe beside the suites: every benchmark process pins torch's ptxas (CUDA 13.0 with
torch 2.11+cu130, ``benchmarks/_env.py``), so the suites speak for that assembler. A user's
eager process that never runs Inductor assembles with the ptxas Triton bundles (CUDA 12.8
with triton 3.6), and the two have spilled differently on the same sources (README, 1b09797).

    python docs/perf/live_builds_ptxas.py --ptxas torch  >> live.jsonl
    for i in 0 1 2 3; do  # cold compiles: shards in parallel processes
      python docs/perf/live_builds_ptxas.py --ptxas triton --shard $i/4 >> live_$i.jsonl & done
    python docs/perf/live_builds_ptxas.py --table live*.jsonl

Triton keys its cache on the assembler's version, so the two never read each other's
binaries, and the torch run finds what the suites compiled.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def triton_ptxas() -> str:
    """The ptxas bundled with Triton's NVIDIA backend (found without importing triton)."""
    spec = importlib.util.find_spec("triton")
    path = Path(spec.origin).parent / "backends" / "nvidia" / "bin" / "ptxas"
    if not path.is_file():
        raise SystemExit(f"no bundled ptxas at {path}")
    return str(path)


def measure(which: str, shard: int, shards: int) -> None:
    """Print one JSON row per (dtype, head_dim, build) of this shard (every ``shards``-th
    from ``shard``): the assembler and each kernel's figures (or the reason it has none)."""
    if which == "triton":
        os.environ["TRITON_PTXAS_PATH"] = triton_ptxas()
    sys.path.insert(0, str(REPO))
    import itertools
    import subprocess

    import torch

    from benchmarks import resources  # sets TRITON_PTXAS_PATH to torch's, unless set above
    from benchmarks._grid import Missing

    ptxas = os.environ.get("TRITON_PTXAS_PATH") or triton_ptxas()
    version = subprocess.run([ptxas, "--version"], capture_output=True, text=True).stdout
    version = version.strip().splitlines()[-1] if version else "?"

    builds = [resources.DENSE_BUILD, *resources.LIVE_BUILDS]
    combos = list(itertools.product(resources.LIVE_DTYPES, resources.LIVE_HEAD_DIMS, builds))
    for dtype, head_dim, build in combos[shard::shards]:
        make = resources.live_build(build, dtype, head_dim)
        row = dict(
            ptxas=which,
            ptxas_version=version,
            gpu=torch.cuda.get_device_name(),
            dtype=dtype,
            head_dim=head_dim,
            build=build,
        )
        try:
            figures, note = resources._live_figures(make)
            row["kernels"] = {
                k: (v.reason if isinstance(v, Missing) else v) for k, v in figures.items()
            }
            row["note"] = note
        except Exception as exc:  # a build that cannot run: its reason, not a crash
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        torch.cuda.empty_cache()
        print(json.dumps(row), flush=True)


def table(paths: list[str]) -> None:
    """Per build: each kernel's registers / spill bytes under each assembler measured."""
    lines = [ln for path in paths for ln in Path(path).read_text(encoding="utf-8").splitlines()]
    rows = [json.loads(ln) for ln in lines if ln.strip()]
    assemblers = sorted({r["ptxas"] for r in rows})
    by = {(r["ptxas"], r["dtype"], r["head_dim"], r["build"]): r for r in rows}
    keys = sorted({k[1:] for k in by}, key=lambda k: (k[0], k[1], k[2]))
    for r in rows:
        if r["build"] == "dense" and r["dtype"] == "bfloat16" and r["head_dim"] == 128:
            print(f"# {r['ptxas']}: {r['ptxas_version']}")
    print("regs/spill bytes per kernel (forward, bwd_dkdv, bwd_dq), " + " | ".join(assemblers))
    spilling = {a: 0 for a in assemblers}
    for key in keys:
        cells = []
        for a in assemblers:
            r = by.get((a, *key))
            if r is None or "error" in r:
                cells.append("error" if r else "-")
                continue
            parts = []
            for kernel in ("forward", "bwd_dkdv", "bwd_dq"):
                f = r["kernels"].get(kernel)
                if isinstance(f, dict):
                    parts.append(f"{f['registers']}/{f['spills']}")
                    spilling[a] += f["spills"] > 0
                else:
                    parts.append("n/a")
            cells.append(" ".join(parts))
        print(f"{key[0]:9s} D={key[1]:<3d} {key[2]:19s} " + " | ".join(cells))
    print("kernels spilling: " + ", ".join(f"{a} {n}" for a, n in spilling.items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ptxas", choices=("torch", "triton"))
    ap.add_argument("--shard", default="0/1", help="i/n: every n-th build from the i-th")
    ap.add_argument("--table", metavar="JSONL", nargs="+")
    args = ap.parse_args()
    if args.table:
        table(args.table)
    elif args.ptxas:
        shard, shards = (int(x) for x in args.shard.split("/"))
        measure(args.ptxas, shard, shards)
    else:
        ap.error("--ptxas or --table")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
