"""Speed: forward, backward and forward+backward time (ms) of safeattn and its peers.

``SpeedSuite`` (GPU only, absent from the grid without a usable CUDA GPU)
    impl × dtype × head_dim × seq_len × causal × gqa, with B = 16384 // N and
    Hq = 2048 // D (DESIGN.md) and Hkv = Hq // gqa. Peers in the same run: SDPA pinned to
    flash, cuDNN and memory-efficient backends (``torch.nn.attention.sdpa_kernel``), and
    FlexAttention under ``torch.compile`` with dynamo's recompile limit raised, at head_dim
    128 only (NaN, "pruned", at 64: see "Cost" below). SDPA's math backend is left out here
    (a correctness baseline, not a speed peer; numerics.py has it).

``MaskedSpeedSuite`` (GPU only, like SpeedSuite)
    impl × dtype × head_dim × mask: safeattn beside FlexAttention (compiled, at both head
    dims: it is the peer issue 11's targets name) and SDPA pinned to cuDNN and
    memory-efficient (the SDPA backends that take a mask; flash takes none), on four masked
    workloads, all causal (top-left), H = 2048 // D
    (``regress/workloads.py`` holds them; ``benchmarks/_masks.py`` builds the
    masks). Attended (query, key) pairs per head, the FLOP count's basis
    (``metrics.attended_flops``: 4·pairs·H·D forward):

    - ``key_padding_causal``: B=8, N=2048, element b loses round(0.6·N·b/7) keys to left
      padding (0, 176, ..., 1229). safeattn ``attention(causal=True, key_mask=keep)``;
      flex a BlockMask of causal & key kept; SDPA a dense (B, 1, N, N) bool mask.
      8,872,404 pairs.
    - ``sliding_window``: B=2, N=8192, each query sees itself and the 1023 keys before it.
      safeattn ``attention(causal=True, window=(1023, 0))``; flex a window BlockMask; SDPA a
      dense (1, 1, N, N) bool mask. 15,729,664 pairs.
    - ``varlen_docs``: 10 documents of unequal lengths (893 ... 2978 tokens) packed into
      16384 tokens, causal within each document. safeattn ``varlen_attention`` on the packed
      (T, H, D) layout with int32 ``cu_seqlens``; flex a same-document & causal BlockMask on
      one (1, H, 16384, D) sequence; SDPA a dense (1, 1, T, T) bool mask. 17,091,056 pairs.
    - ``bool_mask``: B=4, N=4096, left padding of 0/512/1024/2048 tokens, given as the dense
      (B, 1, N, N) bool mask causal & key kept that transformers' ``sdpa_mask`` passes to
      SDPA (recent transformers do not un-mask the padding's empty rows; see
      ``_masks.unmask_empty_rows``). safeattn ``scaled_dot_product_attention(attn_mask=)``,
      SDPA the same mask, flex a BlockMask of the same structure (built from the (B, N)
      padding mask, as transformers' flex path does). 21,633,280 pairs.

    Every mask (the ``key_mask`` tensor, the dense masks, BlockMasks, ``cu_seqlens``) is
    built once, outside the timed region: a model builds them once per step and reuses them
    in every layer. Rows of the padding have no key: what the SDPA peers return there (0,
    or garbage from cuDNN: DESIGN.md) does not change their time. A peer that refuses a
    mask reports NaN with its error on stderr; nothing is pruned.

``ModelStepSuite`` (GPU only)
    impl (safeattn, sdpa = PyTorch's default SDPA backend choice, flex) × seq_len × padding:
    one training step (forward, float32 cross-entropy over the non-padding labels,
    backward; no optimizer) of the Llama-style decoder of ``benchmarks/_llama.py`` (4
    layers, hidden 2048, 16 query / 4 KV heads of 128, SwiGLU, rotary, vocabulary 8192,
    bf16 weights), B=4. ``padding="left"``: element b loses round(0.5·N·b/3) tokens
    (0–50 %) to left padding, passed as each implementation's natural mask, built inside the
    timed step once per batch as a training loop does (``_llama.attention_for`` documents
    them). ``track_step_ms``: CUDA-event samples of whole steps (parameter gradients reset
    to None between steps, outside the timed region), after two untimed steps that compile,
    autotune and prove that a new batch's mask does not recompile. ``track_peak_bytes``:
    ``torch.cuda.max_memory_allocated()`` during one step less what was allocated before it
    (weights and batch).

``InterpreterSpeedSuite`` (anywhere)
    safeattn under Triton's interpreter at a tiny shape, beside the pure-PyTorch reference:
    slow, but a kernel change that does much more work shows up on a CPU-only machine
    (the gate's end-to-end test relies on this). Timed in CPU time of one thread
    (``time.process_time``), which a busy shared machine disturbs less than wall time.

How the time is measured, and why it is reported through ``track_*``:

- GPU: one CUDA-event pair per call (``_gpu_measure.cuda_event_samples``: do_bench's method, L2
  flushed before each call, but a fixed 30 samples), after one untimed forward+backward
  that compiles and autotunes (so no autotuning or compilation is ever inside the timed
  region) and three more warm-up calls. The GPU sleeps before each start event for twice
  the call's host issue time, so the events time the GPU's work, not the host's speed at
  issuing it (a ~1 ms forward+backward takes the host about as long to issue: versions
  ``*-2``; ``*-1`` timed the slower of the two).
  Backward alone is timed by replaying ``out.backward(grad, retain_graph=True)`` on one
  forward graph; gradients are reset to None before each timed call.
- asv's ``time_*`` benchmarks time the host with a wall-clock timer; even with a custom
  ``timer`` they time whole Python calls, so asynchronous GPU work is either missed or
  timed with launch overhead and synchronisation. We therefore return
  ``{"samples": [ms, ...], "number": 1}`` from ``track_*``: asv stores it like a ``time_*``
  result (median, 99 % CI, quartiles, repeat count), in the unit declared here ("ms").
- The whole grid is measured in ``setup_cache`` (one process, one CUDA context, kernels
  compiled once); each ``track_*`` process only looks its entry up (benchmarks/_grid.py).

Cost of one commit's GPU suites (``run.py --suite gpu``; run.py prints each suite's wall
time and, as it goes, every grid entry's seconds). Measured on an H200 (16 cores), offline,
asv's virtualenv mode, ``gpu_history.sh 8`` (results/nvidia-h200, commits 0ef47cb..f671ea6):

- ``tools/prewarm.py`` first (once): the 84 compiling calls (safeattn and
  FlexAttention speed shapes, safeattn and FlexAttention numerics cases) in 12 processes,
  84 s. Without it the suites compiled one kernel at a time (~1 s per Triton config,
  10-20 s per FlexAttention shape): an estimated 10-13 minutes for a fresh machine's first
  commit (estimated before the prewarm existed, never measured in full).
- first commit after it: 354 s (LiveResources 57, Speed 143, Memory 32, Numerics 120);
  later commits 141-329 s (LiveResources ~11, Speed ~60, Memory ~30, Numerics 40-226).
- on an H100 (16 cores), ``gpu_history.sh 5`` (results/nvidia-h100-80gb-hbm3, 8f24f0f..
  4418cfe): prewarm 105 s, first commit 491 s (LiveResources 80, Speed 178, Memory 43,
  Numerics 186), later commits 191-432 s (Numerics 48-308: see docs/perf's H100 log).
- FlexAttention still runs at head_dim 128 only (``_grid.FLEX_HEAD_DIMS``; the other
  entries are NaN, "pruned"): each shape costs a forward+backward compile.
- MaskedSpeedSuite (16 FlexAttention compiles, prewarmed) and ModelStepSuite (4): on an
  H200, ``run.py --same --suite MaskedSpeedSuite --suite ModelStepSuite`` took 808 s
  (prewarm 229, ModelStep 100, MaskedSpeed 472; each safeattn masked entry 16-35 s, most of
  it tuning, each peer entry 0.3-6 s; docs/perf/masked_model_suites_h200_2026-11-23.log).
  ``python -m tools.smoke`` runs both grids outside asv.

A peer that cannot run a shape (e.g. a backend without GQA support) reports NaN, with the
backend's error as the reason on stderr; it is not pruned from the grid, because which
peer supports what changes with the torch version.
"""

