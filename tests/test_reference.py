"""safeattn.reference against an independent naive float64 computation, and its contract.

The naive oracle here decides the allowed (row, key) pairs with DESIGN.md's rule written out
in plain Python and runs a softmax over the allowed keys only, row by row: no -inf and no
masking tricks, so plain autograd on it is trustworthy. Small shapes: seconds on a CPU.
"""

from __future__ import annotations

import math

import pytest
import torch

from safeattn import reference

F64 = torch.float64


# --------------------------------------------------------------------------- naive oracle


def diagonal_rule(i: int, j: int, nq: int, nk: int, causal, window) -> bool:
    """DESIGN.md: key j is allowed for row i iff i+off-left <= j (left >= 0) and
    j <= i+off+right (right >= 0); causal caps right at 0; off = Nk-Nq for bottom-right."""
    left, right = window if window is not None else (-1, -1)
    if causal:
        right = 0
    off = nk - nq if causal == "bottom_right" else 0
    if left >= 0 and j < i + off - left:
        return False
    return not (right >= 0 and j > i + off + right)


def naive_attention(q, k, v, *, causal=False, window=None, key_mask=None, attn_mask=None,
                    scale=None, softcap=0.0):  # fmt: skip
    """Row-by-row softmax over the allowed keys only, in float64 -> (out, lse). softcap > 0:
    each allowed score s becomes softcap * tanh(s / softcap) before the float mask."""
    bsz, hq, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    scale = 1 / math.sqrt(d) if scale is None else scale
    mask = None if attn_mask is None else attn_mask.expand(bsz, hq, nq, nk)
    rows, lses = [], []
    for b in range(bsz):
        for h in range(hq):
            g = h // (hq // hkv)  # GQA: consecutive query heads share a kv head
            for i in range(nq):
                keys = []
                for j in range(nk):
                    ok = diagonal_rule(i, j, nq, nk, causal, window)
                    ok = ok and (key_mask is None or bool(key_mask[b, j]))
                    if ok and mask is not None:
                        if mask.dtype == torch.bool:
                            ok = bool(mask[b, h, i, j])
                        else:
                            ok = float(mask[b, h, i, j]) != -math.inf
                    if ok:
                        keys.append(j)
                if not keys:
                    # 0 * q keeps the row in the graph: its gradient must come out as 0.
                    rows.append(0 * q[b, h, i].double())
                    lses.append(torch.tensor(-math.inf, dtype=F64))
                    continue
                s = (k[b, g, keys].double() @ q[b, h, i].double()) * scale
                if softcap:
                    s = softcap * torch.tanh(s / softcap)
                if mask is not None and mask.dtype != torch.bool:
                    s = s + mask[b, h, i, keys].double()
                rows.append(torch.softmax(s, dim=0) @ v[b, g, keys].double())
                lses.append(torch.logsumexp(s, dim=0))
    if not rows:  # Nq == 0
        return q.double()[..., :0, :], torch.zeros(bsz, hq, 0, dtype=F64)
    return torch.stack(rows).reshape(bsz, hq, nq, d), torch.stack(lses).reshape(bsz, hq, nq)


# --------------------------------------------------------------------------- helpers


