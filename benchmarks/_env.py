"""The benchmark process's environment, and what this machine can run (a private module:
asv imports it but finds no benchmark; ``benchmarks/__init__`` imports it first).

On import it puts back the ``PYTHONPATH`` entries asv took off ``sys.path``
(:func:`restore_pythonpath`) and pins one Triton cache and one assembler for every benchmark
process (``TRITON_CACHE_DIR``, ``TRITON_PTXAS_PATH``). Then: quick mode, whether CUDA is
usable (decided without importing torch), and the switch to Triton's interpreter for the CPU
suites.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
from functools import cache
from pathlib import Path

# Quick mode (``python tools/run.py --quick``, the CI test): fewer timing samples and
# trials, and a one-slice static audit (resources.py). For checking the suite, not history.
QUICK_ENV = "SAFEATTN_BENCH_QUICK"

# One Triton cache for every benchmark process. Inductor points TRITON_CACHE_DIR at its own
# folder (/tmp/torchinductor_<user>/triton/<device>) in a process the first time it builds a
# Triton kernel, if the variable is unset; safeattn's kernels compiled after that go there,
# those compiled before go to Triton's default. A prewarm worker that compiled a
# FlexAttention peer first and a suite process that runs safeattn first then look in
# different folders, and the suite compiles again what the prewarm built (16-48 s per
# combination on an H100/H200). Pinned here, on import (benchmarks/__init__ imports this
# module first, so the suites and the prewarm's and the tuner's workers have it before
# anything compiles), unless the user set it.
TRITON_CACHE_ENV = "TRITON_CACHE_DIR"
os.environ.setdefault(
    TRITON_CACHE_ENV,
    os.path.join(os.environ.get("TRITON_HOME") or os.path.expanduser("~"), ".triton", "cache"),
)

# One assembler for every benchmark process, for the same reason. Inductor also points
# TRITON_PTXAS_PATH at torch's own ptxas (torch/bin/ptxas) the first time it compiles in a
# process, so a safeattn kernel built before a FlexAttention peer and one built after it were
# assembled by different ptxas. On the H200 (torch 2.11+cu130: CUDA 13.0's ptxas; Triton 3.6
# bundles 12.8's) the same dK/dV sources and configs came out spilling 8 B or none (D=64),
# at 232 registers or 229 (D=128), so LiveResourcesSuite (no peer in its process) and
# SpeedSuite (peers first) measured different binaries
# (docs/perf/live_determinism_h200_2026-11-28.md). Pinned
# here to the one Inductor picks, unless the user set it.
PTXAS_ENV = "TRITON_PTXAS_PATH"


def torch_ptxas(torch_dir: Path | None = None) -> str | None:
    """The ptxas Inductor would point Triton at: torch's own, where it is an executable file
    (torch 2.11 keeps it in torch/bin, 2.13's Inductor looks in torch/_inductor/bin), found
    without importing torch; None where torch ships none (CPU wheels)."""
    if torch_dir is None:
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.origin is None:
            return None
        torch_dir = Path(spec.origin).parent
    for ptxas in (torch_dir / "bin" / "ptxas", torch_dir / "_inductor" / "bin" / "ptxas"):
        if ptxas.is_file() and os.access(ptxas, os.X_OK):
            return str(ptxas)
    return None


if PTXAS_ENV not in os.environ and (_ptxas := torch_ptxas()) is not None:
    os.environ[PTXAS_ENV] = _ptxas


def restore_pythonpath() -> list[str]:
    """Put ``PYTHONPATH``'s entries back on ``sys.path`` (front, in order) when asv took them
    off; returns the entries it restored.

    Why: tools/run.py exposes the machine's torch/triton to asv's virtualenv through
    ``ASV_PYTHONPATH``. asv 0.6.6's ``Environment.run_executable`` turns that into the child's
    ``PYTHONPATH`` and drops ``ASV_PYTHONPATH``; then its ``benchmark.py`` (discover,
    setup_cache, run, run_server), seeing ``PYTHONPATH`` without ``ASV_PYTHONPATH``, removes
    exactly those entries from ``sys.path`` (airspeed-velocity/asv#1463, #1537). Result:
    ``No module named 'torch'`` in every benchmark process when torch lives in a venv or a
    ``pip --target`` directory. ``os.environ`` still holds ``PYTHONPATH``, and this module is
    imported first by the benchmarks package, before anything imports torch, so it undoes the
    removal here.
    Where asv kept the entries (``--python=same``, a fixed asv) nothing changes.
    """
    entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    missing = [p for p in entries if p not in sys.path]
    sys.path[:0] = missing
    return missing


restore_pythonpath()


def quick() -> bool:
    """True when the run was started in quick mode (fewer samples, same grid)."""
    return os.environ.get(QUICK_ENV, "") == "1"


@cache
def cuda_usable() -> bool:
    """Whether torch can use a CUDA GPU here, decided *without importing torch*.

    Every benchmark process evaluates the parameter grids at import, and importing torch
    costs ~1-2 s; with hundreds of track processes per commit that would dominate the run.
    The check: torch is a CUDA build (its ``lib/libtorch_cuda.so`` exists), the driver's
    NVML library reports at least one GPU, and ``CUDA_VISIBLE_DEVICES`` does not hide them
    all. The GPU suites' ``setup_cache`` confirms with ``torch.cuda.is_available()``.
    """
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    torch_dir = Path(next(iter(spec.submodule_search_locations)))
    if not any((torch_dir / "lib").glob("libtorch_cuda*.so")):
        return False
    return _nvml_device_count() > 0


def _nvml_device_count() -> int:
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return 0
    count = ctypes.c_uint(0)
    if nvml.nvmlInit_v2() != 0:
        return 0
    try:
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return 0
        return int(count.value)
    finally:
        nvml.nvmlShutdown()


def require_cuda() -> None:
    """Called at the top of a GPU setup_cache: fail with a clear message, not a CUDA error."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(
            "benchmarks: this machine looked CUDA-capable (torch CUDA build + an NVIDIA GPU "
            "via NVML) but torch.cuda.is_available() is False.\n"
            "HINT: check the driver and CUDA_VISIBLE_DEVICES; on a CPU-only machine only the "
            "CPU suites are in the grid."
        )


def use_interpreter() -> None:
    """Run safeattn's Triton kernels under Triton's interpreter in this process.

    Must happen before safeattn or triton is imported (Triton chooses interpreter or
    compiler when a kernel is decorated, and reads the setting when it is imported: with
    triton imported first, every interpreted call failed with "Cannot call @triton.jit'd
    outside of the scope of a kernel"). The CPU suites call it first thing in setup_cache.
    """
    if os.environ.get("TRITON_INTERPRET") != "1":
        for name in ("safeattn", "triton"):
            if name in sys.modules:
                raise RuntimeError(
                    f"benchmarks: {name} was imported before TRITON_INTERPRET=1 was set, so "
                    "safeattn's kernels are compiled for a GPU, not interpreted; a CPU suite "
                    "cannot run here."
                )
    os.environ["TRITON_INTERPRET"] = "1"