from __future__ import annotations

import itertools
import time

from ._attention import attention_call, attention_inputs, impl_context
from ._env import cuda_usable, quick, require_cuda, use_interpreter
from ._gpu_measure import check_no_compile, cuda_event_samples, dynamo_graphs, step_peak_bytes
from ._grid import (
    GRID_TIMEOUT_S,
    Missing,
    field_tracker,
    lookup,
    measure_grid,
    pass_tracker,
    progress,
    unless_pruned,
)
from ._launches import launch_note, record_launch, tuner_timings
from ._truth import metrics, workloads

# The SDPA math backend is a correctness baseline, not a speed peer (see module doc).
GPU_IMPLS: list[str] = [metrics.OWN_IMPL, *(p for p in metrics.PEERS if p != "sdpa_math")]
GPU_DTYPES = ["float16", "bfloat16"]
GPU_HEAD_DIMS = [64, 128]
GPU_SEQ_LENS = [1024, 4096]
CAUSAL = [False, True]
GQA = [1, 4]  # query heads per key/value head (1: multi-head attention)

PASSES = ("forward", "backward", "fwd_bwd")

# MaskedSpeedSuite: FlexAttention and the SDPA backends that accept a mask.
MASKED_IMPLS: list[str] = [metrics.OWN_IMPL, "flex", "sdpa_cudnn", "sdpa_efficient"]
MASKS: list[str] = list(workloads.MASK_KINDS)
# ModelStepSuite ("sdpa": PyTorch's default backend choice, not pinned).
MODEL_IMPLS: list[str] = [metrics.OWN_IMPL, "sdpa", "flex"]
MODEL_SEQ_LENS = [2048, 4096]
PADDINGS: list[str] = list(workloads.PADDING_LABELS)

