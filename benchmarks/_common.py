"""Helpers shared by the asv suites (a private module: asv imports it but finds no benchmark).

Three decisions every suite follows, made once here:

1. **Measure once per run, report per parameter.** asv runs every benchmark × parameter
   combination in a fresh process. A GPU suite instead measures its whole grid in
   ``setup_cache`` (one process: one CUDA context, one compile/autotune of each kernel) and
   its ``track_*`` methods only look their value up. The track processes therefore never
   import torch: this module and the suites import it lazily, inside functions.
2. **Samples, not just a number.** A ``track_*`` method that returns
   ``{"samples": [...], "number": 1}`` is stored by asv exactly like a ``time_*`` result: the
   median as the value, plus its 99 % confidence interval, quartiles and repeat count
   (``asv/runner.py`` parses that dict for every benchmark type; ``asv run
   --record-samples`` keeps the raw samples too). :func:`sample_result` builds it.
3. **Cannot run means NaN with a reason.** A combination that a commit or a peer cannot run
   (a peer without GQA, a family this commit's package lacks) is stored by ``setup_cache`` as
   a :class:`Missing` reason. Every suite's ``setup`` calls :func:`lookup`, which prints the
   reason to stderr and raises ``NotImplementedError``: raised in ``setup``, asv records the
   entry as skipped (NaN); raised in the benchmark itself it would count as a failure
   (``null``, "benchmark failed", ``asv run`` exit status 2), as the first GPU history
   showed.

The grids (family names, kernel names, shapes) are fixed in the suites, not read from the
package: asv benchmarks old commits with the current suite, and a commit whose package
lacks a name must produce NaN for it, not a different grid.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

# Quick mode (``python tools/run.py --quick``, the CI test): fewer timing samples and
# trials, and a one-slice static audit (resources.py). For checking the suite, not history.
QUICK_ENV = "SAFEATTN_BENCH_QUICK"

# One Triton cache for every benchmark process. Inductor points TRITON_CACHE_DIR at its own
# folder (/tmp/torchinductor_<user>/triton/<device>) in a process the first time it builds a
# Triton kernel, if the variable is unset; safeattn's kernels compiled after that go there,
# those compiled before go to Triton's default. A prewarm worker that compiled a
# FlexAttention peer first and a suite process that runs safeattn first then look in
# different folders, and the suite compiles again what the prewarm built (16-48 s per
# combination on an H100/H200). Pinned here, on import (the suites, the prewarm's and the
# tuner's workers import this module before anything compiles), unless the user set it.
TRITON_CACHE_ENV = "TRITON_CACHE_DIR"
os.environ.setdefault(
    TRITON_CACHE_ENV,
    os.path.join(os.environ.get("TRITON_HOME") or os.path.expanduser("~"), ".triton", "cache"),
)

# A setup_cache measures a whole grid; asv's default 60 s timeout is per benchmark process.
# The longest grid is the CPU's static audit when its key is not cached: 1,136 s on 2 cores
# (cold Triton cache); read from the audit cache, a second.
GRID_TIMEOUT_S = 3600

# asv's default benchmark version is a hash of the benchmark's own source (track_, setup,
# setup_cache). A change in a shared helper that changes what is measured (the timing in
# cuda_event_samples, the shapes of gpu_problem, the families, the fp64 reference) would not change
# it, while a pure refactor of a suite would, and asv's own tools (publish, compare) drop
# results whose version differs from the suite's. So every suite names its version (a class
# attribute, asv's convention): bump that suite's string when what it measures changes.


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
    imported by every suite before anything imports torch, so it undoes the removal here.
    Where asv kept the entries (``--python=same``, a fixed asv) nothing changes.
    """
    entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    missing = [p for p in entries if p not in sys.path]
    sys.path[:0] = missing
    return missing


restore_pythonpath()


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


