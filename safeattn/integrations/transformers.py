"""Hugging Face transformers backend: ``attn_implementation="safeattn"``.

    import safeattn.integrations.transformers as sa_hf

    sa_hf.register()  # once per process
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="safeattn")

Works for models that call attention through transformers' attention interface (Llama,
Mistral, Qwen, Gemma, ... : ``ALL_ATTENTION_FUNCTIONS[config._attn_implementation]``).
Gemma 2's logit soft-capping (``softcap``) runs in safeattn's kernels.
Masks are built as for ``"sdpa"`` (transformers' ``sdpa_mask``: a (B, 1, Nq, Nk) bool mask,
True = attend, or None where plain causal attention is exact), so padding, causal and
sliding-window models get the same mask SDPA would; safeattn then takes its block-sparse
path (``safeattn.blockmask``), and the one mask tensor that every layer of a forward pass
receives is summarised once. Grouped-query attention runs without repeating K/V.

Differences from ``"sdpa"``, on purpose: query rows with no key to attend (left padding)
output exactly 0 instead of the garbage or NaN SDPA gives them, and NaN/Inf held in padded
key/value positions never reach a real token.

Attention dropout (``config.attention_dropout`` in training) is safeattn's own (``dropout_p``).
Not supported (a clear error rather than a silent fallback): attention sinks, paged caches
(continuous batching).
``output_attentions=True`` returns no weights, as with ``"sdpa"``.
"""

from __future__ import annotations

from typing import Any

import torch

from ..api import attention

NAME = "safeattn"


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature over :func:`safeattn.attention`.

    Args:
        module: the calling attention layer (its ``is_causal`` is read when ``is_causal`` is
            None, as transformers' SDPA path does).
        query: (B, Hq, Nq, D); key, value: (B, Hkv, Nk, D), ``Hq % Hkv == 0``.
        attention_mask: None, or bool (B or 1, 1, Nq, Nk), True = attend (``sdpa_mask``),
            or an additive float mask broadcastable to (B, Hq, Nq, Nk).
        dropout: attention dropout probability (transformers passes 0.0 in eval).
        scaling: logit scale (default 1/sqrt(D)).
        kwargs: ``position_bias`` (additive, broadcastable to (B, Hq, Nq, Nk)) and
            ``softcap`` (Gemma 2's ``attn_logit_softcapping``; None = off) are applied;
            ``s_aux`` (sinks) and paged ``cache`` objects are refused.

    Returns:
        (out (B, Nq, Hq, D) contiguous, None): the layout transformers' layers expect.
    """
    if kwargs.get("s_aux") is not None:
        raise NotImplementedError(
            "safeattn (transformers backend): `s_aux` (attention sinks) is not supported.\n"
            'HINT: use attn_implementation="eager" or "flex_attention" for this model.'
        )
    cache = kwargs.get("cache")
    if cache is not None and type(cache).__name__ == "PagedAttentionCache":
        raise NotImplementedError(
            "safeattn (transformers backend): paged caches (continuous batching) are not "
            'supported.\nHINT: use attn_implementation="sdpa" for continuous batching.'
        )
    q_len = query.shape[2]
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    # As transformers' SDPA path: no mask means plain causal attention (top-left, which also
    # covers a prefill into an empty static cache), except when decoding a single token.
    causal = bool(is_causal) and attention_mask is None and q_len > 1
    mask = attention_mask
    bias = kwargs.get("position_bias")
    if bias is not None:  # additive bias (T5-style): fold the bool mask into it
        bias = bias.to(torch.float32)
        mask = bias if mask is None else _as_additive(mask, bias)
    softcap = kwargs.get("softcap")
    out = attention(
        query, key, value, causal=causal, attn_mask=mask, scale=scaling, softcap=softcap,
        dropout_p=float(dropout),
    )  # fmt: skip
    return out.transpose(1, 2).contiguous(), None


def _as_additive(mask: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    if mask.dtype == torch.bool:
        return bias.masked_fill(~mask, float("-inf"))
    return bias + mask.to(bias.dtype)


def register(name: str = NAME) -> str:
    """Make ``attn_implementation=name`` available to every transformers model; returns the
    name. Idempotent. Raises ImportError with a hint when transformers is not installed."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError as exc:
        raise ImportError(
            "safeattn.integrations.transformers needs transformers.\n"
            "HINT: pip install 'safeattn[transformers]' (or pip install transformers)."
        ) from exc
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, sdpa_mask)
    return name
