"""The adversarial input families: one source of truth for the tests, the asv numerics
benchmarks and the dashboard.

Each :class:`Family` builds a :class:`Case` (inputs, call arguments, upstream gradient and
what the contract expects) from a seed; :func:`check` runs any implementation on it, forward
and backward, and compares with :mod:`safeattn.reference` in float64; :func:`rates` turns
trials into the ``nonfinite_rate`` / ``wrong_result_rate`` / ``max_rel_error`` metrics.

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

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from safeattn import reference
from safeattn._inputs import (
    AttnProblem,
    allowed_mask,
    check_attention,
    check_varlen,
    sequence_problems,
)

Size = str  # "small" (CPU, Triton interpreter) or "gpu" (realistic)
SIZES: tuple[Size, ...] = ("small", "gpu")
OUTPUT_FACTOR = 2.0  # DESIGN.md item 6
GRAD_FACTOR = 3.0
ROUNDOFF_UNITS = 4  # the "tiny epsilon": a few unit roundoffs of the dtype


# --------------------------------------------------------------------------- data types


@dataclass
class Case:
    """One adversarial input, ready to run.

    Dense: q (B, Hq, Nq, D), k/v (B, Hkv, Nk, D), do like q; ``kwargs`` are safeattn.attention's
    keyword arguments. Varlen: q (total_q, Hq, D), k/v (total_k, Hkv, D); ``kwargs`` hold
    cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k and the keyword arguments.
    q, k, v are leaves with requires_grad=True (possibly non-contiguous views).
    """

    family: str
    q: Tensor
    k: Tensor
    v: Tensor
    do: Tensor
    varlen: bool
    kwargs: dict[str, Any]
    # What the contract expects:
    empty_rows: Tensor  # bool, out's shape without D: exact-0 output and exact-0 dq there
    unattended_keys: Tensor  # bool, k's shape without D: keys no query may attend: dk = dv = 0
    clean: tuple[Tensor, Tensor, Tensor] | None = None  # twin with finite excluded K/V

    def call(self, fn: Callable[..., Tensor], q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """fn(q, k, v, ...) with this case's arguments (fn: attention- or varlen-like)."""
        if self.varlen:
            kw = dict(self.kwargs)
            lengths = [kw.pop(name) for name in _VARLEN_POSITIONAL]
            return fn(q, k, v, *lengths, **kw)
        return fn(q, k, v, **self.kwargs)


@dataclass(frozen=True)
class Family:
    name: str
    description: str
    make: Callable[[int, torch.dtype, Any, Size], Case] = field(repr=False)


@dataclass(frozen=True)
class Impl:
    """An implementation under test: ``attention`` has safeattn.attention's signature;
    ``varlen`` safeattn.varlen_attention's (None: varlen cases are padded into dense calls)."""

    name: str
    attention: Callable[..., Tensor]
    varlen: Callable[..., Tensor] | None = None


@dataclass(frozen=True)
class Verdict:
    nonfinite: bool  # a non-finite value in out/dq/dk/dv (the families expect all finite)
    wrong: bool  # all finite, but the contract is violated
    max_rel_error: float  # worst relative error vs float64 over out/dq/dk/dv (finite entries)
    detail: str


_VARLEN_POSITIONAL = ("cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k")


# --------------------------------------------------------------------------- building cases


def _randn(gen: torch.Generator, *shape: int) -> Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float32)


def _leaf(x: Tensor, dtype: torch.dtype, device: Any) -> Tensor:
    return x.to(device=device, dtype=dtype).detach().requires_grad_()


def _heads_last(gen: torch.Generator, b: int, n: int, h: int, d: int) -> Tensor:
    """Random (B, H, N, D) as a transposed view of (B, N, H, D): non-contiguous strides."""
    return _randn(gen, b, n, h, d).transpose(1, 2)


def _expectations(p: AttnProblem) -> tuple[Tensor, Tensor]:
    """-> (empty_rows, unattended_keys) from the exact allowed mask."""
    if not p.varlen:
        allowed = allowed_mask(p)
        empty = ~allowed.any(dim=-1)  # (B, Hq, Nq)
        group = p.heads_q // p.heads_kv
        per_kv = allowed.reshape(p.batch, p.heads_kv, group, p.seq_q, p.seq_k)
        unattended = ~per_kv.any(dim=3).any(dim=2)  # (B, Hkv, Nk)
        return empty, unattended
    empty_rows = torch.zeros(p.q.shape[:2], dtype=torch.bool, device=p.q.device)
    unattended = torch.ones(p.k.shape[:2], dtype=torch.bool, device=p.q.device)
    for part in sequence_problems(p):
        empty, unatt = _expectations(part.problem)
        empty_rows[part.rows] = empty[0].transpose(0, 1)
        unattended[part.keys] = unatt[0].transpose(0, 1)
    return empty_rows, unattended