# Parameter names of the GPU suites, also those of their launch records (record_launch).
SPEED_PARAM_NAMES = (metrics.IMPL_PARAM, "dtype", "head_dim", "seq_len", "causal", "gqa")
MASKED_PARAM_NAMES = (metrics.IMPL_PARAM, "dtype", "head_dim", "mask")
MODEL_PARAM_NAMES = (metrics.IMPL_PARAM, "seq_len", "padding")
FEATURE_PARAM_NAMES = (metrics.IMPL_PARAM, "dtype", "feature")  # features.FeatureSpeedSuite
_SUITE_OF_TAG = {
    "speed": ("speed.SpeedSuite", SPEED_PARAM_NAMES),
    "masked-speed": ("speed.MaskedSpeedSuite", MASKED_PARAM_NAMES),
    "feature-speed": ("features.FeatureSpeedSuite", FEATURE_PARAM_NAMES),
}

# Tiny interpreter problem: (B, H, N, D), float32.
CPU_SHAPE = (1, 2, 64, 32)
CPU_IMPLS = [metrics.OWN_IMPL, "reference"]


def _medians(times: dict[str, list[float]]) -> str:
    return " ".join(f"{n}={sorted(t)[len(t) // 2]:.3f}ms" for n, t in times.items())


def per_pass(by_combo: dict) -> dict:
    """``{(pass, *combo): samples}`` from ``{combo: {pass: samples}}``; a combo's
    :class:`Missing` reason goes to each of its passes."""
    return {
        (name, *combo): value if isinstance(value, Missing) else value[name]
        for combo, value in by_combo.items()
        for name in PASSES
    }


def _gpu_grid(tag: str, params: tuple, measure, describe) -> dict:
    """A GPU suite's setup_cache grid: ``{combo: measure(*combo)}`` over ``params`` (a
    Missing reason where it raises), CUDA's cached memory freed after each entry."""
    require_cuda()
    import torch

    combos = itertools.product(*params)
    return measure_grid(tag, combos, measure, describe=describe, after=torch.cuda.empty_cache)


def _gpu_times(impl: str, dtype: str, head_dim: int, seq_len: int, causal: bool, gqa: int):
    """{pass: [ms, ...]} for one implementation and shape on cuda:0."""
    fn = attention_call(impl, causal, seq_len, gqa)
    inputs = attention_inputs(impl, dtype, seq_len, head_dim, gqa)
    return _time_passes("speed", (impl, dtype, head_dim, seq_len, causal, gqa), fn, inputs)


def _masked_times(impl: str, dtype: str, head_dim: int, mask: str):
    """{pass: [ms, ...]} for one implementation on one mask kind (masks built first)."""
    from . import _masks

    case = _masks.mask_case(mask, impl, dtype, head_dim)
    combo = (impl, dtype, head_dim, mask)
    return _time_passes("masked-speed", combo, case.call, case.inputs, guard_compiles=True)


