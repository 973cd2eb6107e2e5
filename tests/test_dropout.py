"""Attention dropout (issue 16, item 2): Philox in the kernels, seeded from PyTorch's
generator, regenerated in the backward.

Judged exactly against the fp64 reference given the kernels' own keep mask
(``passes.dropout_keep`` for the seed the call drew), statistically (the keep rate), for
reproducibility (same seed: the same bits), and for the safety contract (dropout never
resurrects an excluded key nor makes an empty row non-zero; excluded NaN stays out).
"""

from __future__ import annotations

import math

import pytest
import torch
from test_kernels import assert_contract_accuracy, leaves, pick, rand_qkv

import safeattn
from safeattn import contract, reference
from safeattn.kernels import ops, passes

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
DT_IDS = ["fp16", "bf16", "fp32"]
P = 0.3


def dropout_case(name: str, device, on_gpu):
    """(q, k, v, kwargs) in float32; every case but "plain" has empty rows or excluded keys."""
    b, hq, hkv, nq, nk, d = pick(on_gpu, (2, 2, 2, 70, 80, 16), (2, 8, 8, 700, 1000, 128))
    if name == "gqa":
        hq, hkv = pick(on_gpu, (4, 2), (16, 4))
    q, k, v = rand_qkv(b, hq, hkv, nq, nk, d, torch.float32, device, seed=51)
    kw: dict = {}
    if name == "leftpad_causal":
        keep = torch.ones(b, nk, dtype=torch.bool)
        keep[1, : nk - 3] = False  # left padding: element 1 keeps 3 keys, its top rows empty
        kw.update(causal="bottom_right", key_mask=keep.to(device))
    elif name == "gqa":
        kw.update(causal=True, window=(13, -1))
    elif name == "softcap_bias":
        bias = torch.randn(b, hq, nq, nk, generator=torch.Generator().manual_seed(52))
        bias[..., 4] = -math.inf
        kw.update(softcap=5.0, attn_mask=bias.to(device))
    return q, k, v, kw


def run(fn, q, k, v, do, seed: int, bias=None, **kw):
    """(out, dq, dk, dv[, dbias]) of fn after torch.manual_seed(seed)."""
    q, k, v = leaves(q, k, v)
    if bias is not None:
        (bias,) = leaves(bias)
        kw["attn_mask"] = bias
    torch.manual_seed(seed)
    out = fn(q, k, v, dropout_p=P, **kw)
    out.backward(do)
    grads = (q.grad, k.grad, v.grad) + ((bias.grad,) if bias is not None else ())
    return (out.detach(), *grads)


def kernel_keep(q, k, seed: int) -> torch.Tensor:
    """The mask safeattn's call after torch.manual_seed(seed) uses."""
    return contract.safeattn_dropout_keep(q, k, P, seed)


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("case", ["plain", "leftpad_causal", "gqa", "softcap_bias"])
def test_dropout_matches_reference_with_the_same_mask(case, dtype, device, on_gpu):
    """out, dq, dk, dv (and dBias where the bias trains) against fp64 with the kernels' mask."""
    q, k, v, kw = dropout_case(case, device, on_gpu)
    q, k, v = (t.to(dtype) for t in (q, k, v))
    bias = kw.pop("attn_mask", None)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(device, dtype)
    keep = kernel_keep(q, k, seed=7)
    got = run(safeattn.attention, q, k, v, do, 7, bias, **kw)
    ref_kw = dict(kw, dropout_keep=keep)
    base = run(reference.attention, q, k, v, do, 7, bias, upcast=False, **ref_kw)
    ref = run(reference.attention, q.double(), k.double(), v.double(), do.double(), 7,
              None if bias is None else bias.double(), **ref_kw)  # fmt: skip
    names = ("out", "dq", "dk", "dv", "dbias")
    for name, g, b_, r in zip(names, got, base, ref, strict=False):
        factor = 2 if name == "out" else 3
        if name == "dbias" and dtype == torch.float32:
            factor = 4.5  # test_dbias.DBIAS_FP32_FACTOR: the known fp32 dBias miss
        assert_contract_accuracy(g, r, b_, factor, name)
    dropped = run(
        reference.attention,
        q.double(),
        k.double(),
        v.double(),
        do.double(),
        7,
        None if bias is None else bias.double(),
        **kw,
    )[0]  # a mask of its own
    assert (dropped - got[0].double()).abs().max() > 1e-2, "the mask must matter"


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_keep_rate_and_independence(p, device):
    """The keep mask is Bernoulli(1 - p): the rate within 5 sigma over 2 x 4 x 96 x 160
    pairs, and different (batch, head) slices are not copies of each other."""
    seed = torch.tensor([123456789], dtype=torch.int64, device=device)
    keep = passes.dropout_keep(seed, 2, 4, 96, 160, p)
    n = keep.numel()
    rate = keep.float().mean().item()
    assert abs(rate - (1 - p)) <= 5 * math.sqrt(p * (1 - p) / n), rate
    flat = keep.reshape(8, -1).float()
    agree = (flat[:, None] == flat[None]).float().mean(-1)  # 8 x 8
    off_diag = agree[~torch.eye(8, dtype=torch.bool)]
    expected = p * p + (1 - p) * (1 - p)
    assert (off_diag - expected).abs().max() < 0.05, "slices correlate"
    other = passes.dropout_keep(seed + 1, 2, 4, 96, 160, p)
    assert (other != keep).float().mean() > 0.5 * 2 * p * (1 - p)