def _dense_case(
    family: str,
    gen: torch.Generator,
    dtype: torch.dtype,
    device: Any,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    do: Tensor | None = None,
    clean: tuple[Tensor, Tensor, Tensor] | None = None,
    **kwargs: Any,
) -> Case:
    """Move float32 host tensors to (dtype, device) and derive the expectations."""
    leaves = [_leaf(x, dtype, device) for x in (q, k, v)]
    kwargs = {name: (x.to(device) if isinstance(x, Tensor) else x) for name, x in kwargs.items()}
    p = check_attention(*leaves, **kwargs, allow_float64=True)
    empty, unattended = _expectations(p)
    if do is None:
        do = _randn(gen, *q.shape)
    return Case(
        family=family,
        q=leaves[0],
        k=leaves[1],
        v=leaves[2],
        do=do.to(device=device, dtype=dtype),
        varlen=False,
        kwargs=kwargs,
        empty_rows=empty,
        unattended_keys=unattended,
        clean=None if clean is None else tuple(_leaf(x, dtype, device) for x in clean),
    )


def _pick(gen: torch.Generator, options: list[Any]) -> Any:
    return options[int(torch.randint(len(options), (1,), generator=gen))]


def _left_padding(gen: torch.Generator, batch: int, n: int) -> Tensor:
    """(B, N) bool key_mask with a random number of leading padding keys per element
    (element 0 unpadded, element 1 padded to a single real key)."""
    pad = torch.randint(0, max(n, 1), (batch,), generator=gen)
    pad[0] = 0
    if batch > 1:
        pad[1] = max(n - 1, 0)
    return torch.arange(n)[None, :] >= pad[:, None]


def _leftpad_causal(seed: int, dtype: torch.dtype, device: Any, size: Size) -> Case:
    gen = torch.Generator().manual_seed(seed)
    b, h, n, d = (3, 2, 37, 16) if size == "small" else (4, 8, 1000, 128)
    q, k, v = (_heads_last(gen, b, n, h, d) for _ in range(3))
    return _dense_case(
        "leftpad_causal",
        gen,
        dtype,
        device,
        q,
        k,
        v,
        causal=True,
        key_mask=_left_padding(gen, b, n),
    )


def _all_keys_masked(seed: int, dtype: torch.dtype, device: Any, size: Size) -> Case:
    gen = torch.Generator().manual_seed(seed)
    b, h, nq, nk, d = (3, 2, 29, 41, 32) if size == "small" else (4, 8, 777, 1024, 64)
    q, k, v = _randn(gen, b, h, nq, d), _randn(gen, b, h, nk, d), _randn(gen, b, h, nk, d)
    key_mask = torch.rand(b, nk, generator=gen) < 0.7
    key_mask[seed % b] = False
    return _dense_case("all_keys_masked", gen, dtype, device, q, k, v, key_mask=key_mask)


def _neginf_mask_rows(seed: int, dtype: torch.dtype, device: Any, size: Size) -> Case:
    gen = torch.Generator().manual_seed(seed)
    b, h, nq, nk, d = (2, 2, 33, 40, 16) if size == "small" else (2, 8, 1000, 1031, 128)
    q, k, v = _randn(gen, b, h, nq, d), _randn(gen, b, h, nk, d), _randn(gen, b, h, nk, d)
    # An additive float32 mask (also for float16/bfloat16 inputs: kernels convert it) with
    # finite biases, scattered -inf entries and ~20% rows that are -inf throughout.
    bias = _randn(gen, b, 1, nq, nk)
    bias[torch.rand(b, 1, nq, nk, generator=gen) < 0.1] = float("-inf")
    bias[torch.rand(b, 1, nq, generator=gen) < 0.2] = float("-inf")
    return _dense_case("neginf_mask_rows", gen, dtype, device, q, k, v, attn_mask=bias)


