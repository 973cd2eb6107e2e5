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