def test_same_seed_same_bits_other_seed_other_result(device, on_gpu):
    q, k, v, kw = dropout_case("leftpad_causal", device, on_gpu)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(2)).to(device)
    first = run(safeattn.attention, q, k, v, do, 11, **kw)
    again = run(safeattn.attention, q, k, v, do, 11, **kw)
    other = run(safeattn.attention, q, k, v, do, 12, **kw)
    for name, a, b_, c in zip(("out", "dq", "dk", "dv"), first, again, other, strict=True):
        assert torch.equal(a, b_), f"{name}: same seed, other bits"
        assert not torch.equal(a, c), f"{name}: another seed gave the same result"


def test_dropout_keeps_the_contract(device, on_gpu):
    """Empty rows exactly 0 (out and dq); keys no row may attend get dk = dv = 0; NaN/Inf in
    an excluded key's K and V changes no bit of anything (the same seed both times)."""
    q, k, v, kw = dropout_case("leftpad_causal", device, on_gpu)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(3)).to(device)
    out, dq, dk, dv = run(safeattn.attention, q, k, v, do, 5, **kw)
    p = safeattn._inputs.check_attention(q, k, v, **kw)
    allowed = safeattn._inputs.allowed_mask(p)
    empty = ~allowed.any(-1)
    assert empty.any()
    assert (out[empty] == 0).all() and (dq[empty] == 0).all()
    unattended = ~allowed.any(-2)  # (B, H, Nk), Hq == Hkv here
    assert unattended.any()
    assert (dk[unattended] == 0).all() and (dv[unattended] == 0).all()
    k2, v2 = k.clone(), v.clone()
    k2[unattended] = float("nan")
    v2[unattended] = float("inf")
    poisoned = run(safeattn.attention, q, k2, v2, do, 5, **kw)
    for name, a, b_ in zip(("out", "dq", "dk", "dv"), (out, dq, dk, dv), poisoned, strict=True):
        if name in ("dk", "dv"):
            a, b_ = a[~unattended], b_[~unattended]
        assert torch.equal(a, b_), f"{name}: an excluded key's NaN/Inf leaked"


def test_varlen_dropout_matches_reference(device, on_gpu):
    """Packed sequences (one empty): each sequence's pairs use the top-left corner of its
    (sequence, head) slice of the mask."""
    lengths = pick(on_gpu, [37, 0, 20], [700, 0, 300])
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    total, h, d = cu[-1].item(), 2, 16
    g = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(total, h, d, generator=g).to(device) for _ in range(3))
    do = torch.randn(total, h, d, generator=g).to(device)
    cu = cu.to(device)
    args = (cu, cu, max(lengths), max(lengths))
    kw = {"causal": True}
    torch.manual_seed(4)
    keep = passes.dropout_keep(ops.dropout_seed(q.device), len(lengths), h, *args[2:], P)
    got = run(lambda *a, **k_: safeattn.varlen_attention(*a, *args, **k_), q, k, v, do, 4, **kw)
    ref = run(lambda *a, **k_: _varlen_reference(*a, *args, keep=keep, **k_),
              q.double(), k.double(), v.double(), do.double(), 4, **kw)  # fmt: skip
    for name, a, r in zip(("out", "dq", "dk", "dv"), got, ref, strict=True):
        assert (a.double() - r).abs().max() <= 1e-5 * max(r.abs().max().item(), 1.0), name


def _varlen_reference(q, k, v, cu_q, cu_k, max_q, max_k, *, keep, **kw):
    p = safeattn._inputs.check_varlen(q, k, v, cu_q, cu_k, max_q, max_k, **kw, allow_float64=True)
    return reference.attend_problem(p, True, keep)


def test_sdpa_drop_in_and_compiled_graph_use_the_same_dropout(device, on_gpu):
    """safeattn.scaled_dot_product_attention(dropout_p=) and a torch.compile'd call give the
    eager safeattn.attention's bits for the same torch.manual_seed."""
    q, k, v, _ = dropout_case("plain", device, on_gpu)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(6)).to(device)
    eager = run(safeattn.attention, q, k, v, do, 21)
    sdpa = run(safeattn.scaled_dot_product_attention, q, k, v, do, 21)
    torch._dynamo.reset()
    compiled = run(torch.compile(safeattn.attention, fullgraph=True, backend="aot_eager"),
                   q, k, v, do, 21)  # fmt: skip
    for name, a, b_, c in zip(("out", "dq", "dk", "dv"), eager, sdpa, compiled, strict=True):
        assert torch.equal(a, b_), f"sdpa {name}"
        assert torch.equal(a, c), f"compiled {name}"


@pytest.mark.parametrize("bad", [-0.1, 1.0, float("nan"), "0.1", True])
def test_bad_dropout_p_is_refused(bad):
    q = k = v = torch.zeros(1, 1, 4, 8)
    with pytest.raises((TypeError, ValueError), match="dropout_p"):
        safeattn.attention(q, k, v, dropout_p=bad)