def _nan_in_excluded_kv(seed: int, dtype: torch.dtype, device: Any, size: Size) -> Case:
    gen = torch.Generator().manual_seed(seed)
    b, hq, hkv, nq, nk, d = (2, 4, 2, 24, 45, 24) if size == "small" else (4, 16, 4, 512, 1111, 128)
    q, k, v = _randn(gen, b, hq, nq, d), _randn(gen, b, hkv, nk, d), _randn(gen, b, hkv, nk, d)
    key_mask = _left_padding(gen, b, nk) & (torch.rand(b, nk, generator=gen) < 0.8)
    # Poison every key/value entry that key_mask excludes (excluded for every query row) with
    # a mix of NaN, +Inf and -Inf; the clean twin keeps the original finite values there.
    poison_values = torch.tensor([float("nan"), float("inf"), float("-inf")])
    choice = torch.randint(0, 3, (b, hkv, nk, d), generator=gen)
    excluded = ~key_mask[:, None, :, None]
    k_bad = torch.where(excluded, poison_values[choice], k)
    v_bad = torch.where(excluded, poison_values[choice.flip(-1)], v)
    return _dense_case(
        "nan_in_excluded_kv",
        gen,
        dtype,
        device,
        q,
        k_bad,
        v_bad,
        clean=(q, k, v),
        causal="bottom_right",
        key_mask=key_mask,
        deterministic=True,  # the twins are compared bitwise
    )


def _large_logits(seed: int, dtype: torch.dtype, device: Any, size: Size) -> Case:
    gen = torch.Generator().manual_seed(seed)
    b, h, n, d = (2, 2, 40, 32) if size == "small" else (2, 8, 1024, 128)
    # |q|, |k| ~ 100: logits of order 1e4 (q @ k^T itself exceeds float16's 65504 before the
    # scale), so exp without the running max overflows in every dtype.
    amplitude = 100.0
    q, k = (_randn(gen, b, h, n, d) * amplitude for _ in range(2))
    v = _randn(gen, b, h, n, d)
    causal = _pick(gen, [False, True])
    return _dense_case("large_logits", gen, dtype, device, q, k, v, causal=causal)


def _ragged_tails(seed: int, dtype: torch.dtype, device: Any, size: Size) -> Case:
    gen = torch.Generator().manual_seed(seed)
    if size == "small":
        # Seeds walk this list (few trials still see a large ragged shape first).
        shapes = [(33, 47), (0, 5), (47, 33), (1, 1), (17, 1), (1, 17), (5, 0), (13, 13)]
        head_dims = [1, 3, 17, 32]
        b, h = 2, 2
    else:
        shapes = [(97, 1025), (0, 128), (1000, 1000), (1, 1), (1025, 1), (1, 1025), (1025, 0)]
        head_dims = [59, 111, 128, 256]
        b, h = 2, 4
    nq, nk = shapes[seed % len(shapes)]
    d = _pick(gen, head_dims)
    q, k, v = _heads_last(gen, b, nq, h, d), _heads_last(gen, b, nk, h, d), _randn(gen, b, h, nk, d)
    causal = _pick(gen, [False, "top_left", "bottom_right"])
    return _dense_case("ragged_tails", gen, dtype, device, q, k, v, causal=causal)


def _gqa_ragged(seed: int, dtype: torch.dtype, device: Any, size: Size) -> Case:
    gen = torch.Generator().manual_seed(seed)
    if size == "small":
        b, (hq, hkv), nq, nk, d = 2, _pick(gen, [(6, 2), (3, 1), (4, 4)]), 19, 45, 20
    else:
        b, (hq, hkv), nq, nk, d = 2, _pick(gen, [(32, 8), (16, 1)]), 1000, 1537, 128
    q = _heads_last(gen, b, nq, hq, d)
    k, v = _heads_last(gen, b, nk, hkv, d), _heads_last(gen, b, nk, hkv, d)
    left = int(torch.randint(0, nk, (1,), generator=gen))
    return _dense_case(
        "gqa_ragged",
        gen,
        dtype,
        device,
        q,
        k,
        v,
        causal="bottom_right",
        window=(left, -1),
        key_mask=torch.rand(b, nk, generator=gen) < 0.9,
    )


