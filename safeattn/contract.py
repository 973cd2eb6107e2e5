"""Checking an implementation against safeattn's contract on the adversarial families'
cases (:mod:`safeattn.families`): forward and backward, compared with
:mod:`safeattn.reference` in float64.

:func:`check` judges one case; :func:`rates` turns trials into the ``nonfinite_rate`` /
``wrong_result_rate`` / ``max_rel_error`` metrics of the numerics benchmarks.

Plugging in an implementation (:func:`as_impl`): a module with ``attention`` and
``varlen_attention`` (pass ``safeattn`` itself, or ``safeattn.reference``: varlen cases then go
through its varlen_attention); an :class:`Impl`; or a callable with safeattn.attention's
signature (``impl(q, k, v, *, causal, window, key_mask, attn_mask, scale, ...) -> out``) whose
``varlen`` attribute, if any, serves varlen cases. Without a varlen entry point, varlen cases
are padded into one dense call with an exact bool ``attn_mask``. Peers that only take one dense
mask (SDPA backends, FlexAttention) are wrapped with :func:`mask_adapter`, which hands them the
exact mask from :func:`safeattn._inputs.allowed_mask`.

Tolerance rule (DESIGN.md item 6). For each of out, dq, dk, dv the error is
``max|impl - ref64|`` over the finite entries, divided by ``max|ref64|`` or, if larger, the
natural magnitude the result is built from (see ``_natural_scales``: a gradient that cancels
to ~0 must not turn rounding noise into a huge relative error). It must not exceed 2x (out)
or 3x (gradients) the same error of PyTorch's own math in the same dtype
(``reference.attention(..., upcast=False)``), plus a few unit roundoffs of the dtype. Where
PyTorch's same-dtype math is itself non-finite (float16 ``q @ k^T`` overflows in the
large-logit family), the float32-upcast reference stands in for it.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from safeattn import reference
from safeattn._inputs import allowed_mask, check_attention, check_varlen, sequence_problems
from safeattn.families import VARLEN_POSITIONAL, Case, Size, make_case

OUTPUT_FACTOR = 2.0  # DESIGN.md item 6
GRAD_FACTOR = 3.0
ROUNDOFF_UNITS = 4  # the "tiny epsilon": a few unit roundoffs of the dtype


# --------------------------------------------------------------------------- data types


@dataclass(frozen=True)
class Impl:
    """An implementation under test: ``attention`` has safeattn.attention's signature;
    ``varlen`` safeattn.varlen_attention's (None: varlen cases are padded into dense calls).
    ``dropout_keep(q, k, dropout_p, seed)``: the bool (B, Hq, Nq, Nk) keep mask its dropout
    draws after ``torch.manual_seed(seed)``; without it a dropout case cannot be judged
    (safeattn's own is known: :func:`safeattn_dropout_keep`)."""

    name: str
    attention: Callable[..., Tensor]
    varlen: Callable[..., Tensor] | None = None
    dropout_keep: Callable[[Tensor, Tensor, float, int], Tensor] | None = None


@dataclass(frozen=True)
class Verdict:
    nonfinite: bool  # a non-finite value in out/dq/dk/dv (the families expect all finite)
    wrong: bool  # all finite, but the contract is violated
    max_rel_error: float  # worst relative error vs float64 over out/dq/dk/dv (finite entries)
    detail: str


# --------------------------------------------------------------------------- implementations


def mask_adapter(name: str, fn: Callable[..., Tensor]) -> Impl:
    """Wrap a peer that takes one dense mask into an :class:`Impl`.

    ``fn(q, k, v, mask, scale) -> out`` gets q (B, Hq, Nq, D), k/v (B, Hkv, Nk, D) and ``mask``
    (B, Hq, Nq, Nk): bool (True = attend) or, when the call has a float attn_mask, additive
    float (-inf where excluded) in q's dtype; e.g. SDPA with ``enable_gqa=True``.

    Soft-capping: a ``fn`` with a ``softcap`` parameter gets the case's cap as
    ``softcap=`` (a float, 0.0 = off: it caps the scores before adding a float ``mask``);
    without one, a case with a cap raises NotImplementedError (the peer cannot run it).
    The parameter is found by inspection, so the benchmarks can hand the same function to
    older commits, whose adapter calls ``fn(q, k, v, mask, scale)``.
    """
    takes_softcap = "softcap" in inspect.signature(fn).parameters

    def attention(q: Tensor, k: Tensor, v: Tensor, **kwargs: Any) -> Tensor:
        p = check_attention(q, k, v, **kwargs, allow_float64=True)
        if p.softcap and not takes_softcap:
            raise NotImplementedError(
                f"safeattn: {name} takes no softcap (logit soft-capping, here {p.softcap}), "
                "so it cannot run this case.\nHINT: give its function a softcap parameter "
                "(a float, 0.0 = off) if the peer can cap scores."
            )
        mask = allowed_mask(p)
        if p.attn_mask is not None and p.attn_mask.dtype != torch.bool:
            neg_inf = torch.tensor(float("-inf"), dtype=q.dtype, device=q.device)
            mask = torch.where(mask, p.attn_mask.to(q.dtype), neg_inf)
        if takes_softcap:
            return fn(q, k, v, mask, p.scale, softcap=p.softcap)
        return fn(q, k, v, mask, p.scale)

    return Impl(name, attention)


@contextlib.contextmanager
def _seeded(seed: int, device: torch.device) -> Iterator[None]:
    """torch.manual_seed(seed) inside, the caller's RNG state (CPU and ``device``) after."""
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def safeattn_dropout_keep(q: Tensor, k: Tensor, dropout_p: float, seed: int) -> Tensor:
    """safeattn's keep mask, bool (B, Hq, Nq, Nk), for a dense call on q (B, Hq, Nq, D) and
    k (B, Hkv, Nk, D) after ``torch.manual_seed(seed)``: the call's first draw from the
    device's generator is its Philox seed (``kernels.ops.dropout_seed``)."""
    from safeattn.kernels import ops, passes

    with _seeded(seed, q.device):
        philox = ops.dropout_seed(q.device)
    b, hq, nq, _ = q.shape
    return passes.dropout_keep(philox, b, hq, nq, k.shape[2], dropout_p)


def reference_dropout_keep(q: Tensor, k: Tensor, dropout_p: float, seed: int) -> Tensor:
    """safeattn.reference's keep mask after ``torch.manual_seed(seed)`` (its one draw)."""
    with _seeded(seed, q.device):
        return reference.draw_dropout_keep((*q.shape[:3], k.shape[2]), q.device, dropout_p)


def _dropout_keep_of(impl: Impl) -> Callable[[Tensor, Tensor, float, int], Tensor] | None:
    """The impl's own keep-mask function, else the one known for its attention function."""
    from safeattn import api

    known = {api.attention: safeattn_dropout_keep, reference.attention: reference_dropout_keep}
    return impl.dropout_keep or known.get(impl.attention)


def as_impl(impl: Any) -> Impl:
    """Normalise what :func:`check` accepts: an :class:`Impl`; a module or object with
    ``attention`` and ``varlen_attention`` (``safeattn``, ``safeattn.reference``); or a callable
    with safeattn.attention's signature, whose ``varlen`` attribute (if any) serves varlen cases.
    """
    if isinstance(impl, Impl):
        return impl
    if hasattr(impl, "attention") and hasattr(impl, "varlen_attention"):
        name = getattr(impl, "__name__", type(impl).__name__)
        return Impl(name, impl.attention, impl.varlen_attention)
    if callable(impl):
        name = getattr(impl, "__qualname__", type(impl).__name__)
        return Impl(name, impl, getattr(impl, "varlen", None))
    raise TypeError(
        f"safeattn: cannot check {impl!r}: it is not an Impl, a module with attention and "
        "varlen_attention, or a callable.\nHINT: wrap it with Impl(name, attention_fn)."
    )


def _varlen_as_dense(impl: Impl, case: Case, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Run a varlen case through a dense-only impl: pad every sequence to the max length and
    pass the exact per-sequence allowed pairs as a bool attn_mask."""
    p = check_varlen(
        q,
        k,
        v,
        *(case.kwargs[n] for n in VARLEN_POSITIONAL),
        causal=case.kwargs.get("causal", False),
        window=case.kwargs.get("window"),
        allow_float64=True,
    )
    parts = sequence_problems(p)
    batch, lq, lk = p.batch, p.seq_q, p.seq_k
    mask = torch.zeros(batch, p.heads_q, lq, lk, dtype=torch.bool, device=q.device)
    q_rows, q_pos, k_rows, k_pos = [], [], [], []
    for b, part in enumerate(parts):
        sub = part.problem
        mask[b, :, : sub.seq_q, : sub.seq_k] = allowed_mask(sub)[0]
        q_rows += [b] * sub.seq_q
        q_pos += range(sub.seq_q)
        k_rows += [b] * sub.seq_k
        k_pos += range(sub.seq_k)
    index = {"device": q.device, "dtype": torch.long}
    qi = (torch.tensor(q_rows, **index), torch.tensor(q_pos, **index))
    ki = (torch.tensor(k_rows, **index), torch.tensor(k_pos, **index))
    # index_put into fresh zero tensors is differentiable: gradients flow back to q, k, v.
    q_pad = q.new_zeros(batch, lq, p.heads_q, p.head_dim).index_put(qi, q)
    k_pad = k.new_zeros(batch, lk, p.heads_kv, p.head_dim).index_put(ki, k)
    v_pad = v.new_zeros(batch, lk, p.heads_kv, p.head_dim).index_put(ki, v)
    out = impl.attention(
        q_pad.transpose(1, 2),
        k_pad.transpose(1, 2),
        v_pad.transpose(1, 2),
        attn_mask=mask,
        scale=case.kwargs.get("scale"),
    )
    return out.transpose(1, 2)[qi]


# --------------------------------------------------------------------------- checking


@dataclass
class _Run:
    out: Tensor
    grads: tuple[Tensor, Tensor, Tensor]
    dbias: Tensor | None = None  # a trainable_bias case's attn_mask gradient

    def tensors(self) -> dict[str, Tensor]:
        named = {"out": self.out, "dq": self.grads[0], "dk": self.grads[1], "dv": self.grads[2]}
        return named if self.dbias is None else {**named, "dbias": self.dbias}


def _run(
    fn: Callable[..., Tensor],
    inputs: tuple[Tensor, Tensor, Tensor],
    do: Tensor,
    dtype: torch.dtype,
    bias: Tensor | None = None,
) -> _Run:
    """Forward + backward on fresh leaf copies (strides kept) of inputs, cast to dtype; with
    ``bias``, also of it (its own dtype, float64 in a float64 run) as ``attn_mask=``."""
    leaves = [x.detach().to(dtype).clone().requires_grad_() for x in inputs]
    if bias is None:
        out = fn(*leaves)
    else:
        bias = bias.detach().to(torch.float64 if dtype == torch.float64 else bias.dtype)
        bias = bias.clone().requires_grad_()
        out = fn(*leaves, attn_mask=bias)
    out.backward(do.to(out.dtype))
    grads = tuple(x.grad if x.grad is not None else torch.zeros_like(x).detach() for x in leaves)
    dbias = None
    if bias is not None:
        dbias = bias.grad if bias.grad is not None else torch.zeros_like(bias).detach()
    return _Run(out.detach(), grads, dbias)


def _max_abs(x: Tensor) -> float:
    """Largest finite |x| (0 for an empty or all non-finite tensor)."""
    finite = x[torch.isfinite(x)]
    return finite.abs().max().item() if finite.numel() else 0.0


def _max_row_norm(x: Tensor) -> float:
    """Largest 2-norm of a row (last dim) over the finite entries."""
    if x.numel() == 0:
        return 0.0
    finite = torch.where(torch.isfinite(x), x, torch.zeros((), dtype=x.dtype, device=x.device))
    return torch.linalg.vector_norm(finite.double(), dim=-1).max().item()


def _natural_scales(case: Case) -> dict[str, float]:
    """The magnitude each result is built from, as the floor of the relative-error
    denominator: a result that is ~0 by cancellation (one key: dq = 0; a saturated softmax)
    would otherwise turn rounding noise into a huge relative error.

    out is a convex combination of v rows; dv sums P-weighted rows of do; dq and dk are
    sums of scale * dS * k (resp. q) with |dS| <~ max|do . v|.
    """
    q, k, v = case.clean if case.clean is not None else (case.q, case.k, case.v)
    scale = case.kwargs.get("scale") or 1.0 / math.sqrt(q.shape[-1])
    dp = scale * _max_row_norm(case.do) * _max_row_norm(v)
    return {
        "out": _max_abs(v),
        "dq": dp * _max_abs(k),
        "dk": dp * _max_abs(q),
        "dv": _max_abs(case.do),
    }


def _rel_error(got: Tensor, want: Tensor, floor: float) -> float:
    """max|got - want| / max(max|want|, floor) over the entries where got is finite."""
    if want.numel() == 0:
        return 0.0
    diff = (got.double() - want.double()).abs()
    worst = _max_abs(diff)
    if worst == 0.0:
        return 0.0
    denominator = max(_max_abs(want), floor)
    return worst / denominator if denominator > 0 else math.inf


def _first_bad(t: Tensor, bad: Tensor) -> str:
    idx = bad.nonzero()[0].tolist()
    return f"first at index {idx} = {t[tuple(idx)].item():.3g}"


def check(case: Case, impl: Any) -> Verdict:
    """Run impl forward + backward on case; decide against the float64 reference.

    nonfinite: any NaN/Inf in out, dq, dk, dv (and dbias; every family expects all finite).
    wrong (only judged when all finite): non-zero output or dq on an empty row, non-zero dk/dv
    on a key no row may attend, poisoned twin not bitwise equal to the clean one, or an error
    vs float64 beyond the tolerance rule of the module docstring. A dropout case is judged
    against the reference given the implementation's own keep mask (:class:`Impl`); an
    implementation that cannot say which mask it drew raises NotImplementedError.
    """
    impl = as_impl(impl)
    dtype = case.q.dtype
    inputs = (case.q, case.k, case.v)
    dropout_p = case.kwargs.get("dropout_p", 0.0)
    ref_over: dict[str, Any] = {}  # the reference drops the pairs the implementation drops
    if dropout_p > 0:
        keep_of = _dropout_keep_of(impl)
        if keep_of is None or case.varlen or case.dropout_seed is None:
            raise NotImplementedError(
                f"safeattn: cannot judge {impl.name} on a dropout case: its keep mask is "
                "unknown.\nHINT: give its Impl a dropout_keep(q, k, dropout_p, seed)."
            )
        ref_over["dropout_keep"] = keep_of(case.q, case.k, dropout_p, case.dropout_seed)

    def impl_fn(q: Tensor, k: Tensor, v: Tensor, **over: Any) -> Tensor:
        if not case.varlen:
            if dropout_p > 0:  # the same seed in the poisoned and the clean run
                with _seeded(case.dropout_seed, q.device):
                    return case.call(impl.attention, q, k, v, **over)
            return case.call(impl.attention, q, k, v, **over)
        if impl.varlen is not None:
            return case.call(impl.varlen, q, k, v)
        return _varlen_as_dense(impl, case, q, k, v)

    ref_fn = reference.varlen_attention if case.varlen else reference.attention

    bias = case.kwargs["attn_mask"] if case.trainable_bias else None

    def reference_run(run_dtype: torch.dtype, upcast: bool) -> _Run:
        def fn(q: Tensor, k: Tensor, v: Tensor, **over: Any) -> Tensor:
            call = lambda *a, **kw: ref_fn(*a, **kw, upcast=upcast)
            return case.call(call, q, k, v, **over, **ref_over)

        return _run(fn, inputs, case.do, run_dtype, bias)

    got = _run(impl_fn, inputs, case.do, dtype, bias).tensors()
    exact = reference_run(torch.float64, upcast=True).tensors()

    problems = [
        f"{name} has {int((~torch.isfinite(t)).sum())} non-finite values "
        f"({_first_bad(t, ~torch.isfinite(t))})"
        for name, t in got.items()
        if not torch.isfinite(t).all()
    ]
    floors = _natural_scales(case)
    if bias is not None:  # dBias = dS = P (dP - delta), |dP| <= max |do . v|
        floors["dbias"] = _max_row_norm(case.do) * _max_row_norm(case.v)
    errors = {name: _rel_error(got[name], exact[name], floors[name]) for name in got}
    max_error = max(errors.values(), default=0.0)
    if problems:
        return Verdict(True, False, max_error, "; ".join(problems))

    # Contract item 1: empty rows and keys nobody attends.
    for name, mask in (("out", case.empty_rows), ("dq", case.empty_rows)):
        nonzero = (got[name] != 0).any(dim=-1) & mask
        if nonzero.any():
            problems.append(f"{name} non-zero on an empty row: row {nonzero.nonzero()[0].tolist()}")
    for name in ("dk", "dv"):
        nonzero = (got[name] != 0).any(dim=-1) & case.unattended_keys
        if nonzero.any():
            problems.append(
                f"{name} non-zero on a key no row attends: key {nonzero.nonzero()[0].tolist()}"
            )
    if bias is not None:  # every excluded pair (so every pair of an empty row): dBias = 0
        p = check_attention(case.q, case.k, case.v, **case.kwargs, allow_float64=True)
        nonzero = (got["dbias"] != 0) & ~allowed_mask(p)
        if nonzero.any():
            problems.append(f"dbias non-zero on an excluded pair: {nonzero.nonzero()[0].tolist()}")

    # Contract item 2: the poisoned case must equal its clean twin bitwise.
    if case.clean is not None:
        twin = _run(impl_fn, case.clean, case.do, dtype, bias).tensors()
        for name in got:
            if not torch.equal(got[name], twin[name]):
                diff = got[name] != twin[name]
                problems.append(
                    f"{name} differs from the clean twin ({_first_bad(got[name], diff)})"
                )

    # Contract item 6: accuracy relative to PyTorch's own same-dtype math.
    baseline = reference_run(dtype, upcast=False).tensors()
    if not all(torch.isfinite(t).all() for t in baseline.values()):
        baseline = reference_run(dtype, upcast=True).tensors()
    roundoff = ROUNDOFF_UNITS * torch.finfo(dtype).eps / 2
    for name, err in errors.items():
        factor = OUTPUT_FACTOR if name == "out" else GRAD_FACTOR
        allowed = factor * _rel_error(baseline[name], exact[name], floors[name]) + roundoff
        if err > allowed:
            problems.append(f"{name} error {err:.3g} > {allowed:.3g} allowed")

    return Verdict(False, bool(problems), max_error, "; ".join(problems) or "ok")


def rates(
    family: str,
    impl: Any,
    dtype: torch.dtype,
    device: Any,
    trials: int,
    size: Size = "small",
) -> tuple[float, float, float]:
    """-> (nonfinite_rate, wrong_rate, max_rel_error) over seeds 0 .. trials-1."""
    if trials < 1:
        raise ValueError(f"safeattn: trials must be >= 1, got {trials}.\nHINT: pass trials=8.")
    verdicts = [check(make_case(family, seed, dtype, device, size), impl) for seed in range(trials)]
    nonfinite = sum(v.nonfinite for v in verdicts) / trials
    wrong = sum(v.wrong for v in verdicts) / trials
    return nonfinite, wrong, max(v.max_rel_error for v in verdicts)
