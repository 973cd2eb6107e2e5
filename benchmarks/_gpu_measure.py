"""Measuring on the GPU (a private module: asv imports it but finds no benchmark; torch is
imported inside the functions): CUDA-event timing samples, the peak memory of one step, and
the guard that torch.compile compiled nothing inside a timed region.
"""

from __future__ import annotations


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


# The queue lead before each timed call: this many times the call's host issue time (measured
# in the warm-up), plus a floor, capped (a call that waits for the GPU itself, e.g. a
# .item(), would otherwise ask for a lead as long as its own run).
LEAD_FACTOR = 2.0
LEAD_FLOOR_MS = 0.25
LEAD_CAP_MS = 50.0


def lead_ms(issue_ms: list[float]) -> float:
    """The GPU sleep (ms) to enqueue before each timed call, given the host's issue times of
    the warm-up calls: long enough that the host has enqueued the whole call before the GPU
    reaches the start event. The median, so a first call that compiled does not count."""
    import statistics

    median = statistics.median(issue_ms) if issue_ms else 0.0
    return min(LEAD_CAP_MS, LEAD_FACTOR * median + LEAD_FLOOR_MS)


_CYCLES_PER_MS: dict[int, float] = {}  # by CUDA device index


def _cycles_per_ms() -> float:
    """Clock cycles of ``torch.cuda._sleep`` per millisecond on the current device, timed
    once per process (the GPU's clock, not its nominal rating)."""
    import torch

    device = torch.cuda.current_device()
    if device not in _CYCLES_PER_MS:
        cycles = 2_000_000
        torch.cuda._sleep(cycles)  # first use: module load, clocks up
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        _CYCLES_PER_MS[device] = cycles / max(start.elapsed_time(end), 1e-3)
    return _CYCLES_PER_MS[device]


def cuda_event_samples(fn, samples: int, grad_to_none=(), warmup: int = 3) -> list[float]:
    """``samples`` timings (ms) of ``fn()`` on the current CUDA stream, one CUDA-event pair
    per call, as ``triton.testing.do_bench`` times (L2 flushed before each call, listed
    gradients reset to None outside the timed region) but with a fixed sample count: asv
    stores every sample (``--record-samples``, which the gate's rank test reads), and
    do_bench's time-based count would give thousands for a short kernel.

    GPU time, not host time: before each start event the GPU sleeps (``torch.cuda._sleep``)
    for :func:`lead_ms` of the warm-up calls' host issue time, so the whole call is queued
    before the GPU starts it. Without that lead, a call the host takes about as long to issue
    as the GPU to run (safeattn's ~1 ms forward+backward: 0.87-1.16 ms of host time against
    1.13-1.24 ms on an H200, docs/perf/fwd_bwd_host_bound_h200_2026-11-26.log) is timed at
    the slower of the two, and the host's speed differs between processes: the gate's A/A
    pair 194f3ff -> 2ef2155 blocked on two such rows. A call that synchronises inside is
    still timed with its host time after the synchronisation."""
    import time

    import torch

    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")  # > any L2 (H100: 50 MB)
    issue = []
    for _ in range(warmup):
        torch.cuda.synchronize()  # an idle queue: the issue time is the host's alone
        start = time.perf_counter()
        fn()
        issue.append((time.perf_counter() - start) * 1e3)
    torch.cuda.synchronize()
    cycles = int(lead_ms(issue) * _cycles_per_ms())
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    for start, end in zip(starts, ends, strict=True):
        for t in grad_to_none:
            t.grad = None
        flush.zero_()
        torch.cuda._sleep(cycles)
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