def _varlen_empty_seqs(seed: int, dtype: torch.dtype, device: Any, size: Size) -> Case:
    gen = torch.Generator().manual_seed(seed)
    hq, hkv, d, longest = (4, 2, 16, 23) if size == "small" else (16, 4, 128, 1000)
    lengths = torch.randint(0, longest + 1, (2, 7), generator=gen)
    lengths[:, 1] = 0  # an empty sequence
    lengths[0, 3], lengths[1, 4] = 0, 0  # keys without queries, queries without keys
    lengths[:, 5] = 1
    cu_q, cu_k = (torch.nn.functional.pad(x.cumsum(0), (1, 0)).to(torch.int32) for x in lengths)
    total_q, total_k = int(cu_q[-1]), int(cu_k[-1])
    q = _randn(gen, total_q, hq, d)
    k, v = _randn(gen, total_k, hkv, d), _randn(gen, total_k, hkv, d)
    leaves = [_leaf(x, dtype, device) for x in (q, k, v)]
    kwargs: dict[str, Any] = {
        "cu_seqlens_q": cu_q.to(device),
        "cu_seqlens_k": cu_k.to(device),
        "max_seqlen_q": int(lengths[0].max()),
        "max_seqlen_k": int(lengths[1].max()),
        "causal": _pick(gen, [False, True, "bottom_right"]),
    }
    p = check_varlen(*leaves, **kwargs, allow_float64=True)
    empty, unattended = _expectations(p)
    return Case(
        family="varlen_empty_seqs",
        q=leaves[0],
        k=leaves[1],
        v=leaves[2],
        do=_randn(gen, total_q, hq, d).to(device=device, dtype=dtype),
        varlen=True,
        kwargs=kwargs,
        empty_rows=empty,
        unattended_keys=unattended,
    )


def _extreme_grad_out(seed: int, dtype: torch.dtype, device: Any, size: Size) -> Case:
    gen = torch.Generator().manual_seed(seed)
    b, h, nq, nk, d = (2, 2, 37, 30, 32) if size == "small" else (2, 8, 1100, 1000, 128)
    q, k, v = _randn(gen, b, h, nq, d), _randn(gen, b, h, nk, d), _randn(gen, b, h, nk, d)
    # Row scales of the upstream gradient: two huge rows per head (sqrt(max) * 16: ~4095 in
    # float16, so true gradients stay representable but a float16 intermediate such as
    # rowsum(dO * O) overflows), rows near the smallest normal, zero rows, the rest ~1.
    # Bottom-right causal with Nq > Nk leaves the first rows empty; one of them gets a huge
    # gradient too, so a non-zero contribution of an empty row cannot hide.
    huge = math.sqrt(torch.finfo(dtype).max) * 16
    tiny = torch.finfo(dtype).tiny * 4
    row_scale = torch.ones(b, h, nq, 1)
    for bi in range(b):
        for hi in range(h):
            rows = torch.randperm(nq, generator=gen)
            row_scale[bi, hi, rows[:2]] = huge
            row_scale[bi, hi, rows[2:4]] = tiny
            row_scale[bi, hi, rows[4:6]] = 0.0
    row_scale[:, :, 0] = huge  # an empty row (bottom-right, Nq > Nk)
    do = _randn(gen, b, h, nq, d).clamp(-1, 1) * row_scale
    return _dense_case(
        "extreme_grad_out", gen, dtype, device, q, k, v, do=do, causal="bottom_right"
    )


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "leftpad_causal",
            "left padding (key_mask) + causal: leading rows empty",
            _leftpad_causal,
        ),
        Family("all_keys_masked", "one batch element has every key masked", _all_keys_masked),
        Family(
            "neginf_mask_rows",
            "additive float mask with whole -inf rows and -inf entries",
            _neginf_mask_rows,
        ),
        Family(
            "nan_in_excluded_kv",
            "NaN/+Inf/-Inf in K and V where key_mask excludes them",
            _nan_in_excluded_kv,
        ),
        Family(
            "large_logits", "|q|, |k| ~ 100: logits ~ 1e4, float16 q @ k^T overflows", _large_logits
        ),
        Family(
            "ragged_tails",
            "Nq != Nk, lengths 0, 1 and off any block size, odd head dims",
            _ragged_tails,
        ),
        Family(
            "gqa_ragged",
            "GQA/MQA, ragged lengths, window + bottom-right causal, strided",
            _gqa_ragged,
        ),
        Family(
            "varlen_empty_seqs",
            "packed varlen with zero-length sequences on either side",
            _varlen_empty_seqs,
        ),
        Family(
            "extreme_grad_out", "upstream gradients huge, tiny and zero per row", _extreme_grad_out
        ),
    )
}


