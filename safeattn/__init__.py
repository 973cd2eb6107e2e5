"""safeattn: NaN-safe fused attention (forward + backward) in Triton.

Public API::

    safeattn.attention(q, k, v, *, causal=False, window=None, key_mask=None, attn_mask=None,
                       scale=None, return_lse=False, deterministic=False)
    safeattn.varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *,
                              causal=False, window=None, scale=None, return_lse=False,
                              deterministic=False)
    safeattn.scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                          is_causal=False, scale=None, enable_gqa=False)
    safeattn.reference   # pure-PyTorch implementation of the same contract (fp64 too)
"""

from . import reference
from .api import attention, scaled_dot_product_attention, varlen_attention

__all__ = ["attention", "reference", "scaled_dot_product_attention", "varlen_attention"]
__version__ = "0.1.0"