def tracks_metric(method):
    """Decorator for ``track_<metric>`` methods: checks ``<metric>`` is in the metric
    registry and sets asv's ``unit`` from it, so names and units have one source."""
    name = method.__name__.removeprefix("track_")
    if name not in metrics.METRICS:
        raise ValueError(f"benchmarks: {method.__qualname__} tracks no metric of METRICS")
    method.unit = metrics.METRICS[name].unit
    return method


# tools/run.py names a file here and prints what the suites append to it while asv runs:
# asv discards the output of a setup_cache that succeeds, and a GPU grid takes minutes.
PROGRESS_ENV = "SAFEATTN_BENCH_PROGRESS"


def progress(line: str) -> None:
    """Report one step of a setup_cache: to stderr (asv shows it if the setup fails) and to
    the progress file that tools/run.py echoes as the run goes."""
    print(line, file=sys.stderr, flush=True)
    path = os.environ.get(PROGRESS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


# FlexAttention compiles a forward and a backward kernel per shape (torch.compile with
# dynamic=False, as users run a fixed shape): the dearest part of a fresh machine's run. The
# speed and memory grids measure it at these head dims only, so that one commit's GPU suites
# fit one device call (benchmarks/speed.py, "Cost"); elsewhere it is NaN with this reason.
FLEX_HEAD_DIMS = (128,)


def pruned_reason(impl: str, head_dim: int) -> str | None:
    """Why (impl, head_dim) is left out of the GPU speed/memory grids, or None."""
    if impl == "flex" and head_dim not in FLEX_HEAD_DIMS:
        return f"pruned: FlexAttention is measured at head_dim {FLEX_HEAD_DIMS} only (compile cost)"
    return None


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

    Must happen before safeattn is imported (Triton chooses interpreter or compiler when a
    kernel is decorated). The CPU suites call it first thing in setup_cache.
    """
    if "safeattn" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError(
            "benchmarks: safeattn was imported before TRITON_INTERPRET=1 was set, so its "
            "kernels are compiled for a GPU, not interpreted; a CPU suite cannot run here."
        )
    os.environ["TRITON_INTERPRET"] = "1"


@dataclass(frozen=True)
class Missing:
    """Why a grid entry has no value (stored in the setup_cache result instead of one)."""

    reason: str


def reason_of(exc: BaseException) -> str:
    """A one-line reason from an exception (first line of its message)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


# A GPU suite measures its whole grid in setup_cache, whatever asv's --bench selected.
# ``safeattn-gate --confirm`` re-measures only the rows it flagged: it sets this to a JSON
# list of regexes on a combination's asv form, ``('safeattn', 'bfloat16', 128, 'varlen_docs')``
# (asv's ``name(repr, ...)`` without the name), and the grid skips every other combination.
ONLY_ENV = "SAFEATTN_BENCH_ONLY"


def asv_form(combo: tuple) -> str:
    """A combination as asv names it after the benchmark: ``(repr0, repr1, ...)``."""
    return "(" + ", ".join(repr(value) for value in combo) + ")"


def _only_patterns() -> list[str]:
    text = os.environ.get(ONLY_ENV, "")
    if not text:
        return []
    patterns = json.loads(text)
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise ValueError(f"${ONLY_ENV} must be a JSON list of regexes, got {text!r}")
    return patterns


def measure_grid(
    tag: str,
    combos: Iterable[tuple],
    measure: Callable[..., Any],
    describe: Callable[[Any], str],
    label: Callable[[tuple], str] = str,
    after: Callable[[], Any] | None = None,
) -> dict:
    """A suite's ``setup_cache`` loop: ``{combo: measure(*combo)}``, with a :class:`Missing`
    reason where ``measure`` raises (one entry failing must not lose the others), a progress
    line per entry (``label(combo)``, ``describe(value)``, its seconds) and one for the whole
    grid. ``after()`` runs after every entry (the GPU suites free cached memory there)."""
    measured: dict = {}
    grid_start = time.perf_counter()
    only = _only_patterns()
    skipped = 0
    for combo in combos:
        if only and not any(re.search(p, asv_form(combo)) for p in only):
            measured[combo] = Missing(f"not selected (${ONLY_ENV})")
            skipped += 1
            continue
        start = time.perf_counter()
        try:
            measured[combo] = measure(*combo)
            summary = describe(measured[combo])
        except Exception as exc:  # a peer refusing a shape, a commit lacking an API
            measured[combo] = Missing(reason_of(exc))
            summary = f"not measured: {reason_of(exc)}"
        progress(f"[{tag}] {label(combo)}: {summary} ({time.perf_counter() - start:.1f} s)")
        if after is not None:
            after()
    if skipped:
        progress(f"[{tag}] {skipped} combination(s) not selected by ${ONLY_ENV}: skipped")
    progress(f"[{tag}] grid measured in {time.perf_counter() - grid_start:.0f} s")
    return measured


def unless_pruned(measure: Callable[..., Any]) -> Callable[..., Any]:
    """``measure(impl, dtype, head_dim, ...)`` for the speed/memory grids that raises
    ``NotImplementedError`` with :func:`pruned_reason` for a pruned entry instead."""

    def checked(impl: str, dtype: str, head_dim: int, *rest: Any) -> Any:
        reason = pruned_reason(impl, head_dim)
        if reason is not None:
            raise NotImplementedError(reason)
        return measure(impl, dtype, head_dim, *rest)

    return checked


def lookup(cache: dict, key: tuple) -> Any:
    """The value measured for ``key`` in setup_cache, or NaN (skip) with the reason on stderr."""
    value = cache.get(key, Missing(f"no measurement for {key} (grid changed mid-run?)"))
    if isinstance(value, Missing):
        print(f"not measured {key}: {value.reason}", file=sys.stderr)
        raise NotImplementedError(value.reason)
    return value


def describe_launch(launched: dict, new_timings: dict) -> str:
    """The configs one forward+backward launched, and what the tuner timed to choose them,
    for the progress log: ``forward=M128-N64-w4-s3(table) ...; tuned forward: M128-N64-w4-s3
    0.412 ms, ...``. The tracked figures are only the consequence of a choice; when they
    move between runs of identical kernels (a tuner flip, seen on an H100), this shows why.

    ``launched``: kernel name -> object with a ``config`` and, from the commits that have
    tuning tables, a ``source`` ("table", "cache", "tuned", "single": where the config came
    from) (``launch.launched_kernels()``); ``new_timings``: tune key (kernel name first) ->
    ``[(config, median ms), ...]``, the keys this call tuned (``launch.tuning_timings()``
    after, less before).
    """
    configs = (
        f"{name}={getattr(res, 'config', '?')}"
        + (f"({res.source})" if getattr(res, "source", "") else "")
        for name, res in sorted(launched.items())
    )
    parts = [" ".join(configs)]
    for key, timings in new_timings.items():
        if len(timings) > 1:  # one candidate (or single-config mode): nothing was timed
            times = ", ".join(f"{cfg} {ms:.3f} ms" for cfg, ms in timings)
            parts.append(f"tuned {key[0]}: {times}")
    return "; ".join(parts)


def tuner_timings() -> dict:
    """What safeattn's tuner has timed so far in this process (``launch.tuning_timings()``;
    ``{}`` for a commit older than it)."""
    from safeattn.kernels import launch

    return dict(getattr(launch, "tuning_timings", dict)())


def launch_note(before: dict) -> str:
    """:func:`describe_launch` of safeattn's latest launch and what was tuned since
    ``before`` (:func:`tuner_timings`). Never raises: a log line must not cost a measurement."""
    try:
        from safeattn.kernels import launch

        new = {key: t for key, t in tuner_timings().items() if key not in before}
        return describe_launch(launch.launched_kernels(), new)
    except Exception as exc:
        return f"(configs not shown: {reason_of(exc)})"


# tools/run.py names a file here per commit and copies what the GPU suites append to it
# into that commit's versions-<sha>.json sidecar (``safeattn_launches``): the configs each
# safeattn combination ran with, so the gate can say "config changed: A -> B" on a flagged
# row (regress/compare.py). asv itself stores only numbers.
LAUNCHES_ENV = "SAFEATTN_BENCH_LAUNCHES"


def record_launch(suite: str, param_names: Iterable[str], combo: tuple) -> None:
    """Append ``{"suite", "params", "configs", "sources"}`` of safeattn's latest launch of each
    kernel (``launch.launched_kernels()``; sources from the commits that have tuning tables)
    to ``$SAFEATTN_BENCH_LAUNCHES``, if set. ``suite``: as the results name it
    (``"speed.SpeedSuite"``). Never raises: a record must not cost a measurement."""
    import json

    path = os.environ.get(LAUNCHES_ENV)
    if not path:
        return
    try:
        from safeattn.kernels import launch

        launched = sorted(launch.launched_kernels().items())
        row = {
            "suite": suite,
            "params": dict(zip(param_names, combo, strict=True)),
            "configs": {name: str(res.config) for name, res in launched},
            "sources": {name: str(getattr(res, "source", "")) for name, res in launched},
        }
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
    except Exception as exc:
        progress(f"(launched configs of {suite} {combo} not recorded: {reason_of(exc)})")


def sample_result(samples: list[float]) -> dict:
    """asv's samples protocol: asv stores the median with its statistics (see module doc)."""
    clean = [float(s) for s in samples]
    if not clean or not all(math.isfinite(s) for s in clean):
        raise ValueError(f"benchmarks: timing samples must be finite and non-empty, got {clean}")
    return {"samples": clean, "number": 1}


def step_peak_bytes(step, weights) -> int:
    """Peak CUDA memory of one ``step()`` beyond what was allocated before it (weights, batch):
    gradients of ``weights`` reset to None and the caching allocator emptied first."""
    import torch

    for p in weights:
        p.grad = None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    allocated = torch.cuda.memory_allocated()
    step()
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated() - allocated)


