"""Pure-PyTorch attention with exactly safeattn's contract, for any dtype (float64 too).

This is the oracle the Triton kernels, the adversarial-family checker and the numerics
benchmarks compare against. It materialises the (B, Hq, Nq, Nk) score matrix, so it is meant
for tests and measurements, not for long sequences in production.

How the contract is met with plain autograd (DESIGN.md items 1, 2, 3, 5):

* NOTE: empty rows. The row max of a row with no allowed key is -inf and its exp-sum is 0;
  both are replaced by safe values (0 and 1) *before* they are used, so the row computes
  exactly 0 and autograd never sees inf - inf or 0 / 0 (the torch.where NaN-gradient trap).
* NOTE: excluded means excluded. A matmul multiplies excluded entries by exact zeros, and
  0 * NaN = NaN; so q, k and v enter the matmuls with their non-finite entries replaced by 0
  (straight-through: the gradient passes unchanged). Scores are masked with torch.where, never
  with a 0/1 multiplication.
* NOTE: included non-finite values propagate. Because the matmuls only see finite numbers,
  the non-finite entries a row *does* attend to are put back explicitly: a NaN score for an
  allowed (row, key) pair whose q row or k row is non-finite, and a NaN output (with a NaN
  gradient path into the scores) for an allowed value entry that is non-finite.
* Large logits: the row max is subtracted in the compute dtype before exp.
"""

from __future__ import annotations

import torch
from torch import Tensor

from safeattn._inputs import AttnProblem, allowed_mask, check_attention, check_varlen
from safeattn._inputs import sequence_problems as _sequence_problems

__all__ = ["attention", "varlen_attention"]