def _time_passes(
    tag: str, combo: tuple, fn, inputs: tuple, guard_compiles: bool = False, leaves: tuple = ()
):
    """{pass: [ms, ...]} of ``fn(q, k, v)`` on ``inputs`` = (q, k, v, grad_out), for the
    implementation ``combo[0]``: an untimed forward+backward (compile, autotune, or raise
    if it cannot run), then forward, backward (one graph replayed) and forward+backward.
    ``guard_compiles``: fail rather than time a torch.compile recompile. ``leaves``: further
    tensors that fn's backward gives a gradient (reset to None before each call, as q, k, v)."""
    import torch

    impl = combo[0]
    samples = 10 if quick() else 30
    q, k, v, grad_out = inputs
    grads = [q, k, v, *leaves]
    own = impl == metrics.OWN_IMPL
    before = tuner_timings() if own else {}
    with impl_context(impl):
        # Untimed: compiles, autotunes and raises here if this impl cannot run the shape.
        # Its seconds are logged: where a suite's time goes (compiling, tuning) shows there.
        start = time.perf_counter()
        fn(q, k, v).backward(grad_out)
        torch.cuda.synchronize()
        first = time.perf_counter() - start
        if own:  # which configs the timed calls below run (a tuner flip shows here)
            progress(f"[{tag}] {combo} first call {first:.1f} s, launched {launch_note(before)}")
            record_launch(*_SUITE_OF_TAG[tag], combo)
        graphs = dynamo_graphs() if guard_compiles else 0

        def bench(call):
            return cuda_event_samples(call, samples, grad_to_none=grads)

        graph = fn(q, k, v)  # one forward graph, its backward replayed
        times = {
            "forward": bench(lambda: fn(q, k, v)),
            "backward": bench(lambda: graph.backward(grad_out, retain_graph=True)),
            "fwd_bwd": bench(lambda: fn(q, k, v).backward(grad_out)),
        }
        if guard_compiles:
            check_no_compile(graphs, str(combo))
        return times


def _model_step(impl: str, seq_len: int, padding: str) -> dict:
    """{"step_ms": [ms, ...], "peak_bytes": n} of ModelStepSuite's training step on cuda:0."""
    import torch

    from . import _llama

    cfg = workloads.MODEL
    params = _llama.init_params(cfg, "cuda", "bfloat16")
    batch = _llama.make_batch(cfg, workloads.model_padding(padding, seq_len), seq_len, "cuda")
    weights = list(params.values())
    own = impl == metrics.OWN_IMPL
    before = tuner_timings() if own else {}

    def step():
        return _llama.train_step(params, cfg, batch, impl)

    # Untimed: compiles and autotunes; the second step's new mask objects must reuse the
    # first one's compiled graphs (checked below, around the timed steps).
    start = time.perf_counter()
    for _ in range(2):
        loss = step()
        if not torch.isfinite(loss):
            raise FloatingPointError(f"loss is {loss.item()} ({impl}, padding={padding})")
    torch.cuda.synchronize()
    first = time.perf_counter() - start
    if own:
        combo = (impl, seq_len, padding)
        progress(f"[model-step] {combo} first steps {first:.1f} s, launched {launch_note(before)}")
        record_launch("speed.ModelStepSuite", MODEL_PARAM_NAMES, combo)
    graphs = dynamo_graphs()
    times = cuda_event_samples(step, 10 if quick() else 30, grad_to_none=weights)
    check_no_compile(graphs, f"{impl} training step")

    return {"step_ms": times, "peak_bytes": step_peak_bytes(step, weights)}


