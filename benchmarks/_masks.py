"""Mask builders of the masked-attention benchmarks (a private module: asv imports it and
finds no benchmark; torch is imported inside the functions, see benchmarks/_grid.py).

The workloads themselves (batch, lengths, paddings, documents, attended pairs) are facts of
``regress/workloads.py``; this module turns them into what each implementation
takes as its mask, and into one call per (mask kind, implementation):

=================== ==================================== ==================================
kind                safeattn                             flex / SDPA peers
=================== ==================================== ==================================
key_padding_causal  ``attention(causal=True,             BlockMask of causal & key kept /
                    key_mask=keep)``, keep (B, N) bool   dense (B, 1, N, N) bool mask
sliding_window      ``attention(causal=True,             BlockMask of the window /
                    window=(W - 1, 0))``                 dense (1, 1, N, N) bool mask
varlen_docs         ``varlen_attention(cu_seqlens,       BlockMask of same-document & causal
                    causal=True)``, packed (T, H, D)     on one (1, H, T, D) sequence /
                                                         dense (1, 1, T, T) bool mask
bool_mask           ``scaled_dot_product_attention(      BlockMask of causal & key kept /
                    attn_mask=dense)``, dense (B, 1, N,  the same dense mask
                    N) bool: what transformers passes
=================== ==================================== ==================================

Every mask (the ``keep`` tensor, the dense masks, the BlockMasks, ``cu_seqlens``) is built
once, by :func:`mask_case`, before any timed call: a model builds its masks once per step
and reuses them in every layer, so one attention call does not pay for them.
``speed.ModelStepSuite`` builds them inside its timed step instead (once per batch), with
the same functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._attention import compiled_flex, dtype_of
from ._truth import workloads

# --- the masks, one function per structure (tensors on ``device``) ------------------------


def keep_mask(left_padding: tuple[int, ...], seq_len: int, device: Any = "cuda"):
    """(B, N) bool, True = this key may be attended (not padding): element b loses its
    first ``left_padding[b]`` tokens. The sense of safeattn's ``key_mask`` and of Hugging
    Face's ``attention_mask``."""
    import torch

    pads = torch.tensor(left_padding, device=device)
    return torch.arange(seq_len, device=device)[None, :] >= pads[:, None]


def causal_dense(seq_len: int, device: Any = "cuda"):
    """(N, N) bool, True where key j <= query i (top-left causal, as SDPA's is_causal)."""
    import torch

    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()


def padded_causal_dense(keep):
    """(B, 1, N, N) bool = causal & key kept: the mask transformers' ``sdpa_mask`` builds
    from a (B, N) padding mask for a causal decoder. Query rows inside the left padding
    have no key at all (empty rows)."""
    seq_len = keep.shape[-1]
    return causal_dense(seq_len, keep.device)[None, None] & keep[:, None, None, :]


def unmask_empty_rows(mask):
    """``mask`` with every row that allows no key opened to all keys.

    What transformers' ``AttentionMaskConverter._unmask_unattended`` did before calling
    SDPA, and what its ``sdpa_mask`` still does on torch < 2.5, whose SDPA returns NaN for
    a row with no key (torch >= 2.5's math and memory-efficient backends return 0 there;
    cuDNN's returns garbage, DESIGN.md). ModelStepSuite's ``sdpa`` does it so that its loss
    is finite whichever backend PyTorch picks. It changes nothing that matters: the padding
    rows' outputs are discarded (their labels are ignored, and every later row excludes
    their keys), and a dense-mask SDPA kernel visits all N x N pairs anyway.
    """
    return mask | ~mask.any(dim=-1, keepdim=True)


def window_dense(seq_len: int, window: int, device: Any = "cuda"):
    """(1, 1, N, N) bool: query i sees keys i - window + 1 .. i."""
    import torch

    i = torch.arange(seq_len, device=device)
    distance = i[:, None] - i[None, :]
    return ((distance >= 0) & (distance < window))[None, None]


def document_ids(doc_lengths: tuple[int, ...], device: Any = "cuda"):
    """(T,) int32: the document each packed token belongs to."""
    import torch

    lengths = torch.tensor(doc_lengths, device=device)
    return torch.repeat_interleave(
        torch.arange(len(doc_lengths), device=device, dtype=torch.int32), lengths
    )


def cu_seqlens(doc_lengths: tuple[int, ...], device: Any = "cuda"):
    """(docs + 1,) int32 cumulative lengths starting at 0 (FlashAttention's varlen layout)."""
    import torch

    lengths = torch.tensor((0, *doc_lengths), device=device, dtype=torch.int32)
    return lengths.cumsum(0, dtype=torch.int32)


def documents_dense(doc_ids):
    """(1, 1, T, T) bool: same document and causal."""
    same = doc_ids[:, None] == doc_ids[None, :]
    return (same & causal_dense(doc_ids.shape[0], doc_ids.device))[None, None]


# FlexAttention mask_mods: (batch, head, query index, key index) -> bool, True = attend.