def make_case(family: str, seed: int, dtype: torch.dtype, device: Any, size: Size) -> Case:
    """FAMILIES[family].make(...) with a readable error for unknown names and sizes."""
    if family not in FAMILIES:
        raise ValueError(
            f"safeattn: unknown family {family!r}.\nHINT: one of {', '.join(FAMILIES)}."
        )
    if size not in SIZES:
        raise ValueError(f"safeattn: unknown size {size!r}.\nHINT: one of {SIZES}.")
    return FAMILIES[family].make(seed, dtype, device, size)


# --------------------------------------------------------------------------- implementations


def mask_adapter(name: str, fn: Callable[[Tensor, Tensor, Tensor, Tensor, float], Tensor]) -> Impl:
    """Wrap a peer that takes one dense mask into an :class:`Impl`.

    ``fn(q, k, v, mask, scale) -> out`` gets q (B, Hq, Nq, D), k/v (B, Hkv, Nk, D) and ``mask``
    (B, Hq, Nq, Nk): bool (True = attend) or, when the call has a float attn_mask, additive
    float (-inf where excluded) in q's dtype; e.g. SDPA with ``enable_gqa=True``.
    """

    def attention(q: Tensor, k: Tensor, v: Tensor, **kwargs: Any) -> Tensor:
        p = check_attention(q, k, v, **kwargs, allow_float64=True)
        mask = allowed_mask(p)
        if p.attn_mask is not None and p.attn_mask.dtype != torch.bool:
            neg_inf = torch.tensor(float("-inf"), dtype=q.dtype, device=q.device)
            mask = torch.where(mask, p.attn_mask.to(q.dtype), neg_inf)
        return fn(q, k, v, mask, p.scale)

    return Impl(name, attention)


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
        *(case.kwargs[n] for n in _VARLEN_POSITIONAL),
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

    def tensors(self) -> dict[str, Tensor]:
        return {"out": self.out, "dq": self.grads[0], "dk": self.grads[1], "dv": self.grads[2]}


def _run(
    fn: Callable[[Tensor, Tensor, Tensor], Tensor],
    inputs: tuple[Tensor, Tensor, Tensor],
    do: Tensor,
    dtype: torch.dtype,
) -> _Run:
    """Forward + backward on fresh leaf copies (strides kept) of inputs, cast to dtype."""
    leaves = [x.detach().to(dtype).clone().requires_grad_() for x in inputs]
    out = fn(*leaves)
    out.backward(do.to(out.dtype))
    grads = tuple(x.grad if x.grad is not None else torch.zeros_like(x).detach() for x in leaves)
    return _Run(out.detach(), grads)


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

    nonfinite: any NaN/Inf in out, dq, dk, dv (every family expects all finite).
    wrong (only judged when all finite): non-zero output or dq on an empty row, non-zero dk/dv
    on a key no row may attend, poisoned twin not bitwise equal to the clean one, or an error
    vs float64 beyond the tolerance rule of the module docstring.
    """
    impl = as_impl(impl)
    dtype = case.q.dtype
    inputs = (case.q, case.k, case.v)

    def impl_fn(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        if not case.varlen:
            return case.call(impl.attention, q, k, v)
        if impl.varlen is not None:
            return case.call(impl.varlen, q, k, v)
        return _varlen_as_dense(impl, case, q, k, v)

    ref_fn = reference.varlen_attention if case.varlen else reference.attention

    def reference_run(run_dtype: torch.dtype, upcast: bool) -> _Run:
        def fn(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            return case.call(lambda *a, **kw: ref_fn(*a, **kw, upcast=upcast), q, k, v)

        return _run(fn, inputs, case.do, run_dtype)

    got = _run(impl_fn, inputs, case.do, dtype).tensors()
    exact = reference_run(torch.float64, upcast=True).tensors()

    problems = [
        f"{name} has {int((~torch.isfinite(t)).sum())} non-finite values "
        f"({_first_bad(t, ~torch.isfinite(t))})"
        for name, t in got.items()
        if not torch.isfinite(t).all()
    ]
    floors = _natural_scales(case)
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

    # Contract item 2: the poisoned case must equal its clean twin bitwise.
    if case.clean is not None:
        twin = _run(impl_fn, case.clean, case.do, dtype).tensors()
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
