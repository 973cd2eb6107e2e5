"""safeattn: NaN-safe fused attention (forward + backward) in Triton.

Public API::

    safeattn.attention(q, k, v, *, causal=False, window=None, key_mask=None, attn_mask=None,
                       scale=None, softcap=0.0, return_lse=False, deterministic=False,
                       block_mask=None)
    safeattn.varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *,
                              causal=False, window=None, scale=None, softcap=0.0,
                              return_lse=False, deterministic=False)
    safeattn.scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                          is_causal=False, scale=None, enable_gqa=False)
    safeattn.reference   # pure-PyTorch implementation of the same contract (fp64 too)
    safeattn.block_mask(seq_q, seq_k, *, causal=False, window=None, key_mask=None,
                        attn_mask=None) -> BlockMask   # built once, passed to every layer

The names are resolved on first use (PEP 562), so importing ``safeattn.gpu_limits`` — what
the regression service (the ``regress`` package) and the dashboard take from here — does not
import torch or Triton.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "BlockMask",
    "attention",
    "block_mask",
    "reference",
    "scaled_dot_product_attention",
    "varlen_attention",
]
__version__ = "0.1.0"

_API = {"attention", "scaled_dot_product_attention", "varlen_attention"}


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(importlib.import_module(".api", __name__), name)
    if name == "reference":
        return importlib.import_module(".reference", __name__)
    if name in ("block_mask", "BlockMask"):
        return getattr(importlib.import_module(".blockmask", __name__), name)
    raise AttributeError(f"module 'safeattn' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