def cuda_event_samples(fn, samples: int, grad_to_none=(), warmup: int = 3) -> list[float]:
    """``samples`` timings (ms) of ``fn()`` on the current CUDA stream, one CUDA-event pair
    per call, as ``triton.testing.do_bench`` times (L2 flushed before each call, listed
    gradients reset to None outside the timed region) but with a fixed sample count: asv
    stores every sample (``--record-samples``, which the gate's rank test reads), and
    do_bench's time-based count would give thousands for a short kernel."""
    import torch

    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")  # > any L2 (H100: 50 MB)
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    for start, end in zip(starts, ends, strict=True):
        for t in grad_to_none:
            t.grad = None
        flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in zip(starts, ends, strict=True)]


def dynamo_graphs() -> int:
    """Graphs ``torch.compile`` has compiled in this process so far (dynamo's own counter).

    The masked and model-step suites compare it before and after their timed calls: a
    guard that fails on a new mask object would recompile there, and the samples would time
    the compiler (or, past the recompile limit, the eager fallback) instead of the kernel.
    """
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def check_no_compile(graphs_before: int, what: str) -> None:
    """Raise (a Missing reason in the grid) if anything was compiled since ``graphs_before``."""
    compiled = dynamo_graphs() - graphs_before
    if compiled:
        raise RuntimeError(
            f"torch.compile compiled {compiled} graph(s) inside the timed region of {what} "
            "(a guard failed on a new input): these samples would time the compiler"
        )


