"""``safeattn.integrations.transformers``: ``attn_implementation="safeattn"`` in real
transformers models (tiny, randomly initialised from a config: no download), against
transformers' own ``"eager"`` attention on a left-padded batch, in float32.

On a CPU these run safeattn's reference path, or its Triton kernels under the interpreter
with ``TRITON_INTERPRET=1`` (as CI runs them); ``--gpu`` runs them on CUDA.
"""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
)

import safeattn
import safeattn.integrations.transformers as sa_hf

PAD = 0
LAYERS = 2


def _config(kind: str):
    common = dict(
        vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        pad_token_id=PAD, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    if kind == "mistral":  # a sliding-window model: the window is part of the mask
        return MistralConfig(sliding_window=5, **common)
    if kind == "gemma2":  # logit soft-capping (a low cap, so that it changes the result)
        return Gemma2Config(
            head_dim=16, attn_logit_softcapping=0.5, final_logit_softcapping=None,
            query_pre_attn_scalar=16, sliding_window=5, **common,
        )  # fmt: skip
    return LlamaConfig(**common)


def _pair(kind: str, device: str):
    """(safeattn model, eager model) with the same float32 weights."""
    sa_hf.register()
    cls = {"mistral": MistralForCausalLM, "gemma2": Gemma2ForCausalLM}.get(kind, LlamaForCausalLM)
    torch.manual_seed(0)
    cfg = _config(kind)
    ours = cls._from_config(copy.deepcopy(cfg), attn_implementation="safeattn")
    eager = cls._from_config(copy.deepcopy(cfg), attn_implementation="eager")
    eager.load_state_dict(ours.state_dict())
    return ours.to(device).float(), eager.to(device).float()


def _batch(device: str, n: int = 12, pads: tuple[int, ...] = (0, 4, 11)):
    """Left-padded token ids and attention mask (B = len(pads), N = n)."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 97, (len(pads), n), generator=gen)
    mask = torch.ones(len(pads), n, dtype=torch.long)
    for b, p in enumerate(pads):
        ids[b, :p] = PAD
        mask[b, :p] = 0
    return ids.to(device), mask.to(device)


@pytest.fixture
def calls(monkeypatch):
    """The (q, k) shapes of every safeattn call the models make."""
    seen: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    inner = sa_hf.attention

    def counting(q, k, v, **kw):
        seen.append((tuple(q.shape), tuple(k.shape)))
        return inner(q, k, v, **kw)

    monkeypatch.setattr(sa_hf, "attention", counting)
    return seen


@pytest.mark.parametrize("kind", ["llama", "mistral", "gemma2"])
def test_logits_and_gradients_match_eager(kind, device, calls):
    ours, eager = _pair(kind, device)
    ids, mask = _batch(device)
    keep = mask.bool()
    # A label is predicted from the position before it: none from a padding position (its
    # output is 0 here and an average of the padding's values in eager, on purpose).
    after_pad = torch.cat([torch.zeros_like(keep[:, :1]), ~keep[:, :-1]], dim=1)
    labels = ids.masked_fill(~keep | after_pad, -100)
    out_ours = ours(input_ids=ids, attention_mask=mask, labels=labels)
    out_eager = eager(input_ids=ids, attention_mask=mask, labels=labels)
    # GQA reaches safeattn unrepeated: 4 query heads over 2 key/value heads, once per layer.
    assert len(calls) == LAYERS
    assert all(q[1] == 4 and k[1] == 2 for q, k in calls)
    # Padding rows differ on purpose (0 here, a uniform average of padding in eager).
    torch.testing.assert_close(out_ours.logits[keep], out_eager.logits[keep], rtol=1e-4, atol=1e-5)
    out_ours.loss.backward()
    out_eager.loss.backward()
    for (name, p), q in zip(ours.named_parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-5, msg=name)


def test_generate_left_padded_matches_eager(device, calls):
    ours, eager = _pair("llama", device)
    ids, mask = _batch(device, pads=(0, 3))
    kw = dict(attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=PAD)
    with torch.no_grad():
        got = ours.generate(ids, **kw)
        want = eager.generate(ids, **kw)
    assert torch.equal(got, want)
    # Prefill (12 queries) and three single-token decoding steps, per layer.
    assert [q[2] for q, _ in calls[::LAYERS]] == [12, 1, 1, 1]


def test_nan_in_padding_stays_out(device):
    """NaN held in the padding token's embedding: eager leaks it into every real token of
    that sequence (0 x NaN in its masked softmax · V); safeattn keeps the real tokens
    exactly as without the NaN."""
    ours, eager = _pair("llama", device)
    ids, mask = _batch(device)
    keep = mask.bool()
    with torch.no_grad():
        clean = ours(input_ids=ids, attention_mask=mask).logits
        for m in (ours, eager):
            m.get_input_embeddings().weight[PAD] = float("nan")
        poisoned = ours(input_ids=ids, attention_mask=mask).logits
        leaked = eager(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(poisoned[keep], clean[keep])
    assert torch.isnan(leaked[1][keep[1]]).any(), "eager no longer leaks: test premise changed"


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(s_aux=torch.zeros(4)), "s_aux"),
    ],
    ids=["sinks"],
)
def test_unsupported_features_are_refused(kwargs, match):
    q = torch.randn(1, 4, 3, 8)
    k = v = torch.randn(1, 2, 3, 8)
    with pytest.raises(NotImplementedError, match=match):
        sa_hf.attention_forward(torch.nn.Module(), q, k, v, None, **kwargs)


def test_position_bias_is_added_under_the_mask():
    """A T5-style additive bias combines with the bool mask: masked pairs stay excluded."""
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    bias = torch.randn(1, 2, 4, 5)
    allowed = torch.ones(1, 1, 4, 5, dtype=torch.bool)
    allowed[..., 3:] = False
    out, weights = sa_hf.attention_forward(
        torch.nn.Module(), q, k, v, allowed, position_bias=bias
    )
    scores = q @ k.transpose(-1, -2) / 8**0.5 + bias
    want = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ v
    assert weights is None
    torch.testing.assert_close(out, want.transpose(1, 2), rtol=1e-5, atol=1e-6)


def test_register_is_idempotent():
    from transformers import AttentionInterface

    assert sa_hf.register() == sa_hf.register() == "safeattn"
    assert AttentionInterface._global_mapping["safeattn"] is sa_hf.attention_forward


def test_attention_dropout_is_safeattns_own():
    """transformers' ``dropout`` (attention_dropout in training) reaches safeattn's
    dropout_p: the same bits as safeattn.attention for the same torch.manual_seed."""
    q = torch.randn(1, 4, 40, 16)
    k = v = torch.randn(1, 2, 40, 16)
    torch.manual_seed(3)
    out, _ = sa_hf.attention_forward(torch.nn.Module(), q, k, v, None, dropout=0.2)
    torch.manual_seed(3)
    want = safeattn.attention(q, k, v, causal=True, dropout_p=0.2).transpose(1, 2)
    torch.manual_seed(4)
    other, _ = sa_hf.attention_forward(torch.nn.Module(), q, k, v, None, dropout=0.2)
    assert torch.equal(out, want) and not torch.equal(out, other)
