"""The adversarial input families: one source of truth for the tests, the asv numerics
benchmarks and the dashboard.

Each :class:`Family` builds a :class:`Case` (inputs, call arguments, upstream gradient and
what the contract expects) from a seed: :func:`make_case`. Running an implementation on a
case and judging it against the contract (``check``, ``rates``) is :mod:`safeattn.contract`.

Why one file over ~400 lines: the families are one table (:data:`FAMILIES`) with a short
builder per entry beside it; split, the single source of truth would be scattered.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from safeattn._inputs import (
    AttnProblem,
    allowed_mask,
    check_attention,
    check_varlen,
    sequence_problems,
)

Size = str  # "small" (CPU, Triton interpreter) or "gpu" (realistic)
SIZES: tuple[Size, ...] = ("small", "gpu")


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
    # kwargs["attn_mask"] (full (B, Hq, Nq, Nk) float) is trained: its gradient is judged
    # too, exactly 0 on empty rows and at -inf pairs (safeattn.contract)
    trainable_bias: bool = False
    # kwargs["dropout_p"] > 0: the torch seed set before every forward of the case, so that
    # the poisoned and clean runs drop the same pairs (safeattn.contract asks the
    # implementation for its keep mask under this seed)
    dropout_seed: int | None = None

    def call(
        self, fn: Callable[..., Tensor], q: Tensor, k: Tensor, v: Tensor, **override: Any
    ) -> Tensor:
        """fn(q, k, v, ...) with this case's arguments (fn: attention- or varlen-like);
        ``override`` replaces some (a trained attn_mask leaf)."""
        kw = {**self.kwargs, **override}
        if self.varlen:
            lengths = [kw.pop(name) for name in VARLEN_POSITIONAL]
            return fn(q, k, v, *lengths, **kw)
        return fn(q, k, v, **kw)


@dataclass(frozen=True)
class Family:
    name: str
    description: str
    make: Callable[[int, torch.dtype, Any, Size], Case] = field(repr=False)


VARLEN_POSITIONAL = ("cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k")


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
    trainable_bias: bool = False,
    dropout_seed: int | None = None,
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
        trainable_bias=trainable_bias,
        dropout_seed=dropout_seed,
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


def _poison_excluded(
    gen: torch.Generator, key_mask: Tensor, k: Tensor, v: Tensor
) -> tuple[Tensor, Tensor]:
    """k, v (B, Hkv, Nk, D) with every entry that key_mask (B, Nk) excludes (excluded for
    every query row) replaced by a mix of NaN, +Inf and -Inf; a clean twin keeps k, v."""
    poison_values = torch.tensor([float("nan"), float("inf"), float("-inf")])
    choice = torch.randint(0, 3, k.shape, generator=gen)
    excluded = ~key_mask[:, None, :, None]
    return (torch.where(excluded, poison_values[choice], k),
            torch.where(excluded, poison_values[choice.flip(-1)], v))  # fmt: skip


def _nan_in_excluded_kv(seed: int, dtype: torch.dtype, device: Any, size: Size) -> Case:
    gen = torch.Generator().manual_seed(seed)
    b, hq, hkv, nq, nk, d = (2, 4, 2, 24, 45, 24) if size == "small" else (4, 16, 4, 512, 1111, 128)
    q, k, v = _randn(gen, b, hq, nq, d), _randn(gen, b, hkv, nk, d), _randn(gen, b, hkv, nk, d)
    key_mask = _left_padding(gen, b, nk) & (torch.rand(b, nk, generator=gen) < 0.8)
    k_bad, v_bad = _poison_excluded(gen, key_mask, k, v)
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


def _softcap(seed: int, dtype: torch.dtype, device: Any, size: Size) -> Case:
    gen = torch.Generator().manual_seed(seed)
    b, hq, hkv, n, d = (2, 2, 1, 37, 32) if size == "small" else (2, 8, 2, 1024, 128)

    # Row magnitudes log-uniform in [0.3, 100]: logits from ~0.1 (tanh's linear part) through
    # its knee to ~1e4 (deep saturation, where float16's q @ k^T overflows and the cap's
    # derivative underflows to 0), against a cap of 10..50 (Gemma 2 caps attention at 50).
    def rows(h: int) -> Tensor:
        log_amp = torch.empty(b, h, n, 1).uniform_(math.log(0.3), math.log(100.0), generator=gen)
        return _randn(gen, b, h, n, d) * log_amp.exp()

    q, k, v = rows(hq), rows(hkv), _randn(gen, b, hkv, n, d)
    return _dense_case(
        "softcap",
        gen,
        dtype,
        device,
        q,
        k,
        v,
        causal=True,
        key_mask=_left_padding(gen, b, n),  # leading rows empty under the cap as well
        softcap=_pick(gen, [10.0, 30.0, 50.0]),
    )


def _trainable_bias(seed: int, dtype: torch.dtype, device: Any, size: Size) -> Case:
    gen = torch.Generator().manual_seed(seed)
    b, hq, hkv, n, d = (2, 2, 1, 37, 16) if size == "small" else (2, 8, 2, 1000, 128)
    q, k, v = _randn(gen, b, hq, n, d), _randn(gen, b, hkv, n, d), _randn(gen, b, hkv, n, d)
    # A learned pair bias (B, Hq, N, N): N(0, 3), 5% of entries +-60 (a saturated softmax,
    # where P is 0 or 1 and dS tiny), 10% -inf, whole -inf rows; with left padding + causal.
    bias = _randn(gen, b, hq, n, n) * 3
    large = torch.rand(b, hq, n, n, generator=gen) < 0.05
    bias[large] = 60.0 * torch.sign(_randn(gen, int(large.sum())))
    bias[torch.rand(b, hq, n, n, generator=gen) < 0.1] = float("-inf")
    bias[torch.rand(b, hq, n, generator=gen) < 0.1] = float("-inf")
    # float32 (a trained parameter's master copy), also for float16/bfloat16 inputs
    return _dense_case("trainable_bias", gen, dtype, device, q, k, v, trainable_bias=True,
                       attn_mask=bias, causal=True, key_mask=_left_padding(gen, b, n))  # fmt: skip


def _dropout(seed: int, dtype: torch.dtype, device: Any, size: Size) -> Case:
    gen = torch.Generator().manual_seed(seed)
    b, hq, hkv, n, d = (3, 4, 2, 37, 16) if size == "small" else (4, 8, 2, 1000, 128)
    q, k, v = _randn(gen, b, hq, n, d), _randn(gen, b, hkv, n, d), _randn(gen, b, hkv, n, d)
    # Left padding + causal (empty leading rows must stay exactly 0 whatever is dropped) with
    # NaN/+-Inf in the padded keys and values (a dropped-or-kept decision must never let them
    # in); the clean twin, run under the same seed, must match bitwise.
    key_mask = _left_padding(gen, b, n)
    k_bad, v_bad = _poison_excluded(gen, key_mask, k, v)
    return _dense_case("dropout", gen, dtype, device, q, k_bad, v_bad, clean=(q, k, v),
                       dropout_seed=seed, causal=True, key_mask=key_mask,
                       dropout_p=_pick(gen, [0.1, 0.2, 0.3]), deterministic=True)  # fmt: skip


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
        Family(
            "softcap",
            "logit soft-capping (cap 10-50) of logits ~0.1 to ~1e4, GQA, left padding + causal",
            _softcap,
        ),
        Family(
            "trainable_bias",
            "a trained pair bias (dBias judged too): +-60 and -inf entries, left padding + causal",
            _trainable_bias,
        ),
        Family(
            "dropout",
            "dropout 0.1-0.3 with left padding + causal, GQA, NaN/Inf in the padded K/V",
            _dropout,
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