def causal_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def padded_causal_mod(keep):
    """causal & key kept, reading the (B, N) ``keep`` tensor as transformers' flex path
    reads its padding mask."""

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & keep[b, kv_idx]

    return mask_mod


def window_mod(window: int):
    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)

    return mask_mod


def documents_mod(doc_ids):
    def mask_mod(b, h, q_idx, kv_idx):
        return (doc_ids[q_idx] == doc_ids[kv_idx]) & (q_idx >= kv_idx)

    return mask_mod


def block_mask(mask_mod, batch: int | None, seq_len: int, device: Any = "cuda"):
    """``create_block_mask`` of ``mask_mod`` for every head alike (``batch`` None: for every
    batch element alike), with FlexAttention's default block size."""
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(mask_mod, batch, None, seq_len, seq_len, device=device)


# --- one attention call per (mask kind, implementation) -----------------------------------


@dataclass
class MaskCase:
    """A ready-to-time call: ``call(q, k, v) -> out`` with its masks built, and its inputs
    ``(q, k, v, grad_out)`` (q/k/v leaves requiring grad). Shapes: (B, H, N, D), or for
    safeattn's varlen_docs the packed (T, H, D)."""

    call: Callable
    inputs: tuple


def mask_case(
    kind: str,
    impl: str,
    dtype: str,
    head_dim: int,
    device: Any = "cuda",
    workload: Any = None,
    flex: Callable | None = None,
    heads: int | None = None,
) -> MaskCase:
    """The call of ``impl`` ("safeattn", "flex", or an SDPA peer "sdpa_*": the backend is
    pinned by the caller, ``_attention.impl_context``) on mask ``kind``, masks built here.

    ``workload`` replaces the suite's (``workloads.MASK_WORKLOADS[kind]``; the tests pass a
    shrunk one), ``heads`` the suite's 2048 // D, ``flex`` the compiled FlexAttention (the
    tests pass the eager one). Inputs are seeded, equal across implementations: (B, H, N, D)
    normal values, varlen_docs's packed layout being the same values in (T, H, D).
    """
    import torch

    w = workload or workloads.MASK_WORKLOADS[kind]
    heads = heads or workloads.heads_for(head_dim)
    gen = torch.Generator(device=device).manual_seed(0)
    shape = (w.batch, heads, w.seq_len, head_dim)
    base = [
        torch.randn(shape, device=device, dtype=dtype_of(dtype), generator=gen) for _ in range(4)
    ]
    packed = impl == "safeattn" and kind == "varlen_docs"
    if packed:  # (1, H, T, D) -> (T, H, D), contiguous as a varlen caller holds it
        base = [t[0].transpose(0, 1).contiguous() for t in base]
    q, k, v, grad_out = base
    for t in (q, k, v):
        t.requires_grad_(True)
    return MaskCase(_call(kind, impl, w, device, flex), (q, k, v, grad_out))


def _call(kind: str, impl: str, w: Any, device: Any, flex: Callable | None) -> Callable:
    import torch

    if kind not in workloads.MASK_WORKLOADS:
        raise ValueError(f"benchmarks: unknown mask kind {kind!r}; known: {workloads.MASK_KINDS}")
    keep = keep_mask(w.left_padding, w.seq_len, device) if w.left_padding else None
    doc_ids = document_ids(w.doc_lengths, device) if w.doc_lengths else None

    if impl == "safeattn":
        import safeattn

        if kind == "key_padding_causal":
            return lambda q, k, v: safeattn.attention(q, k, v, causal=True, key_mask=keep)
        if kind == "sliding_window":
            window = (w.window - 1, 0)
            return lambda q, k, v: safeattn.attention(q, k, v, causal=True, window=window)
        if kind == "varlen_docs":
            cu = cu_seqlens(w.doc_lengths, device)
            longest = max(w.doc_lengths)
            return lambda q, k, v: safeattn.varlen_attention(
                q, k, v, cu, cu, longest, longest, causal=True
            )
        dense = padded_causal_dense(keep)  # bool_mask
        return lambda q, k, v: safeattn.scaled_dot_product_attention(q, k, v, attn_mask=dense)

    if impl == "flex":
        flex = flex or compiled_flex()
        if kind in ("key_padding_causal", "bool_mask"):
            mask = block_mask(padded_causal_mod(keep), w.batch, w.seq_len, device)
        elif kind == "sliding_window":
            mask = block_mask(window_mod(w.window), None, w.seq_len, device)
        else:
            mask = block_mask(documents_mod(doc_ids), None, w.seq_len, device)
        return lambda q, k, v: flex(q, k, v, block_mask=mask)

    if impl.startswith("sdpa"):
        if kind in ("key_padding_causal", "bool_mask"):
            dense = padded_causal_dense(keep)
        elif kind == "sliding_window":
            dense = window_dense(w.seq_len, w.window, device)
        else:
            dense = documents_dense(doc_ids)
        sdpa = torch.nn.functional.scaled_dot_product_attention
        return lambda q, k, v: sdpa(q, k, v, attn_mask=dense)
    raise ValueError(f"benchmarks: unknown impl {impl!r}")
