"""The adversarial families build, the reference passes the checker, and the checker catches
implementations with the failures the families exist for."""

from __future__ import annotations

import math

import pytest
import torch

import safeattn
from safeattn import contract, families, reference
from safeattn._inputs import allowed_mask, check_attention

NAMES = [
    "leftpad_causal", "all_keys_masked", "neginf_mask_rows", "nan_in_excluded_kv",
    "large_logits", "ragged_tails", "gqa_ragged", "varlen_empty_seqs", "extreme_grad_out",
    "softcap", "trainable_bias", "dropout",
]  # fmt: skip
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def test_family_names_are_stable():
    assert list(families.FAMILIES) == NAMES
    for family in families.FAMILIES.values():
        assert family.description and "\n" not in family.description


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", NAMES)
def test_small_cases_build(name, dtype):
    for seed in range(3):
        case = families.make_case(name, seed, dtype, "cpu", "small")
        assert case.family == name
        for x in (case.q, case.k, case.v):
            assert x.is_leaf and x.requires_grad and x.dtype == dtype
        assert case.do.shape == case.q.shape and case.do.dtype == dtype
        if case.varlen:
            seq_q, seq_k = case.kwargs["max_seqlen_q"], case.kwargs["max_seqlen_k"]
        else:
            seq_q, seq_k = case.q.shape[2], case.k.shape[2]
        assert case.q.shape[-1] <= 32 and max(seq_q, seq_k) <= 48  # fast when interpreted
        assert case.empty_rows.shape == case.q.shape[:-1]
        assert case.unattended_keys.shape == case.k.shape[:-1]
        if name in ("nan_in_excluded_kv", "dropout"):
            assert case.clean is not None
            assert not torch.isfinite(case.k).all() and not torch.isfinite(case.v).all()
            assert all(torch.isfinite(x).all() for x in case.clean)
        else:
            assert all(torch.isfinite(x).all() for x in (case.q, case.k, case.v, case.do))


def test_cases_are_reproducible_and_seeded():
    a = families.make_case("gqa_ragged", 1, torch.float32, "cpu", "small")
    b = families.make_case("gqa_ragged", 1, torch.float32, "cpu", "small")
    c = families.make_case("gqa_ragged", 2, torch.float32, "cpu", "small")
    assert torch.equal(a.q, b.q) and torch.equal(a.do, b.do)
    assert a.q.shape != c.q.shape or not torch.equal(a.q, c.q)