def dtype_of(name: str):
    """``"bfloat16"`` -> ``torch.bfloat16``."""
    import torch

    return getattr(torch, name)


# --- GPU attention problems and implementations (speed and memory suites) ---------------


def gpu_problem(seq_len: int, head_dim: int, gqa: int) -> tuple[int, int, int]:
    """(batch, query heads, key/value heads) of a GPU benchmark shape, as DESIGN.md fixes them:
    B = 16384 // N tokens per batch and Hq = 2048 // D so that work per call is constant
    across shapes; ``gqa`` query heads share one key/value head."""
    heads_q = workloads.heads_for(head_dim)
    return 16384 // seq_len, heads_q, heads_q // gqa


def attention_inputs(impl: str, dtype_name: str, seq_len: int, head_dim: int, gqa: int):
    """q (B, Hq, N, D), k and v (B, Hkv, N, D) and an upstream gradient (B, Hq, N, D), all
    contiguous on cuda:0, q/k/v requiring grad. Seeded: every impl sees the same values."""
    import torch

    batch, heads_q, heads_kv = gpu_problem(seq_len, head_dim, gqa)
    gen = torch.Generator(device="cuda").manual_seed(0)
    dtype = dtype_of(dtype_name)

    def randn(heads: int):
        return torch.randn(
            batch, heads, seq_len, head_dim, device="cuda", dtype=dtype, generator=gen
        )

    q, k, v = randn(heads_q), randn(heads_kv), randn(heads_kv)
    grad_out = randn(heads_q)
    for t in (q, k, v):
        t.requires_grad_(True)
    return q, k, v, grad_out