class _FiniteOrZero(torch.autograd.Function):
    """Forward: non-finite entries -> 0. Backward: identity (straight-through), so the
    gradient of an input does not depend on whether its own value was finite."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        return torch.where(torch.isfinite(x), x, torch.zeros((), dtype=x.dtype, device=x.device))

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        return grad


def _compute_dtype(dtype: torch.dtype, upcast: bool) -> torch.dtype:
    if upcast and dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    return dtype


def _lse_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def draw_dropout_keep(
    shape: tuple[int, ...], device: torch.device | str, dropout_p: float
) -> Tensor:
    """The keep mask this module draws for dropout when given none: bool ``shape``
    (B, Hq, Nq, Nk), True with probability 1 - dropout_p, from the global generator."""
    return torch.rand(shape, device=device) >= dropout_p


def _attend(p: AttnProblem, upcast: bool, keep: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Dense reference core -> (out (B, Hq, Nq, D) in q's dtype, lse (B, Hq, Nq)).
    ``keep``: dropout's keep mask (B, Hq, Nq, Nk) when p.dropout_p > 0 (else drawn here)."""
    dtype = _compute_dtype(p.q.dtype, upcast)
    group = p.heads_q // p.heads_kv
    nan = torch.tensor(float("nan"), dtype=dtype, device=p.q.device)
    neg_inf = torch.tensor(float("-inf"), dtype=dtype, device=p.q.device)
    zero = torch.zeros((), dtype=dtype, device=p.q.device)
    one = torch.ones((), dtype=dtype, device=p.q.device)

    q = _FiniteOrZero.apply(p.q).to(dtype)
    k = _FiniteOrZero.apply(p.k).to(dtype).repeat_interleave(group, dim=1)
    v = _FiniteOrZero.apply(p.v).to(dtype).repeat_interleave(group, dim=1)
    allowed = allowed_mask(p)

    scores = (q @ k.transpose(-1, -2)) * p.scale
    if p.softcap:
        # Soft-capping acts on the logits themselves: before the additive mask, and on every
        # pair (the excluded ones are replaced by -inf below, whatever they became).
        scores = p.softcap * torch.tanh(scores / p.softcap)
    if p.attn_mask is not None and p.attn_mask.dtype != torch.bool:
        scores = scores + p.attn_mask.to(dtype)

    # Put back the non-finite q / k entries that an allowed pair really uses (item 3).
    bad_q = ~torch.isfinite(p.q).all(dim=-1)  # (B, Hq, Nq)
    bad_k = (~torch.isfinite(p.k).all(dim=-1)).repeat_interleave(group, dim=1)  # (B, Hq, Nk)
    if bad_q.any() or bad_k.any():
        poisoned = allowed & (bad_q[..., :, None] | bad_k[..., None, :])
        scores = scores + torch.where(poisoned, nan, zero)

    scores = torch.where(allowed, scores, neg_inf)
    if p.seq_k == 0:
        row_max = neg_inf.expand(*scores.shape[:-1], 1)
    else:
        # detach: softmax is shift-invariant, the max needs no gradient.
        row_max = scores.amax(dim=-1, keepdim=True).detach()
    safe_max = torch.where(row_max == float("-inf"), zero, row_max)
    weights = torch.exp(scores - safe_max)
    row_sum = weights.sum(dim=-1, keepdim=True)
    empty = row_sum == 0
    safe_sum = torch.where(empty, one, row_sum)
    probs = weights / safe_sum
    if p.dropout_p > 0:
        if keep is None:  # a mask of this module's own: the kernels' is passes.dropout_keep
            keep = draw_dropout_keep(probs.shape, probs.device, p.dropout_p)
        out = torch.where(keep, probs / (1.0 - p.dropout_p), zero) @ v
    else:
        out = probs @ v

    bad_v = ~torch.isfinite(p.v)
    if bad_v.any():
        # out[i, d] really uses v[j, d] for every allowed j: count the non-finite ones.
        count_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        bad_count = allowed.to(count_dtype) @ bad_v.repeat_interleave(group, dim=1).to(count_dtype)
        poison = torch.where(bad_count > 0, nan, zero)
        # probs.sum(-1) is finite and independent of v: the poison term is NaN exactly where
        # the output must be, exact 0 elsewhere, and gives the scores (hence dq and dk of the
        # attended keys) a NaN gradient as the true math would.
        out = out + probs.sum(dim=-1, keepdim=True) * poison

    lse = torch.where(empty, neg_inf, safe_max + safe_sum.log())
    return out.to(p.q.dtype), lse.squeeze(-1).to(_lse_dtype(p.q.dtype))


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool | str = False,
    window: tuple[int, int] | None = None,
    key_mask: Tensor | None = None,
    attn_mask: Tensor | None = None,
    scale: float | None = None,
    softcap: float | None = 0.0,
    return_lse: bool = False,
    deterministic: bool = False,
    upcast: bool = True,
    dropout_p: float = 0.0,
    dropout_keep: Tensor | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Reference attention with safeattn.attention's contract.

    Shapes: q (B, Hq, Nq, D), k/v (B, Hkv, Nk, D), Hq % Hkv == 0, any strides.
    Returns out (B, Hq, Nq, D) in q's dtype, or (out, lse) with lse (B, Hq, Nq) in float32
    (float64 for float64 inputs), natural log, -inf for rows with no allowed key.

    upcast=True computes float16/bfloat16 in float32 and casts the output back; upcast=False is
    plain PyTorch math in the input dtype (the "PyTorch's own error" baseline of contract
    item 6). ``softcap > 0`` replaces each score s = q·k·scale by softcap·tanh(s / softcap)
    before an additive attn_mask is added (0.0 or None: off). ``deterministic`` is accepted
    for signature parity; this path always is. ``dropout_p``: dropout of the weights, with
    ``dropout_keep`` (bool (B, Hq, Nq, Nk), e.g. the kernels' mask from
    ``safeattn.kernels.passes.dropout_keep``) or a mask drawn here.
    """
    p = check_attention(
        q,
        k,
        v,
        causal=causal,
        window=window,
        key_mask=key_mask,
        attn_mask=attn_mask,
        scale=scale,
        softcap=softcap,
        return_lse=return_lse,
        deterministic=deterministic,
        allow_float64=True,
        dropout_p=dropout_p,
    )
    return attend_problem(p, upcast, dropout_keep)


def varlen_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    *,
    causal: bool | str = False,
    window: tuple[int, int] | None = None,
    scale: float | None = None,
    softcap: float | None = 0.0,
    return_lse: bool = False,
    deterministic: bool = False,
    upcast: bool = True,
) -> Tensor | tuple[Tensor, Tensor]:
    """Reference varlen attention with safeattn.varlen_attention's contract.

    Shapes: packed q (total_q, Hq, D), k/v (total_k, Hkv, D), cu_seqlens_* int32 (B + 1,).
    Sequence b uses q rows cu_seqlens_q[b]:cu_seqlens_q[b+1] against its own keys; causal and
    window are aligned per sequence; zero-length sequences are allowed; softcap as
    :func:`attention`.
    Returns out (total_q, Hq, D), or (out, lse) with lse (Hq, total_q).
    """
    p = check_varlen(
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        causal=causal,
        window=window,
        scale=scale,
        softcap=softcap,
        return_lse=return_lse,
        deterministic=deterministic,
        allow_float64=True,
    )
    return attend_problem(p, upcast)


def attend_problem(
    p: AttnProblem, upcast: bool = True, keep: Tensor | None = None
) -> Tensor | tuple[Tensor, Tensor]:
    """Reference attention of an already validated problem (``safeattn._inputs``), dense or
    varlen: what :func:`attention` and :func:`varlen_attention` return for it, without
    checking the arguments again (``safeattn.attention`` on CPU comes here once it has).

    Returns out (B, Hq, Nq, D) dense or (total_q, Hq, D) varlen, or (out, lse) with lse
    (B, Hq, Nq) dense or (Hq, total_q) varlen, as the two public functions. ``keep``:
    dropout's keep mask (B, Hq, max Nq, max Nk) when p.dropout_p > 0 (None: drawn here).
    """
    out, lse = _attend_varlen(p, upcast, keep) if p.varlen else _attend(p, upcast, keep)
    return (out, lse) if p.return_lse else out


def _attend_varlen(p: AttnProblem, upcast: bool, keep: Tensor | None) -> tuple[Tensor, Tensor]:
    """Varlen reference core: each sequence as a dense problem of batch 1 ->
    (out (total_q, Hq, D), lse (Hq, total_q))."""
    q = p.q
    outs = [q.new_zeros(0, p.heads_q, p.head_dim)]
    lses = [torch.zeros(p.heads_q, 0, dtype=_lse_dtype(q.dtype), device=q.device)]
    for i, part in enumerate(_sequence_problems(p)):
        nq, nk = part.problem.seq_q, part.problem.seq_k
        out, lse = _attend(
            part.problem, upcast, None if keep is None else keep[i : i + 1, :, :nq, :nk]
        )
        outs.append(out[0].transpose(0, 1))  # (Lq, Hq, D)
        lses.append(lse[0])  # (Hq, Lq)
    return torch.cat(outs, dim=0), torch.cat(lses, dim=1)