def test_families_contain_what_they_promise():
    assert families.make_case("leftpad_causal", 0, torch.float32, "cpu", "small").empty_rows.any()
    masked = families.make_case("all_keys_masked", 1, torch.float32, "cpu", "small")
    assert masked.empty_rows[1].all()  # batch element seed % B has every key masked
    rows = families.make_case("neginf_mask_rows", 0, torch.float32, "cpu", "small")
    assert rows.kwargs["attn_mask"].dtype == torch.float32 and rows.empty_rows.any()
    varlen = families.make_case("varlen_empty_seqs", 0, torch.float16, "cpu", "small")
    lengths = varlen.kwargs["cu_seqlens_q"].diff()
    assert varlen.varlen and (lengths == 0).any() and varlen.empty_rows.any()
    big = families.make_case("large_logits", 0, torch.float16, "cpu", "small")
    assert (big.q.float() @ big.k.float().transpose(-1, -2)).abs().max() > 65504
    shapes = {families.make_case("ragged_tails", s, torch.float32, "cpu", "small").q.shape[2]
              for s in range(8)}  # fmt: skip
    assert {0, 1} <= shapes
    grad = families.make_case("extreme_grad_out", 0, torch.float16, "cpu", "small")
    assert grad.do.abs().max() > 4000 and grad.empty_rows.any()
    for seed in range(3):
        capped = families.make_case("softcap", seed, torch.float16, "cpu", "small")
        p = check_attention(capped.q, capped.k, capped.v, **capped.kwargs)
        k = capped.k.float().repeat_interleave(p.heads_q // p.heads_kv, dim=1)
        logits = (capped.q.float() @ k.transpose(-1, -2)).abs() * p.scale
        assert 10 <= p.softcap <= 50 and p.heads_q > p.heads_kv and capped.empty_rows.any()
        assert logits.max() > 100 * p.softcap, "no deep saturation"
        assert (logits < p.softcap / 2).float().mean() > 0.2, "few scores left of the knee"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", NAMES)
def test_reference_passes(name, dtype):
    nonfinite, wrong, err = contract.rates(name, reference, dtype, "cpu", trials=2)
    assert (nonfinite, wrong) == (0.0, 0.0)
    assert 0.0 <= err < 0.02


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", NAMES)
def test_safeattn_passes(name, dtype, device, on_gpu):
    """The kernels (interpreted on CPU at size "small", one seed; compiled with --gpu at size
    "gpu", three seeds) meet the contract on every family: this is what the numerics
    benchmark measures. The one test of the families against the kernels (test_kernels had
    a copy making the same calls: ~290 s of CI's interpreter time twice)."""
    size, seeds = ("gpu", range(3)) if on_gpu else ("small", range(1))
    for seed in seeds:
        verdict = contract.check(families.make_case(name, seed, dtype, device, size), safeattn)
        assert not verdict.nonfinite and not verdict.wrong, (seed, verdict)


# --------------------------------------------------------------------------- broken impls


def _scores(q, k, mask, scale):
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    if mask.dtype != torch.bool:
        s = s + mask.float()
    return s, k


def _plain_softmax(q, k, v, mask, scale):
    """Textbook masked softmax: -inf fill, softmax, P @ V -> NaN on every empty row."""
    s, _ = _scores(q, k, mask, scale)
    allowed = mask if mask.dtype == torch.bool else mask != -math.inf
    p = torch.softmax(s.masked_fill(~allowed, -math.inf), dim=-1)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    return (p @ v.float()).to(q.dtype)


def _multiply_by_mask(q, k, v, mask, scale):
    """Exp then multiply by a 0/1 mask (safe denominator): empty rows give 0, but 0 * NaN in
    an excluded score or value is NaN."""
    s, _ = _scores(q, k, mask, scale)
    allowed = (mask if mask.dtype == torch.bool else mask != -math.inf).float()
    e = torch.exp(s - s.amax(dim=-1, keepdim=True).clamp_min(-1e30).detach()) * allowed
    p = e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    return (p @ v.float()).to(q.dtype)


def _finite_fill(q, k, v, mask, scale):
    """Masked with a large finite negative instead of -inf (a common fix): empty rows come
    out as the mean of V, finite but wrong."""
    s, _ = _scores(q, k, mask, scale)
    allowed = mask if mask.dtype == torch.bool else mask != -math.inf
    p = torch.softmax(s.masked_fill(~allowed, -1e9), dim=-1)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    return (p @ v.float()).to(q.dtype)


def _slightly_off(q, k, v, **kwargs):
    """The reference, 10% too large: finite, empty rows still 0, but inaccurate."""
    return reference.attention(q, k, v, **kwargs) * 1.1


PLAIN = contract.mask_adapter("plain_softmax", _plain_softmax)
MULTIPLY = contract.mask_adapter("multiply_by_mask", _multiply_by_mask)
FINITE_FILL = contract.mask_adapter("finite_fill", _finite_fill)


@pytest.mark.parametrize("name", ["leftpad_causal", "all_keys_masked", "neginf_mask_rows",
                                  "varlen_empty_seqs"])  # fmt: skip
def test_plain_softmax_is_nonfinite_on_empty_rows(name):
    verdict = contract.check(families.make_case(name, 0, torch.float32, "cpu", "small"), PLAIN)
    assert verdict.nonfinite and not verdict.wrong, verdict
    assert "non-finite" in verdict.detail


def test_multiply_by_mask_is_caught_by_excluded_poison_only():
    dtype = torch.float16
    poisoned = families.make_case("nan_in_excluded_kv", 0, dtype, "cpu", "small")
    assert contract.check(poisoned, MULTIPLY).nonfinite
    clean = families.make_case("leftpad_causal", 0, dtype, "cpu", "small")
    verdict = contract.check(clean, MULTIPLY)
    assert not verdict.nonfinite and not verdict.wrong, verdict


def test_finite_fill_is_wrong_on_empty_rows():
    case = families.make_case("all_keys_masked", 0, torch.float32, "cpu", "small")
    verdict = contract.check(case, FINITE_FILL)
    assert not verdict.nonfinite and verdict.wrong, verdict
    assert "empty row" in verdict.detail


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_inaccurate_impl_is_wrong(dtype):
    case = families.make_case("gqa_ragged", 0, dtype, "cpu", "small")
    verdict = contract.check(case, _slightly_off)
    assert verdict.wrong and "out error" in verdict.detail, verdict
    assert verdict.max_rel_error > 0.01


def test_ignoring_the_cap_is_wrong():
    """An impl that drops softcap (finite, empty rows exact) misses the softcap family."""

    def uncapped(q, k, v, **kwargs):
        return reference.attention(q, k, v, **{**kwargs, "softcap": 0.0})

    case = families.make_case("softcap", 0, torch.float32, "cpu", "small")
    verdict = contract.check(case, uncapped)
    assert not verdict.nonfinite and verdict.wrong and "error" in verdict.detail, verdict


def test_mask_adapter_hands_the_cap_to_peers_that_take_it_and_refuses_the_others():
    case = families.make_case("softcap", 1, torch.float32, "cpu", "small")
    seen = {}

    def capped_dense(q, k, v, mask, scale, softcap=0.0):
        seen["softcap"] = softcap
        return reference.attention(q, k, v, attn_mask=mask, scale=scale, softcap=softcap)

    verdict = contract.check(case, contract.mask_adapter("capped_dense", capped_dense))
    assert not verdict.nonfinite and not verdict.wrong, verdict
    assert seen["softcap"] == case.kwargs["softcap"]

    def dense(q, k, v, mask, scale):
        return reference.attention(q, k, v, attn_mask=mask, scale=scale)

    with pytest.raises(NotImplementedError, match="takes no softcap"):
        contract.check(case, contract.mask_adapter("dense", dense))


def test_poison_leak_is_wrong_even_when_finite():
    """An impl whose excluded positions change a finite result breaks the bitwise twin rule."""

    def leaky(q, k, v, **kwargs):
        out = reference.attention(q, k, v, **kwargs)
        leak = torch.where(torch.isfinite(k), 0.0, 1e-3).sum()  # depends on excluded values
        return out + leak.to(out.dtype)

    case = families.make_case("nan_in_excluded_kv", 0, torch.float32, "cpu", "small")
    verdict = contract.check(case, leaky)
    assert not verdict.nonfinite and verdict.wrong, verdict
    assert "clean twin" in verdict.detail


def test_mask_adapter_hands_peers_the_exact_mask():
    """A correct dense-mask impl passes, varlen included (padded into a dense call)."""

    def safe_dense(q, k, v, mask, scale):
        return reference.attention(q, k, v, attn_mask=mask, scale=scale)

    impl = contract.mask_adapter("safe_dense", safe_dense)
    for name in ("gqa_ragged", "neginf_mask_rows", "varlen_empty_seqs"):
        verdict = contract.check(families.make_case(name, 1, torch.float32, "cpu", "small"), impl)
        assert not verdict.nonfinite and not verdict.wrong, (name, verdict)

    case = families.make_case("gqa_ragged", 0, torch.float32, "cpu", "small")
    p = check_attention(case.q, case.k, case.v, **case.kwargs)
    seen = {}

    def spy(q, k, v, mask, scale):
        seen["mask"], seen["scale"] = mask, scale
        return reference.attention(q, k, v, attn_mask=mask, scale=scale)

    contract.check(case, contract.mask_adapter("spy", spy))
    assert torch.equal(seen["mask"], allowed_mask(p)) and seen["scale"] == p.scale


def test_rates_counts_trials():
    nonfinite, wrong, _ = contract.rates("leftpad_causal", PLAIN, torch.float32, "cpu", trials=2)
    assert (nonfinite, wrong) == (1.0, 0.0)
    with pytest.raises(ValueError, match="trials"):
        contract.rates("leftpad_causal", reference, torch.float32, "cpu", trials=0)
    with pytest.raises(ValueError, match="HINT"):
        families.make_case("no_such_family", 0, torch.float32, "cpu", "small")


def test_a_bias_without_gradient_is_wrong():
    """An impl that does not train the bias (its dBias is 0) misses trainable_bias; the
    same impl with the gradient passes (the check is of dBias, not of out or dq/dk/dv)."""

    def detached(q, k, v, **kwargs):
        return reference.attention(q, k, v, **{**kwargs, "attn_mask": kwargs["attn_mask"].detach()})

    case = families.make_case("trainable_bias", 0, torch.float32, "cpu", "small")
    assert case.trainable_bias and case.kwargs["attn_mask"].dtype == torch.float32
    verdict = contract.check(case, detached)
    assert not verdict.nonfinite and verdict.wrong and "dbias error" in verdict.detail, verdict
    assert contract.check(case, reference.attention).detail == "ok"


def _no_dropout(q, k, v, **kwargs):
    """The reference with dropout ignored (every pair kept)."""
    return reference.attention(q, k, v, **{**kwargs, "dropout_p": 0.0})


def test_dropout_is_judged_with_the_implementations_own_mask():
    """The dropout family: safeattn.reference passes with its own mask; an impl that ignores
    dropout is caught; a peer that cannot say which pairs it dropped cannot be judged (the
    benchmark records NaN for it)."""
    case = families.make_case("dropout", 0, torch.float32, "cpu", "small")
    assert case.dropout_seed == 0 and 0.1 <= case.kwargs["dropout_p"] <= 0.3
    assert case.empty_rows.any() and case.clean is not None
    assert contract.check(case, reference).detail == "ok"
    ignores = contract.Impl("ignores", _no_dropout, dropout_keep=contract.reference_dropout_keep)
    verdict = contract.check(case, ignores)
    assert not verdict.nonfinite and verdict.wrong and "error" in verdict.detail, verdict
    own = contract.Impl("untold", _no_dropout)
    with pytest.raises(NotImplementedError, match="keep mask"):
        contract.check(case, own)
