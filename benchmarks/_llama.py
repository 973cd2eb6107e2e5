"""A small Llama-style decoder in plain PyTorch, for ``speed.ModelStepSuite`` (a private
module: asv imports it and finds no benchmark; torch is imported inside the functions).

No download and no transformers: the architecture is written out here, functionally (the
weights are a dict of tensors), at the size ``regress.workloads.MODEL`` fixes
(4 layers, hidden 2048, 16 query heads and 4 key/value heads of 128, SwiGLU, vocabulary
8192). Per layer::

    x = x + Wo · attend(rope(Wq · n), rope(Wk · n), Wv · n),  n = rmsnorm(x)
    x = x + Wdown · (silu(Wgate · n) * Wup · n),              n = rmsnorm(x)

then a final RMSNorm, an untied output projection to the vocabulary and a cross-entropy
loss in float32 over the positions whose label is not padding (``ignore_index=-100``).

The attention is the only thing that varies: :func:`attention_for` gives each
implementation's call with its natural mask for a (possibly left-padded) batch, built from
the batch's (B, N) padding mask as a training loop builds it, once per batch:

- ``safeattn``: ``safeattn.attention(q, k, v, causal=True, key_mask=keep)`` (no mask
  without padding); grouped-query attention natively (no repeated K/V).
- ``sdpa``: ``F.scaled_dot_product_attention`` with PyTorch's default backend choice.
  Without padding ``is_causal=True, enable_gqa=True``; with padding, as transformers'
  sdpa path does, a dense (B, 1, N, N) bool mask (causal & key kept, rows without any key
  un-masked: ``_masks.unmask_empty_rows`` says why) and K/V repeated to the query heads
  (transformers repeats them whenever there is a mask: SDPA's ``enable_gqa`` with a mask
  would fall back to the math backend).
- ``flex``: FlexAttention (compiled, ``_attention.compiled_flex``) with a BlockMask created
  for the batch (causal, or causal & key kept) and ``enable_gqa=True``.

Activations use the layout a real decoder has: projections give (B, N, H, D), rotary
embeddings are applied there, and attention gets the (B, H, N, D) transposed views.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import _masks
from ._attention import compiled_flex, dtype_of
from ._truth import workloads

IGNORE_INDEX = -100  # F.cross_entropy's default ignore_index: a padding position's label
IMPLS = ("safeattn", "sdpa", "flex")


def init_params(
    cfg: Any = None, device: Any = "cuda", dtype: str = "bfloat16", seed: int = 0
) -> dict[str, Any]:
    """The model's weights: name -> leaf tensor requiring grad, normal(0, 0.02) matrices
    and unit RMSNorm scales, seeded. ``cfg``: a ``workloads.ModelConfig`` (default: the
    suite's model)."""
    import torch

    cfg = cfg or workloads.MODEL
    gen = torch.Generator(device=device).manual_seed(seed)
    kind = dtype_of(dtype)

    def matrix(rows: int, cols: int):
        return torch.randn(rows, cols, device=device, dtype=kind, generator=gen) * 0.02

    def ones(n: int):
        return torch.ones(n, device=device, dtype=kind)

    q_width, kv_width = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    params = {"embed": matrix(cfg.vocab, cfg.hidden)}
    for i in range(cfg.layers):
        params |= {
            f"{i}.attn_norm": ones(cfg.hidden),
            f"{i}.wq": matrix(q_width, cfg.hidden),
            f"{i}.wk": matrix(kv_width, cfg.hidden),
            f"{i}.wv": matrix(kv_width, cfg.hidden),
            f"{i}.wo": matrix(cfg.hidden, q_width),
            f"{i}.mlp_norm": ones(cfg.hidden),
            f"{i}.w_gate": matrix(cfg.intermediate, cfg.hidden),
            f"{i}.w_up": matrix(cfg.intermediate, cfg.hidden),
            f"{i}.w_down": matrix(cfg.hidden, cfg.intermediate),
        }
    params |= {"final_norm": ones(cfg.hidden), "lm_head": matrix(cfg.vocab, cfg.hidden)}
    for p in params.values():
        p.requires_grad_(True)
    return params


@dataclass
class Batch:
    """One training batch of B sequences of N tokens, left-padded.

    ``input_ids`` (B, N) int64; ``labels`` (B, N) int64, the next token, or -100 where the
    position is padding or last; ``positions`` (B, N) int64, rotary positions counted from
    each sequence's first real token; ``keep`` (B, N) bool, True = real token, or None when
    no element is padded.
    """

    input_ids: Any
    labels: Any
    positions: Any
    keep: Any


def make_batch(
    cfg: Any, left_padding: tuple[int, ...], seq_len: int, device: Any = "cuda", seed: int = 0
) -> Batch:
    """Random tokens (seeded) with ``left_padding[b]`` padding tokens (id 0) first in row b."""
    import torch

    cfg = cfg or workloads.MODEL
    gen = torch.Generator(device=device).manual_seed(seed)
    batch = len(left_padding)
    ids = torch.randint(1, cfg.vocab, (batch, seq_len), device=device, generator=gen)
    keep = _masks.keep_mask(left_padding, seq_len, device)
    ids = ids.masked_fill(~keep, 0)
    labels = torch.full_like(ids, IGNORE_INDEX)
    # Position i predicts token i + 1; a padding position predicts nothing (with left
    # padding a real position is always followed by a real one).
    labels[:, :-1] = ids[:, 1:].masked_fill(~keep[:, :-1], IGNORE_INDEX)
    # Positions as transformers derives them from the padding mask: 0 at the first real
    # token, padding clamped to 0.
    positions = (keep.long().cumsum(-1) - 1).clamp(min=0)
    padded = any(p > 0 for p in left_padding)
    return Batch(ids, labels, positions, keep if padded else None)


def attention_for(
    impl: str, keep: Any, seq_len: int, device: Any = "cuda", flex: Callable | None = None
) -> Callable:
    """``attend(q, k, v) -> out`` of ``impl`` for a batch, its mask built here (call it once
    per batch, inside the timed step). q (B, Hq, N, D), k and v (B, Hkv, N, D); ``keep``:
    the batch's (B, N) padding mask on ``device``, or None. ``flex`` replaces the compiled
    FlexAttention (the CPU tests pass the eager one). See the module docstring for each
    implementation's mask."""
    import torch

    if impl == "safeattn":
        import safeattn

        return lambda q, k, v: safeattn.attention(q, k, v, causal=True, key_mask=keep)
    if impl == "sdpa":
        sdpa = torch.nn.functional.scaled_dot_product_attention
        if keep is None:
            return lambda q, k, v: sdpa(q, k, v, is_causal=True, enable_gqa=True)
        mask = _masks.unmask_empty_rows(_masks.padded_causal_dense(keep))

        def padded_sdpa(q, k, v):
            groups = q.shape[1] // k.shape[1]
            k, v = (t.repeat_interleave(groups, dim=1) for t in (k, v))
            return sdpa(q, k, v, attn_mask=mask)

        return padded_sdpa
    if impl == "flex":
        flex = flex or compiled_flex()
        if keep is None:
            mask = _masks.block_mask(_masks.causal_mod, None, seq_len, device)
        else:
            mask = _masks.block_mask(_masks.padded_causal_mod(keep), keep.shape[0], seq_len, device)
        return lambda q, k, v: flex(q, k, v, block_mask=mask, enable_gqa=True)
    raise ValueError(f"benchmarks: unknown model impl {impl!r}; known: {IMPLS}")


def _rms_norm(x, weight, eps: float):
    import torch

    # In float32, as Llama does: bf16 squares lose the small components.
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


def _rotary(positions, head_dim: int, theta: float, dtype):
    """cos, sin (B, N, 1, D) for rotating pairs (i, i + D/2) by position · theta^(-2i/D)."""
    import torch

    exponent = torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32)
    inv_freq = theta ** (-exponent / head_dim)
    angles = positions[..., None].float() * inv_freq  # (B, N, D/2)
    angles = torch.cat((angles, angles), dim=-1)[:, :, None, :]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _rotate(x, cos, sin):
    import torch

    half = x.shape[-1] // 2
    rotated_half = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated_half * sin


