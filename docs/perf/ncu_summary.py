"""One line pair per kernel of an Nsight Compute text report (``device_session.sh``'s ncu step,
``ncu_dense.py`` under ncu with the stall-reason metrics): duration, SM clock, SM busy, issue
slots busy, achieved occupancy, registers, shared memory, grid, cycles per issued instruction,
the tensor pipe's share where ncu names it, and the five largest stall reasons (cycles per
issued instruction). Kernels under 50 us and PyTorch's elementwise kernels are left out.

    python docs/perf/ncu_summary.py docs/perf/session_ncu_2026-12-03/ncu_*.txt
"""

from __future__ import annotations

import re
import sys

UNITS = {"ns": 1e-3, "us": 1.0, "ms": 1e3}
STALL = re.compile(
    r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio\s+\S+\s+([\d.]+)"
)


def kernels(text: str):
    """(header line, section text) per profiled kernel."""
    for part in re.split(r"\n  (?=\S.*Context \d+, Stream)", text)[1:]:
        yield part.splitlines()[0].strip(), part


def metric(part: str, name: str) -> tuple[str, float] | None:
    m = re.search(rf"^\s*{re.escape(name)}\s+(\S+)?\s+([\d,.]+)\s*$", part, re.M)
    return (m.group(1) or "", float(m.group(2).replace(",", ""))) if m else None


def value(part: str, name: str) -> float | None:
    found = metric(part, name)
    return found[1] if found else None


def main(paths: list[str]) -> None:
    for path in paths:
        with open(path) as f:
            text = f.read()
        profiled = [line for line in text.splitlines() if line.startswith("profiled")]
        print(f"## {path}: {profiled[0] if profiled else '(no profiled line)'}")
        for head, part in kernels(text):
            name = head.split(" (")[0].removeprefix("void ")[:40]
            dur = metric(part, "Duration")
            if dur is None or "elementwise" in name:
                continue
            us = dur[1] * UNITS.get(dur[0], 1.0)
            if us < 50:
                continue
            flat = " ".join(part.split())
            tensor = re.search(r"dominated by its Tensor|Tensor is the highest", flat)
            busy = value(part, "SM Busy")
            stalls = sorted(((k, float(v)) for k, v in STALL.findall(part)), key=lambda kv: -kv[1])
            print(f"{name:40s} {us:8.1f} us  {value(part, 'SM Frequency')} GHz  SM busy {busy} %"
                  f"{' (tensor)' if tensor else ''}  issue {value(part, 'Issue Slots Busy')} %  "
                  f"occupancy {value(part, 'Achieved Occupancy')} %  regs "
                  f"{value(part, 'Registers Per Thread'):.0f}  smem "
                  f"{value(part, 'Dynamic Shared Memory Per Block')} KB  grid "
                  f"{value(part, 'Grid Size'):.0f}  "
                  f"CPI {value(part, 'Warp Cycles Per Issued Instruction')}")  # fmt: skip
            print(f"{'':40s} stalls: " + ", ".join(f"{k} {v:.2f}" for k, v in stalls[:5]))


if __name__ == "__main__":
    main(sys.argv[1:])
