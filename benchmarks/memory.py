"""Memory: peak extra GPU bytes of one forward+backward, safeattn beside its peers.

``MemorySuite`` (GPU only; absent without a usable CUDA GPU) has SpeedSuite's grid
(impl × dtype × head_dim × seq_len × causal × gqa, shapes from DESIGN.md), FlexAttention
pruned the same way (``_grid.FLEX_HEAD_DIMS``: it compiles per shape).

The number is ``torch.cuda.max_memory_allocated()`` during ``out = f(q, k, v);
out.backward(grad)`` minus what was allocated just before (inputs and upstream gradient),
so it counts the output, saved activations, workspaces and the q/k/v gradients. asv's
``peakmem_*`` is not used: it reports the host process's RSS, which never sees GPU memory.
One untimed forward+backward runs first so that autotuning's trial buffers and compiled
FlexAttention's first-call work are not counted. The value is deterministic for a given
commit and torch, so it is a plain number (no samples).

A peer that cannot run a shape reports NaN with its error as the reason (see speed.py).
"""

from __future__ import annotations

import itertools

from ._attention import attention_call, attention_inputs, impl_context
from ._env import cuda_usable, require_cuda
from ._grid import GRID_TIMEOUT_S, lookup, measure_grid, tracks_metric, unless_pruned
from ._truth import metrics
from .speed import CAUSAL, GPU_DTYPES, GPU_HEAD_DIMS, GPU_IMPLS, GPU_SEQ_LENS, GQA


def _peak_extra_bytes(
    impl: str, dtype: str, head_dim: int, seq_len: int, causal: bool, gqa: int
) -> int:
    import torch

    fn = attention_call(impl, causal, seq_len, gqa)
    q, k, v, grad_out = attention_inputs(impl, dtype, seq_len, head_dim, gqa)
    with impl_context(impl):
        fn(q, k, v).backward(grad_out)  # untimed warm-up: compile / autotune
        for t in (q, k, v):
            t.grad = None
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        fn(q, k, v).backward(grad_out)
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated() - before)


class MemorySuite:
    """Peak extra GPU memory of forward+backward; see the module docstring."""

    params = (GPU_IMPLS, GPU_DTYPES, GPU_HEAD_DIMS, GPU_SEQ_LENS, CAUSAL, GQA)
    param_names = (metrics.IMPL_PARAM, "dtype", "head_dim", "seq_len", "causal", "gqa")
    timeout = GRID_TIMEOUT_S
    version = "memory-1"  # bump when what it measures changes (see _grid)

    def setup(self, cache, *combo):
        lookup(cache, combo)  # not measured: skipped (NaN) here, not failed (_grid)

    def setup_cache(self) -> dict:
        require_cuda()
        import torch

        return measure_grid(
            "memory",
            itertools.product(*self.params),
            unless_pruned(_peak_extra_bytes),
            describe=lambda n: f"{n / 2**20:.1f} MiB",
            after=torch.cuda.empty_cache,
        )

    @tracks_metric
    def track_peak_extra_bytes(self, cache, *combo):
        return lookup(cache, combo)


if not cuda_usable():
    del MemorySuite  # pruned: no usable CUDA GPU here