def loss(params: dict[str, Any], cfg: Any, batch: Batch, attend: Callable):
    """Mean cross-entropy of the next-token labels (padding ignored), float32 scalar."""
    import torch.nn.functional as F

    cfg = cfg or workloads.MODEL
    x = F.embedding(batch.input_ids, params["embed"])
    b, n, _ = x.shape
    cos, sin = _rotary(batch.positions, cfg.head_dim, cfg.rope_theta, x.dtype)
    for i in range(cfg.layers):
        h = _rms_norm(x, params[f"{i}.attn_norm"], cfg.rms_eps)
        q = F.linear(h, params[f"{i}.wq"]).view(b, n, cfg.heads, cfg.head_dim)
        k = F.linear(h, params[f"{i}.wk"]).view(b, n, cfg.kv_heads, cfg.head_dim)
        v = F.linear(h, params[f"{i}.wv"]).view(b, n, cfg.kv_heads, cfg.head_dim)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        out = attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        x = x + F.linear(out.transpose(1, 2).reshape(b, n, -1), params[f"{i}.wo"])
        h = _rms_norm(x, params[f"{i}.mlp_norm"], cfg.rms_eps)
        gated = F.silu(F.linear(h, params[f"{i}.w_gate"])) * F.linear(h, params[f"{i}.w_up"])
        x = x + F.linear(gated, params[f"{i}.w_down"])
    logits = F.linear(_rms_norm(x, params["final_norm"], cfg.rms_eps), params["lm_head"])
    return F.cross_entropy(
        logits.float().view(-1, cfg.vocab), batch.labels.view(-1), ignore_index=IGNORE_INDEX
    )


def train_step(
    params: dict[str, Any], cfg: Any, batch: Batch, impl: str, flex: Callable | None = None
):
    """One training step without the optimizer: the batch's mask, forward, loss, backward.
    Returns the loss (detached).

    The padding mask is copied first: each step of a training loop gets a new batch, hence
    a new mask tensor, so nothing an implementation cached for the previous step's mask
    (safeattn keeps a mask tensor's block summary while the tensor is unchanged) may be
    reused across steps; within the step, every layer reuses what the first one built.
    """
    ids = batch.input_ids
    keep = None if batch.keep is None else batch.keep.clone()
    attend = attention_for(impl, keep, ids.shape[1], ids.device, flex)
    value = loss(params, cfg, batch, attend)
    value.backward()
    return value.detach()


def qkv_like_model(
    cfg: Any, batch: int, seq_len: int, dtype: str = "bfloat16", device: Any = "cuda"
) -> tuple:
    """q (B, Hq, N, D), k, v (B, Hkv, N, D) with the model's memory layout (transposed
    views of (B, N, H, D)), requiring grad, and an upstream gradient like q: what the
    prewarm compiles for, since compiled FlexAttention specialises on strides."""
    import torch

    cfg = cfg or workloads.MODEL

    def make(heads: int, grad: bool = True):
        t = torch.randn(batch, seq_len, heads, cfg.head_dim, device=device, dtype=dtype_of(dtype))
        return t.requires_grad_(grad).transpose(1, 2)

    return make(cfg.heads), make(cfg.kv_heads), make(cfg.kv_heads), make(cfg.heads, False)