def make_qkv(bsz, hq, hkv, nq, nk, d, dtype=F64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(bsz, hq, nq, d, generator=gen).to(dtype).requires_grad_()
    k = torch.randn(bsz, hkv, nk, d, generator=gen).to(dtype).requires_grad_()
    v = torch.randn(bsz, hkv, nk, d, generator=gen).to(dtype).requires_grad_()
    return q, k, v


def grads(out, inputs, do):
    return torch.autograd.grad(out, inputs, do, allow_unused=True, materialize_grads=True)


def assert_close(got, want, what, atol=1e-10, rtol=1e-9):
    """isclose with a report of where and how much (NaN never equals anything)."""
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    bad = ~torch.isclose(got, want, atol=atol, rtol=rtol)
    if bad.any():
        idx = tuple(bad.nonzero()[0].tolist())
        raise AssertionError(
            f"{what}: {int(bad.sum())} mismatches, first at {idx}: got {got[idx].item()!r}, "
            f"want {want[idx].item()!r}"
        )


def assert_equal(got, want, what):
    if not torch.equal(got, want):
        bad = got != want
        idx = tuple(bad.nonzero()[0].tolist())
        raise AssertionError(
            f"{what}: not bitwise equal, first at {idx}: {got[idx]} vs {want[idx]}"
        )


# --------------------------------------------------------------------------- accuracy


def mask_kwargs(kind: str, bsz: int, hq: int, nq: int, nk: int) -> dict:
    gen = torch.Generator().manual_seed(nq * 100 + nk)
    key_mask = torch.rand(bsz, nk, generator=gen) < 0.6
    key_mask[-1] = False  # the last batch element: every key masked
    bool_mask = torch.rand(nq, nk, generator=gen) < 0.5  # broadcast over (B, Hq)
    float_mask = torch.randn(bsz, 1, nq, nk, generator=gen, dtype=F64)
    float_mask[torch.rand(bsz, 1, nq, nk, generator=gen) < 0.3] = -math.inf
    float_mask[0, 0, nq // 2] = -math.inf  # a whole -inf row
    return {
        "none": {},
        "causal_top_left": {"causal": True},
        "causal_bottom_right": {"causal": "bottom_right"},
        "window_3_1": {"window": (3, 1)},
        "window_causal_bottom_right": {"window": (2, 5), "causal": "bottom_right"},
        "window_right_0": {"window": (-1, 0)},
        "key_mask": {"key_mask": key_mask},
        "bool_attn_mask": {"attn_mask": bool_mask},
        "float_attn_mask": {"attn_mask": float_mask},
        "all_combined": {"causal": True, "window": (4, -1), "key_mask": key_mask,
                         "attn_mask": bool_mask},
        "scale_0.3": {"scale": 0.3, "causal": "top_left"},
        "softcap": {"softcap": 1.5},
        "softcap_masks": {"softcap": 0.7, "causal": True, "key_mask": key_mask,
                          "attn_mask": float_mask},
    }[kind]  # fmt: skip


MASK_KINDS = [
    "none", "causal_top_left", "causal_bottom_right", "window_3_1", "window_causal_bottom_right",
    "window_right_0", "key_mask", "bool_attn_mask", "float_attn_mask", "all_combined", "scale_0.3",
    "softcap", "softcap_masks",
]  # fmt: skip


@pytest.mark.parametrize(("nq", "nk"), [(9, 11), (11, 9), (1, 7)], ids=["9x11", "11x9", "1x7"])
@pytest.mark.parametrize("kind", MASK_KINDS)
def test_matches_naive_fp64(kind, nq, nk):
    kwargs = mask_kwargs(kind, 2, 4, nq, nk)
    q, k, v = make_qkv(2, 4, 2, nq, nk, 5)
    out, lse = reference.attention(q, k, v, return_lse=True, **kwargs)
    want, want_lse = naive_attention(q, k, v, **kwargs)
    assert out.dtype == F64 and lse.dtype == F64 and lse.shape == (2, 4, nq)
    assert_close(out, want, "out")
    assert_close(lse, want_lse, "lse")
    do = torch.randn_like(out)
    for name, got, exp in zip(("dq", "dk", "dv"), grads(out, (q, k, v), do),
                              grads(want, (q, k, v), do), strict=True):  # fmt: skip
        assert_close(got, exp, name)


def test_gradcheck_fp64():
    q, k, v = make_qkv(1, 2, 1, 4, 6, 3)
    key_mask = torch.tensor([[True, False, True, True, False, True]])

    def fn(q, k, v):
        return reference.attention(q, k, v, causal="bottom_right", key_mask=key_mask)

    assert torch.autograd.gradcheck(fn, (q, k, v))


def test_gradcheck_fp64_softcap():
    q, k, v = make_qkv(1, 2, 1, 4, 6, 3)
    bias = torch.randn(4, 6, dtype=F64)
    bias[1, :] = -math.inf  # an empty row under the cap

    def fn(q, k, v):
        return reference.attention(q, k, v, causal="bottom_right", attn_mask=bias, softcap=0.8)

    assert torch.autograd.gradcheck(fn, (q, k, v))


def test_softcap_is_applied_before_the_additive_mask():
    """cap·tanh(s/cap) + bias (FlexAttention's and Gemma 2's order), which differs from both
    the uncapped scores and cap·tanh((s + bias)/cap)."""
    q, k, v = make_qkv(1, 1, 1, 3, 4, 2, seed=11)
    q = (3 * q).detach().requires_grad_()
    bias = torch.tensor([0.0, 1.5, -1.5, 0.0], dtype=F64).expand(3, 4)
    cap = 1.0
    out, lse = reference.attention(q, k, v, attn_mask=bias, softcap=cap, return_lse=True)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(2)
    logits = cap * torch.tanh(s / cap) + bias
    assert_close(out, torch.softmax(logits, -1) @ v, "out")
    assert_close(lse, torch.logsumexp(logits, -1), "lse")
    capped_after = torch.softmax(cap * torch.tanh((s + bias) / cap), -1) @ v
    assert (out - capped_after).abs().max() > 1e-2, "cannot tell the order apart"
    off = reference.attention(q, k, v, attn_mask=bias, softcap=None)
    assert (out - off).abs().max() > 1e-2, "the cap changed nothing"
    assert_equal(reference.attention(q, k, v, attn_mask=bias, softcap=0.0), off, "softcap=0")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_low_precision_close_to_fp64(dtype):
    q, k, v = make_qkv(2, 2, 2, 13, 17, 8, dtype=dtype)
    out, lse = reference.attention(q, k, v, causal=True, return_lse=True)
    want, want_lse = naive_attention(q.double(), k.double(), v.double(), causal=True)
    assert out.dtype == dtype and lse.dtype == torch.float32
    tol = {torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]
    assert_close(out.double(), want, "out", atol=tol, rtol=tol)
    assert_close(lse.double(), want_lse, "lse", atol=tol, rtol=tol)


def test_strided_inputs_match_contiguous():
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 10, 4, 8, generator=gen, dtype=F64).transpose(1, 2)  # (B, H, N, D) view
    k = torch.randn(2, 12, 2, 8, generator=gen, dtype=F64).transpose(1, 2)
    v = torch.randn(2, 12, 2, 8, generator=gen, dtype=F64).transpose(1, 2)
    assert not q.is_contiguous()
    got = reference.attention(q, k, v, causal="bottom_right")
    want = reference.attention(q.contiguous(), k.contiguous(), v.contiguous(),
                               causal="bottom_right")  # fmt: skip
    assert_close(got, want, "out", atol=1e-12, rtol=1e-12)


def test_zero_lengths():
    for nq, nk in [(0, 5), (5, 0), (0, 0)]:
        q, k, v = make_qkv(1, 2, 2, nq, nk, 4)
        out, lse = reference.attention(q, k, v, return_lse=True)
        assert out.shape == (1, 2, nq, 4) and lse.shape == (1, 2, nq)
        assert torch.equal(out, torch.zeros_like(out))
        assert torch.all(lse == -math.inf)


# --------------------------------------------------------------------------- contract


def empty_rows_problem(dtype=F64):
    """Left padding + causal: with pad p, rows i < p see only padding keys -> empty."""
    q, k, v = make_qkv(2, 2, 2, 8, 8, 4, dtype=dtype, seed=5)
    key_mask = torch.ones(2, 8, dtype=torch.bool)
    key_mask[0, :3] = False  # rows 0..2 of batch 0 are empty
    key_mask[1, :] = False  # batch 1: every row empty
    return q, k, v, {"causal": True, "key_mask": key_mask}


@pytest.mark.parametrize("dtype", [F64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("upcast", [True, False])
def test_empty_rows_exact_zero(dtype, upcast):
    q, k, v, kwargs = empty_rows_problem(dtype)
    out, lse = reference.attention(q, k, v, return_lse=True, upcast=upcast, **kwargs)
    empty = torch.zeros(2, 2, 8, dtype=torch.bool)
    empty[0, :, :3] = True
    empty[1] = True
    assert torch.equal(out[empty], torch.zeros_like(out[empty])), "empty rows must be exactly 0"
    assert torch.all(lse[empty] == -math.inf)
    assert torch.isfinite(out[~empty]).all() and torch.isfinite(lse[~empty]).all()

    # Gradients: exact-0 dq rows; changing the upstream gradient of the empty rows (even to
    # huge values) leaves dk and dv bitwise unchanged: their contribution is exactly 0.
    do = torch.randn(out.shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    dq, dk, dv = grads(out, (q, k, v), do)
    assert all(torch.isfinite(g).all() for g in (dq, dk, dv))
    assert torch.equal(dq[empty], torch.zeros_like(dq[empty]))
    do_loud = do.clone()
    do_loud[empty] = 1e4
    out2 = reference.attention(q, k, v, upcast=upcast, **kwargs)
    _, dk2, dv2 = grads(out2, (q, k, v), do_loud)
    assert_equal(dk2, dk, "dk")
    assert_equal(dv2, dv, "dv")


@pytest.mark.parametrize("dtype", [F64, torch.float32, torch.bfloat16])
def test_excluded_nonfinite_is_bitwise_invisible(dtype):
    """NaN/Inf in K and V at positions excluded for every row change nothing, bitwise."""
    q, k, v = make_qkv(2, 4, 2, 7, 10, 6, dtype=dtype, seed=2)
    key_mask = torch.ones(2, 10, dtype=torch.bool)
    key_mask[0, [1, 6]] = False
    key_mask[1, 9] = False
    excluded = ~key_mask[:, None, :, None].expand_as(k)
    poison = torch.tensor([math.nan, math.inf, -math.inf], dtype=dtype)[
        torch.arange(k.numel()).reshape(k.shape) % 3
    ]
    k_bad = torch.where(excluded, poison, k.detach()).requires_grad_()
    v_bad = torch.where(excluded, poison.flip(-1), v.detach()).requires_grad_()
    do = torch.randn(2, 4, 7, 6, generator=torch.Generator().manual_seed(1)).to(dtype)
    for kwargs in ({"key_mask": key_mask}, {"key_mask": key_mask, "causal": "bottom_right"}):
        clean = reference.attention(q, k, v, **kwargs)
        dirty = reference.attention(q, k_bad, v_bad, **kwargs)
        assert_equal(dirty, clean, "out")
        for name, g_dirty, g_clean in zip(("dq", "dk", "dv"), grads(dirty, (q, k_bad, v_bad), do),
                                          grads(clean, (q, k, v), do), strict=True):  # fmt: skip
            assert_equal(g_dirty, g_clean, name)


def test_excluded_per_row_under_causal():
    """A NaN key/value that only later rows attend leaves earlier rows bitwise unchanged."""
    q, k, v = make_qkv(1, 2, 2, 6, 6, 4, seed=4)
    k_bad, v_bad = k.detach().clone(), v.detach().clone()
    k_bad[:, :, 4, 0] = math.nan  # key 4: attended by rows 4, 5 only (causal, top-left)
    v_bad[:, :, 4, 1] = math.inf
    k_bad.requires_grad_()
    v_bad.requires_grad_()
    clean = reference.attention(q, k, v, causal=True)
    dirty = reference.attention(q, k_bad, v_bad, causal=True)
    assert_equal(dirty[:, :, :4], clean[:, :, :4], "out rows 0-3")
    assert not torch.isfinite(dirty[:, :, 4:]).any(dim=-1).any(), "rows 4, 5 must be NaN"
    do = torch.ones_like(clean)
    dq_dirty = grads(dirty, (q,), do)[0]
    dq_clean = grads(clean, (q,), do)[0]
    assert_equal(dq_dirty[:, :, :4], dq_clean[:, :, :4], "dq rows 0-3")


def test_attended_nan_propagates():
    """NaN in an attended position makes that row non-finite, never a number (item 3)."""
    q, k, v = make_qkv(1, 1, 1, 4, 5, 3, seed=6)
    v_bad = v.detach().clone()
    v_bad[0, 0, 2, 1] = math.nan  # every row attends key 2 (no mask)
    v_bad.requires_grad_()
    out, lse = reference.attention(q, k, v_bad, return_lse=True)
    assert torch.isnan(out[..., 1]).all(), "column 1 of every row uses v[2, 1] = NaN"
    assert torch.isfinite(out[..., [0, 2]]).all(), "other columns do not use it"
    assert torch.isfinite(lse).all(), "lse does not depend on v"
    dq, _, dv = grads(out, (q, k, v_bad), torch.ones_like(out))
    assert (~torch.isfinite(dq)).any(dim=-1).all(), "every row's dq must be non-finite"
    assert torch.isfinite(dv).all(), "dv = P^T dO does not depend on v"

    k_bad = k.detach().clone()
    k_bad[0, 0, 3, 0] = math.inf  # attended by row 3 only under causal top-left
    k_bad.requires_grad_()
    out, lse = reference.attention(q, k_bad, v, causal=True, return_lse=True)
    assert torch.isnan(out[0, 0, 3]).all() and torch.isnan(lse[0, 0, 3])
    assert torch.isfinite(out[0, 0, :3]).all() and torch.isfinite(lse[0, 0, :3]).all()
    dq = grads(out, (q,), torch.ones_like(out))[0]
    assert not torch.isfinite(dq[0, 0, 3]).any() and torch.isfinite(dq[0, 0, :3]).all()

    q_bad = q.detach().clone()
    q_bad[0, 0, 1, 2] = math.nan
    out = reference.attention(q_bad, k, v)
    assert torch.isnan(out[0, 0, 1]).all() and torch.isfinite(out[0, 0, [0, 2, 3]]).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_large_logits_no_overflow(dtype):
    """Logits ~ 1e5 (beyond float16's 65504): finite and right with the running max."""
    q, k, v = make_qkv(1, 2, 2, 6, 9, 16, dtype=torch.float32, seed=7)
    q = (q.detach() * 120).to(dtype)
    k = (k.detach() * 120).to(dtype)
    v = v.detach().to(dtype)
    out = reference.attention(q, k, v)
    want, _ = naive_attention(q.double(), k.double(), v.double())
    assert torch.isfinite(out).all()
    assert_close(out.double(), want, "out", atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_large_logits_saturate_under_softcap(dtype):
    """Logits ~ 1e5 with a cap of 20: tanh saturates, the results stay finite and right."""
    q, k, v = make_qkv(1, 2, 2, 6, 9, 16, dtype=torch.float32, seed=7)
    q = (q.detach() * 120).to(dtype)
    k = (k.detach() * 120).to(dtype)
    v = v.detach().to(dtype)
    out, lse = reference.attention(q, k, v, softcap=20.0, return_lse=True)
    want, want_lse = naive_attention(q.double(), k.double(), v.double(), softcap=20.0)
    assert torch.isfinite(out).all() and (lse.abs() < 30).all()
    assert_close(out.double(), want, "out", atol=3e-2, rtol=3e-2)
    assert_close(lse.double(), want_lse, "lse", atol=3e-2, rtol=3e-2)


def test_upcast_false_computes_in_input_dtype():
    """float16 math overflows at q @ k^T ~ 1e5; the float32-upcast path does not."""
    q = torch.full((1, 1, 2, 4), 200.0, dtype=torch.float16)  # q . k = 4 * 200^2 = 1.6e5
    k = torch.full((1, 1, 3, 4), 200.0, dtype=torch.float16)
    v = torch.randn(1, 1, 3, 4).to(torch.float16)
    assert torch.isfinite(reference.attention(q, k, v, upcast=True)).all()
    assert not torch.isfinite(reference.attention(q, k, v, upcast=False)).all()


def test_upcast_false_is_less_accurate_in_bf16():
    q, k, v = make_qkv(2, 2, 2, 32, 32, 16, dtype=torch.bfloat16, seed=8)
    want, _ = naive_attention(q.double(), k.double(), v.double())
    err_up = (reference.attention(q, k, v).double() - want).abs().max()
    err_plain = (reference.attention(q, k, v, upcast=False).double() - want).abs().max()
    assert err_plain > err_up > 0


# --------------------------------------------------------------------------- varlen


def test_varlen_matches_per_sequence_dense():
    gen = torch.Generator().manual_seed(9)
    lengths_q, lengths_k = [3, 0, 5, 2, 0], [4, 2, 0, 6, 0]  # zero-length on either side
    cu_q = torch.tensor([0, *torch.tensor(lengths_q).cumsum(0).tolist()], dtype=torch.int32)
    cu_k = torch.tensor([0, *torch.tensor(lengths_k).cumsum(0).tolist()], dtype=torch.int32)
    q = torch.randn(sum(lengths_q), 4, 6, generator=gen, dtype=F64, requires_grad=True)
    k = torch.randn(sum(lengths_k), 2, 6, generator=gen, dtype=F64, requires_grad=True)
    v = torch.randn(sum(lengths_k), 2, 6, generator=gen, dtype=F64, requires_grad=True)
    kwargs = {"causal": "bottom_right", "window": (2, -1)}
    out, lse = reference.varlen_attention(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k),
                                          return_lse=True, **kwargs)  # fmt: skip
    assert out.shape == q.shape and lse.shape == (4, q.shape[0]) and lse.dtype == F64
    want_rows, want_lse = [], []
    for b in range(len(lengths_q)):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        o, lse_b = naive_attention(q[rows].transpose(0, 1)[None], k[keys].transpose(0, 1)[None],
                                   v[keys].transpose(0, 1)[None], **kwargs)  # fmt: skip
        want_rows.append(o[0].transpose(0, 1))
        want_lse.append(lse_b[0])
    want = torch.cat(want_rows)
    assert_close(out, want, "out")
    assert_close(lse, torch.cat(want_lse, dim=1), "lse")
    # Sequence 3 (index 2) has queries but no keys: exact zeros.
    assert torch.equal(out[3:8], torch.zeros_like(out[3:8]))
    do = torch.randn_like(out)
    for name, got, exp in zip(("dq", "dk", "dv"), grads(out, (q, k, v), do),
                              grads(want, (q, k, v), do), strict=True):  # fmt: skip
        assert_close(got, exp, name)