def _step_summary(value: dict) -> str:
    median = sorted(value["step_ms"])[len(value["step_ms"]) // 2]
    return f"{median:.1f} ms/step, peak {value['peak_bytes'] / 2**30:.2f} GiB"


class SpeedSuite:
    """GPU time of safeattn and its peers; see the module docstring."""

    params = (GPU_IMPLS, GPU_DTYPES, GPU_HEAD_DIMS, GPU_SEQ_LENS, CAUSAL, GQA)
    param_names = SPEED_PARAM_NAMES
    timeout = GRID_TIMEOUT_S
    version = "speed-2"  # bump when what it measures changes (see _grid)

    def setup(self, cache, *combo):
        lookup(cache, ("forward", *combo))  # not measured: skipped (NaN) here, not failed (_grid)

    def setup_cache(self) -> dict:
        return per_pass(_gpu_grid("speed", self.params, unless_pruned(_gpu_times), _medians))

    track_forward_ms = pass_tracker("forward")
    track_backward_ms = pass_tracker("backward")
    track_fwd_bwd_ms = pass_tracker("fwd_bwd")


class MaskedSpeedSuite:
    """GPU time of safeattn and its peers on masked workloads; see the module docstring."""

    params = (MASKED_IMPLS, GPU_DTYPES, GPU_HEAD_DIMS, MASKS)
    param_names = MASKED_PARAM_NAMES
    timeout = GRID_TIMEOUT_S
    version = "masked-speed-2"  # bump when what it measures changes (see _grid)

    def setup(self, cache, *combo):
        lookup(cache, ("forward", *combo))  # not measured: skipped (NaN) here, not failed (_grid)

    def setup_cache(self) -> dict:
        return per_pass(_gpu_grid("masked-speed", self.params, _masked_times, _medians))

    track_forward_ms = pass_tracker("forward")
    track_backward_ms = pass_tracker("backward")
    track_fwd_bwd_ms = pass_tracker("fwd_bwd")


class ModelStepSuite:
    """Training-step time and peak memory of a small decoder; see the module docstring."""

    params = (MODEL_IMPLS, MODEL_SEQ_LENS, PADDINGS)
    param_names = MODEL_PARAM_NAMES
    timeout = GRID_TIMEOUT_S
    version = "model-step-2"  # bump when what it measures changes (see _grid)

    def setup(self, cache, *combo):
        lookup(cache, combo)  # not measured: skipped (NaN) here, not failed (_grid)

    def setup_cache(self) -> dict:
        return _gpu_grid("model-step", self.params, _model_step, _step_summary)

    track_step_ms = field_tracker("step_ms", samples=True)
    track_peak_bytes = field_tracker("peak_bytes")


if not cuda_usable():
    # pruned: no usable CUDA GPU here (asv then lists no such benchmark)
    del SpeedSuite, MaskedSpeedSuite, ModelStepSuite


def _cpu_times(impl: str, causal: bool) -> dict[str, list[float]]:
    """{pass: [ms, ...]} CPU time of this process (``time.process_time``), torch on one
    thread. Everything here is synchronous and single-threaded, so CPU time is the work the
    calls do, while wall-clock time also counts the waits of a shared machine. Measured on
    2 cores at load ~3 (12 causal forward+backward calls): max/min 1.15 in wall time, 1.05
    in CPU time, medians 232 and 226 ms."""
    import torch

    import safeattn

    torch.set_num_threads(1)  # CPU time of one thread = the work, not spinning helpers

    attend = safeattn.attention if impl == metrics.OWN_IMPL else safeattn.reference.attention
    gen = torch.Generator().manual_seed(0)
    q, k, v, grad_out = (torch.randn(*CPU_SHAPE, generator=gen) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(True)

    def forward():
        return attend(q, k, v, causal=causal)

    forward().backward(grad_out)  # untimed warm-up (first-call costs)
    times: dict[str, list[float]] = {name: [] for name in PASSES}
    for _ in range(2 if quick() else 5):
        for t in (q, k, v):
            t.grad = None
        start = time.process_time()
        out = forward()
        mid = time.process_time()
        out.backward(grad_out)
        end = time.process_time()
        times["forward"].append((mid - start) * 1e3)
        times["backward"].append((end - mid) * 1e3)
        times["fwd_bwd"].append((end - start) * 1e3)
    return times


class InterpreterSpeedSuite:
    """CPU time of safeattn under Triton's interpreter and of the reference, tiny shape."""

    params = (CPU_IMPLS, CAUSAL)
    param_names = (metrics.IMPL_PARAM, "causal")
    timeout = GRID_TIMEOUT_S
    version = "speed-cpu-1"  # bump when what it measures changes (see _grid)

    def setup(self, cache, *combo):
        lookup(cache, ("forward", *combo))  # not measured: skipped (NaN) here, not failed (_grid)

    def setup_cache(self) -> dict:
        use_interpreter()
        by_combo = measure_grid("speed-cpu", itertools.product(*self.params), _cpu_times, _medians)
        return per_pass(by_combo)

    track_forward_ms = pass_tracker("forward")
    track_backward_ms = pass_tracker("backward")
    track_fwd_bwd_ms = pass_tracker("fwd_bwd")
