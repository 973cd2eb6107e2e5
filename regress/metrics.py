"""The metric registry: one source of truth for what each asv benchmark measures, its unit
and which direction is better. asv assumes lower is better for every number; the gate and
the dashboard read the direction from here instead.

Benchmark naming convention (``benchmarks/``): ``<module>.<Class>.track_<metric>`` where
``<metric>`` is a key of :data:`METRICS`. Every suite that compares implementations has a
parameter named ``impl`` (:data:`IMPL_PARAM`); rows whose impl is not :data:`OWN_IMPL` are
peers: context for ratios, never a gate failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Better = Literal["lower", "higher"]
Kind = Literal["speed", "memory", "resource", "safety", "accuracy"]


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    better: Better
    kind: Kind
    label: str
    must_be_zero: bool = False  # any value above 0 for safeattn is a failure


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("forward_ms", "ms", "lower", "speed", "forward time"),
        Metric("backward_ms", "ms", "lower", "speed", "backward time"),
        Metric("fwd_bwd_ms", "ms", "lower", "speed", "forward+backward time"),
        Metric("peak_extra_bytes", "bytes", "lower", "memory", "peak extra GPU memory (fwd+bwd)"),
        Metric("shared_bytes", "bytes", "lower", "resource", "shared memory per block"),
        Metric("registers", "count", "lower", "resource", "registers per thread"),
        Metric("spills", "bytes", "lower", "resource", "register spill stores+loads"),
        Metric("nonfinite_rate", "fraction", "lower", "safety", "non-finite rate", True),
        Metric("wrong_result_rate", "fraction", "lower", "safety", "wrong-result rate", True),
        Metric("max_rel_error", "relative", "lower", "accuracy", "max error vs fp64 reference"),
        # speed.ModelStepSuite: one training step of a small decoder (forward + loss + backward).
        Metric("step_ms", "ms", "lower", "speed", "training step time"),
        Metric("peak_bytes", "bytes", "lower", "memory", "peak extra GPU memory (training step)"),
    )
}

IMPL_PARAM = "impl"
OWN_IMPL = "safeattn"
PEERS: tuple[str, ...] = ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_math", "flex")


def metric_for(benchmark: str) -> Metric | None:
    """``"speed.SpeedSuite.track_forward_ms"`` -> the forward_ms Metric (None if unknown)."""
    method = benchmark.rsplit(".", 1)[-1]
    if not method.startswith("track_"):
        return None
    return METRICS.get(method[len("track_") :])


def asv_builtin_kind(benchmark: str) -> Kind | None:
    """The kind of one of asv's own benchmark types, outside the registry, from its
    method's prefix: ``time_`` -> ``"speed"`` (seconds), ``mem_`` / ``peakmem_`` ->
    ``"memory"`` (bytes); both lower-is-better by definition. None for anything else (an
    unregistered ``track_`` has no known kind or direction)."""
    method = benchmark.rsplit(".", 1)[-1]
    if method.startswith("time_"):
        return "speed"
    if method.startswith(("mem_", "peakmem_")):
        return "memory"
    return None


def kind_of(benchmark: str, metric: str | None) -> Kind | None:
    """A result row's kind: its registered metric's, else :func:`asv_builtin_kind`."""
    if metric in METRICS:
        return METRICS[metric].kind
    return asv_builtin_kind(benchmark)


def attended_flops(pairs: float, heads: int, head_dim: int, pass_: str) -> float:
    """FLOPs of attention over ``pairs`` attended (query, key) pairs per head, as DESIGN.md
    counts them: fwd = 4·pairs·H·D (two matmuls, 2 FLOPs per multiply-add), bwd = 2.5 ×
    fwd, fwd_bwd = 3.5 × fwd. ``pass_`` is ``"forward"``, ``"backward"`` or ``"fwd_bwd"``.

    Masked workloads count only the pairs that attend
    (:meth:`regress.workloads.MaskWorkload.attended_pairs`): skipped blocks are
    work a kernel should not do, not work it did.
    """
    factor = {"forward": 1.0, "backward": 2.5, "fwd_bwd": 3.5}[pass_]
    return 4.0 * pairs * heads * head_dim * factor


def attention_flops(
    batch: int, heads: int, seq_q: int, seq_k: int, head_dim: int, causal: bool, pass_: str
) -> float:
    """FLOPs of one dense attention call, as DESIGN.md counts them: :func:`attended_flops`
    of B·Nq·Nk pairs, halved when causal."""
    pairs = batch * seq_q * seq_k * (0.5 if causal else 1.0)
    return attended_flops(pairs, heads, head_dim, pass_)


def tflops(time_ms: float, flops: float) -> float:
    """TFLOP/s from a time in milliseconds."""
    return flops / (time_ms * 1e-3) / 1e12
