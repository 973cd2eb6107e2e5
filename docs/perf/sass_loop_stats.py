"""Loop statistics of a compiled kernel's SASS (no GPU needed): for every loop (a backward
branch) that holds tensor-core instructions, its length in instructions, its HGMMAs and its
local-memory loads/stores (spills), and whether ptxas serialised the wgmma.

    python docs/perf/sass_loop_stats.py kernel.cubin [kernel.ptx]

Used for docs/perf/dkdv_h100_2026-11-25.md on cubins cross-compiled for sm90 with Triton's
bundled cuobjdump/ptxas (triton 3.6, the GPU machines' version). With a .ptx, ptxas is run
on it and its C7515 message ("wgmma.mma_async instructions are serialized") is reported.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import triton

BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


def instructions(cubin: str) -> list[tuple[int, str]]:
    sass = subprocess.run(
        [str(BIN / "cuobjdump"), "-sass", cubin], capture_output=True, text=True, check=True
    ).stdout
    found = (re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line) for line in sass.splitlines())
    return [(int(m.group(1), 16), m.group(2)) for m in found if m]


def loops(ins: list[tuple[int, str]]) -> list[tuple[int, int, int]]:
    """(length, HGMMA count, LDL/STL count) of each loop with tensor-core work."""
    where = {addr: i for i, (addr, _) in enumerate(ins)}
    out = set()
    for i, (addr, text) in enumerate(ins):
        m = re.search(r"\bBRA\b.*?(0x[0-9a-f]+)", text)
        if m and int(m.group(1), 16) <= addr and int(m.group(1), 16) in where:
            body = [t for _, t in ins[where[int(m.group(1), 16)] : i + 1]]
            hgmma = sum("HGMMA" in t for t in body)
            spills = sum(bool(re.search(r"\b(LDL|STL)", t)) for t in body)
            if hgmma:
                out.add((len(body), hgmma, spills))
    return sorted(out)


def serialised(ptx: str) -> bool:
    text = subprocess.run(
        [str(BIN / "ptxas"), "-v", "--gpu-name", "sm_90a", ptx, "-o", "/dev/null"],
        capture_output=True, text=True, check=False,
    ).stderr  # fmt: skip
    return "C7515" in text


def main(argv: list[str]) -> int:
    ins = instructions(argv[0])
    spills = sum(bool(re.search(r"\b(LDL|STL)", t)) for _, t in ins)
    line = f"{Path(argv[0]).name}: {len(ins)} instructions, {spills} LDL/STL"
    if len(argv) > 1:
        line += f", wgmma serialised (C7515): {serialised(argv[1])}"
    print(line)
    for length, hgmma, ldl in loops(ins):
        print(f"   loop of {length:5d} instructions: {hgmma:3d} HGMMA, {ldl:3d} LDL/STL")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
