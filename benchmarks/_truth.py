"""The checkout's single sources of truth, loaded by file path (a private module: asv
imports it but finds no benchmark): the metric registry, the GPU limits, the workloads and
the static audit's cache. tests/asv_helpers.py's ``TRUTH_FILES`` lists the same files.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def _load_truth(relative: str, module_name: str):
    """Load one of the checkout's dependency-free single sources of truth by file path
    (``relative`` to the repository root).

    asv's environment holds only the wheel of the commit under test: ``regress`` is not in
    it, and importing ``safeattn.gpu_limits`` would run ``safeattn/__init__`` there. Loading
    from *this* checkout also gives the suite's own commit's table, not that of the commit
    under test.
    """
    path = Path(__file__).resolve().parent.parent / relative
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"benchmarks: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses look their module up while executing it
    spec.loader.exec_module(module)
    return module


metrics = _load_truth("regress/metrics.py", "_safeattn_bench_metrics")
gpu_limits = _load_truth("safeattn/gpu_limits.py", "_safeattn_bench_gpu_limits")
workloads = _load_truth("regress/workloads.py", "_safeattn_bench_workloads")
# The static audit's cache (standard library only): this checkout's, whatever commit the
# suite measures (resources.StaticAuditSuite applies it to that commit's package).
audit_cache = _load_truth("safeattn/audit_cache.py", "_safeattn_bench_audit_cache")