_SDPA_BACKENDS = {
    "sdpa_flash": "FLASH_ATTENTION",
    "sdpa_cudnn": "CUDNN_ATTENTION",
    "sdpa_efficient": "EFFICIENT_ATTENTION",
    "sdpa_math": "MATH",
}


def impl_context(impl: str):
    """The context manager a measurement of ``impl`` runs inside: the SDPA peers pin their
    backend with ``torch.nn.attention.sdpa_kernel`` (entered once, outside the timed calls)."""
    from contextlib import nullcontext

    if impl in _SDPA_BACKENDS:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel([getattr(SDPBackend, _SDPA_BACKENDS[impl])])
    return nullcontext()


def attention_call(impl: str, causal: bool, seq_len: int, gqa: int):
    """``fn(q, k, v) -> out`` for ``impl`` ("safeattn" or a peer of
    ``regress.metrics.PEERS``), causal meaning top-left as in SDPA's ``is_causal``
    (square shapes here, so top-left and bottom-right agree)."""
    import torch

    if impl == "safeattn":
        import safeattn

        return lambda q, k, v: safeattn.attention(q, k, v, causal=causal)
    if impl in _SDPA_BACKENDS:
        sdpa = torch.nn.functional.scaled_dot_product_attention
        enable_gqa = gqa > 1
        return lambda q, k, v: sdpa(q, k, v, is_causal=causal, enable_gqa=enable_gqa)
    if impl == "flex":
        flex = compiled_flex()
        block_mask = _causal_block_mask(seq_len) if causal else None
        enable_gqa = gqa > 1
        return lambda q, k, v: flex(q, k, v, block_mask=block_mask, enable_gqa=enable_gqa)
    raise ValueError(f"benchmarks: unknown impl {impl!r}")


@cache
def compiled_flex(dynamic: bool = False):
    """FlexAttention compiled once per process. Dynamo's recompile limit (8 by default) is
    raised: past it, dynamo silently falls back to an eager path that materialises the
    whole score matrix (DESIGN.md, known pitfalls), and we would time that instead. The
    speed and memory suites compile it per shape (``dynamic=False``, as users run a fixed
    shape); numerics, whose every case has new lengths, uses ``dynamic=True``."""
    import torch
    import torch._dynamo.config as dynamo_config
    import torch._functorch.config as functorch_config
    from torch.nn.attention.flex_attention import flex_attention

    limits = ("recompile_limit", "cache_size_limit")
    limits += ("accumulated_recompile_limit", "accumulated_cache_size_limit")
    for name in limits:
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, 1024)
    # The compiled backward donates (frees) its saved buffers unless told not to, and then
    # refuses ``backward(retain_graph=True)``: the backward-only timing replays one graph.
    functorch_config.donated_buffer = False
    return torch.compile(flex_attention, dynamic=dynamic)


@cache
def _causal_block_mask(seq_len: int):
    from torch.nn.attention.flex_attention import create_block_mask

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    return create_block_mask(causal, None, None, seq_len, seq_len, device="cuda")
