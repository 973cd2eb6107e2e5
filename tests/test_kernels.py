"""The Triton kernels against the contract of DESIGN.md, item by item.

CPU (default): kernels under the Triton interpreter, small shapes that still cross block
boundaries (the interpreter uses 16/32-row blocks). ``--gpu``: compiled kernels on CUDA at
realistic shapes. Accuracy is judged as the contract says: the kernel's error against an
fp64 reference is at most 2x (output) / 3x (gradients) PyTorch's own same-dtype error,
plus one unit of rounding at the output's scale.
"""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys

import pytest
import torch
import triton
import triton.language as tl

import safeattn
from safeattn import reference
from safeattn.kernels import configs, forward, hopper, launch, passes

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
DT_IDS = ["fp16", "bf16", "fp32"]
TEST_META = launch.Meta(
    varlen=False, batch=1, heads_q=1, heads_kv=1, seq_q=64, seq_k=64, head_dim=32,
    bottom_right=False, window_left=-1, window_right=-1, has_key_mask=False, mask_kind=0,
    scale=1.0, deterministic=False,
)  # fmt: skip


def test_side_stream_switch(monkeypatch):
    """dQ runs on a side stream on CUDA unless SAFEATTN_BWD_OVERLAP says otherwise (2: dK/dV
    on a high-priority one; 0: one after the other); never on the CPU or under the
    interpreter (which has no streams to overlap); anything else is refused by name."""
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(launch, "INTERPRET", False)
    monkeypatch.delenv(passes.OVERLAP_ENV, raising=False)
    assert passes._overlap(cuda) == "1"
    assert passes._overlap(torch.device("cpu")) == "0"
    for setting in ("0", "1", "2"):
        monkeypatch.setenv(passes.OVERLAP_ENV, setting)
        assert passes._overlap(cuda) == setting
    monkeypatch.setenv(passes.OVERLAP_ENV, "yes")
    with pytest.raises(ValueError, match="SAFEATTN_BWD_OVERLAP"):
        passes._overlap(cuda)
    monkeypatch.setenv(passes.OVERLAP_ENV, "1")
    monkeypatch.setattr(launch, "INTERPRET", True)
    assert passes._overlap(cuda) == "0"


@pytest.mark.gpu
@pytest.mark.parametrize("stream", ["default", "caller"])
def test_side_stream_dq_gives_the_serial_gradients(stream, device, monkeypatch):
    """dQ beside dK/dV on a side stream (SAFEATTN_BWD_OVERLAP=1, or dK/dV on a high-priority one: 2)
    gives bit for bit the gradients of the two kernels one after the other (=0): the same kernels
    and configs, run at the same time. A causal GQA call with left padding and NaN in the excluded
    keys takes the guarded second launches on both streams; ``caller``: the call runs on a stream of
    its own, which the side stream must wait for and join."""
    b, hq, hkv, n, d = 2, 8, 2, 1000, 128
    q, k, v = rand_qkv(b, hq, hkv, n, n, d, torch.bfloat16, device, seed=16)
    do = torch.randn(q.shape, device=device).to(q.dtype)
    key_mask = torch.ones(b, n, dtype=torch.bool, device=device)
    key_mask[0, :300] = False  # left padding: rows 0..299 of batch 0 attend nothing
    k[0, :, :300] = float("nan")
    v[0, :, :300] = float("nan")
    kw = dict(causal=True, key_mask=key_mask)
    runs = {}
    for setting in ("0", "1", "2"):
        monkeypatch.setenv(passes.OVERLAP_ENV, setting)
        caller = torch.cuda.Stream() if stream == "caller" else torch.cuda.current_stream()
        caller.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(caller):
            runs[setting] = fwd_bwd(safeattn.attention, q, k, v, do, **kw)
        torch.cuda.current_stream().wait_stream(caller)
    torch.cuda.synchronize()
    for setting in ("1", "2"):
        for name, serial, overlap in zip(("out", "lse", "dq", "dk", "dv"), runs["0"],
                                         runs[setting], strict=True):  # fmt: skip
            assert serial is None or torch.equal(serial, overlap), (setting, name)
        assert torch.isfinite(runs[setting][2]).all(), "dq leaked the excluded NaN keys"


@pytest.mark.parametrize("causal", [False, True], ids=["dense", "causal"])
@pytest.mark.parametrize("hq,hkv", [(4, 4), (4, 2)], ids=["mha", "gqa"])
def test_no_tail_builds_give_the_general_results(hq, hkv, causal, device, on_gpu, monkeypatch):
    """A call whose lengths are multiples of every tile takes the backward kernels' NO_TAIL
    builds (no trailing masked loop: dK/dV's always, dQ's when not causal): they give bit
    for bit what the general builds (that loop compiled, empty here) give, and agree with
    the reference."""
    n = pick(on_gpu, 64, 1024)
    meta = dataclasses.replace(TEST_META, seq_q=n, seq_k=n, window_right=0 if causal else -1)
    edge = configs.largest_block(not on_gpu)
    assert meta.no_tail(edge, "bwd_dkdv") and meta.no_tail(edge, "bwd_dq") != causal
    q, k, v = rand_qkv(2, hq, hkv, n, n, pick(on_gpu, 32, 128), torch.bfloat16, device, seed=3)
    do = torch.randn(q.shape, device=device).to(q.dtype)
    monkeypatch.setenv("SAFEATTN_AUTOTUNE", "0")  # both builds with the same configs,
    for memo in ("_CHOSEN", "_SOURCES"):  # chosen apart from (and forgotten after) the others
        monkeypatch.setattr(launch, memo, {})
    no_tail = fwd_bwd(safeattn.attention, q, k, v, do, causal=causal, return_lse=True)
    check_against_reference(q, k, v, causal=causal)
    monkeypatch.setattr(configs, "largest_block", lambda interpreted: 2 * n)  # partial tiles
    launch.clear_choices()
    general = fwd_bwd(safeattn.attention, q, k, v, do, causal=causal, return_lse=True)
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), no_tail, general, strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("case", ["padded_gqa", "dropout"])
def test_split_dkdv_gives_the_joint_results(case, device, on_gpu, monkeypatch):
    """The dK/dV kernel as two launches (``hopper.split_dkdv``: dV alone, then dK alone, each
    with its own guarded redo) gives what the one launch gives: bit for bit under the
    interpreter (the same tiles), and against the reference on a GPU, where at D=256 the
    split is the Hopper path's own and the halves take their own tiles. ``padded_gqa``: causal
    GQA with left padding and NaN in the excluded keys (empty rows: both redos run)."""
    n, d = pick(on_gpu, 48, 512), pick(on_gpu, 32, 256)
    q, k, v = rand_qkv(2, 4, 2 if case == "padded_gqa" else 4, n, n, d, torch.bfloat16, device,
                       seed=5)  # fmt: skip
    do = torch.randn(q.shape, device=device).to(q.dtype)
    kw: dict = dict(causal=True)
    if case == "padded_gqa":
        key_mask = torch.ones(2, n, dtype=torch.bool, device=device)
        key_mask[0, : n // 3] = False
        k[0, :, : n // 3] = float("nan")
        v[0, :, : n // 3] = float("nan")
        kw["key_mask"] = key_mask
    else:
        kw["dropout_p"] = 0.25
    monkeypatch.setenv("SAFEATTN_AUTOTUNE", "0")
    launched, real_launch = [], launch._launch

    def spy(name, *args):
        launched.append(name)
        return real_launch(name, *args)

    monkeypatch.setattr(launch, "_launch", spy)
    runs = {}
    for split in (False, True):
        monkeypatch.setattr(hopper, "split_dkdv", lambda tma, block_d, on=split: on)
        launch.clear_choices()
        launched.clear()
        torch.manual_seed(7)  # dropout's seed
        runs[split] = fwd_bwd(safeattn.attention, q, k, v, do, **kw)
        dkdv = [name for name in launched if name.startswith("bwd_d") and name != "bwd_dq"]
        assert dkdv == (["bwd_dv", "bwd_dk"] if split else ["bwd_dkdv"])
    for name, joint, split in zip(("out", "lse", "dq", "dk", "dv"), runs[False], runs[True],
                                  strict=True):  # fmt: skip
        if joint is None:
            continue
        assert torch.isfinite(split).all(), f"{name}: the excluded NaN keys leaked"
        if on_gpu:  # other tiles, other summation order
            torch.testing.assert_close(split, joint, atol=2e-2, rtol=2e-2, msg=name)
        else:
            assert torch.equal(split, joint), name
    if case == "padded_gqa":
        k[0, :, : n // 3] = 0.0  # the reference's mask does not shield NaN from 0 * NaN
        v[0, :, : n // 3] = 0.0
        check_against_reference(q, k, v, **kw)


def test_no_tail_needs_whole_tiles_no_mask_and_no_window_on_its_side():
    """``Meta.no_tail``: lengths multiples of the largest tile, no mask, block mask or
    varlen, and no window on the kernel's trailing side (dK/dV: left, dQ: right, which
    causal is); the largest tile is that of the configs that can run."""
    edge = configs.largest_block(False)
    assert edge >= max(c.block_n for c in configs.candidates("bwd_dkdv", 128, torch.bfloat16))
    assert configs.largest_block(True) == max(
        max(configs.interpreter_config(k).block_m, configs.interpreter_config(k).block_n)
        for k in configs.KERNELS
    )
    dense = dataclasses.replace(TEST_META, seq_q=2 * edge, seq_k=edge)
    both = ("bwd_dkdv", "bwd_dq")
    cases = [(dict(), both), (dict(window_right=0), ("bwd_dkdv",)),
             (dict(window_left=5), ("bwd_dq",)), (dict(window_left=5, window_right=0), ())]
    cases += [(change, ()) for change in (
        dict(seq_q=2 * edge + 16), dict(seq_k=edge - 16), dict(has_key_mask=True),
        dict(mask_kind=2), dict(varlen=True), dict(sparse_q=128, sparse_k=128))]  # fmt: skip
    for change, takes in cases:
        meta = dataclasses.replace(dense, **change)
        assert {k for k in both if meta.no_tail(edge, k)} == set(takes), change


def pick(on_gpu: bool, cpu, gpu):
    return gpu if on_gpu else cpu


def leaves(*tensors):
    return [t.detach().clone().requires_grad_(True) for t in tensors]


def rand_qkv(b, hq, hkv, nq, nk, d, dtype, device, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, nq, d, generator=g) * scale
    k = torch.randn(b, hkv, nk, d, generator=g) * scale
    v = torch.randn(b, hkv, nk, d, generator=g)
    return [t.to(device=device, dtype=dtype) for t in (q, k, v)]


def fwd_bwd(fn, q, k, v, do, **kw):
    """Run fn forward + backward on fresh leaves; returns (out, lse or None, dq, dk, dv)."""
    q, k, v = leaves(q, k, v)
    res = fn(q, k, v, **kw)
    out, lse = res if isinstance(res, tuple) else (res, None)
    out.backward(do)
    return out.detach(), lse, q.grad, k.grad, v.grad


def where_max(err: torch.Tensor) -> str:
    idx = torch.nonzero(err == err.max())[0].tolist()
    return f"max at index {idx}"


def assert_contract_accuracy(got, ref64, base, factor: float, what: str):
    """got/base: same-dtype results of safeattn and of plain PyTorch; ref64: fp64 truth."""
    assert got.shape == ref64.shape, f"{what}: shape {tuple(got.shape)} != {tuple(ref64.shape)}"
    assert torch.isfinite(got).all(), f"{what}: {(~torch.isfinite(got)).sum().item()} non-finite"
    err = (got.double() - ref64).abs()
    base_err = (base.double() - ref64).abs().max().item()
    eps = torch.finfo(got.dtype).eps * max(ref64.abs().max().item(), 1e-6)
    bound = factor * base_err + eps
    assert err.max().item() <= bound, (
        f"{what}: max error {err.max().item():.3e} > {factor}x PyTorch's {base_err:.3e} + "
        f"{eps:.1e} ({where_max(err)})"
    )


def check_against_reference(q, k, v, **kw):
    """Full accuracy check of out/lse/dq/dk/dv for one problem."""
    torch.manual_seed(1)
    do = torch.randn((*q.shape[:-1], v.shape[-1]), device=q.device).to(q.dtype)
    got = fwd_bwd(safeattn.attention, q, k, v, do, return_lse=True, **kw)
    base = fwd_bwd(reference.attention, q, k, v, do, upcast=False, return_lse=True, **kw)
    ref = fwd_bwd(
        reference.attention, q.double(), k.double(), v.double(), do.double(), return_lse=True,
        **{n: (m.double() if isinstance(m, torch.Tensor) and m.is_floating_point() else m)
           for n, m in kw.items()},
    )  # fmt: skip
    for name, g, b, r, factor in zip(
        ("out", "lse", "dq", "dk", "dv"), got, base, ref, (2, 2, 3, 3, 3), strict=True
    ):
        if name == "lse":
            finite = torch.isfinite(r)
            assert torch.equal(torch.isfinite(g), finite), "lse: -inf pattern differs"
            assert (g[~finite] == r[~finite].float()).all(), "lse: non-finite rows differ"
            g, b, r = g[finite], b[finite].float(), r[finite]
        assert_contract_accuracy(g, r, b, factor, name)


# --------------------------------------------------------------------------- accuracy


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize(
    "causal,window",
    [(False, None), (True, None), ("bottom_right", None), (False, (7, 5)), (True, (9, -1))],
    ids=["full", "causal", "bottom_right", "window", "causal_window"],
)
def test_features_match_reference(dtype, causal, window, device, on_gpu):
    b, hq, hkv, nq, nk, d = pick(on_gpu, (2, 2, 1, 45, 37, 24), (2, 8, 2, 1000, 777, 128))
    q, k, v = rand_qkv(b, hq, hkv, nq, nk, d, dtype, device)
    check_against_reference(q, k, v, causal=causal, window=window)


@pytest.mark.parametrize("scale", [0.3, -0.3, 0.0], ids=["positive", "negative", "zero"])
def test_any_scale_matches_reference(scale, device, on_gpu):
    """The forward folds a positive scale into its exponent (forward._fwd_step, FOLD_SCALE):
    the row maximum of unscaled scores times the scale is the maximum of the scaled ones
    only for a positive scale. A negative or zero scale takes the unfolded path; all three,
    with causal masking and a key mask (empty rows included), match the reference. The
    logits span well over 128 (log2 units), so a maximum taken on the wrong side would
    overflow exp2 and the check would fail."""
    b, h, nq, nk, d = pick(on_gpu, (2, 2, 33, 40, 16), (2, 4, 513, 700, 64))
    q, k, v = rand_qkv(b, h, h, nq, nk, d, torch.float16, device, seed=5, scale=5.0)
    km = torch.rand(b, nk, generator=torch.Generator().manual_seed(6)) > 0.3
    km[-1, :] = False  # a batch element whose every row is empty
    check_against_reference(q, k, v, causal=True, key_mask=km.to(device), scale=scale)


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("mask", ["key_mask", "bool_mask", "float_mask"])
def test_masks_match_reference(dtype, mask, device, on_gpu):
    b, h, nq, nk, d = pick(on_gpu, (2, 2, 33, 40, 16), (2, 4, 513, 700, 64))
    q, k, v = rand_qkv(b, h, h, nq, nk, d, dtype, device, seed=3)
    g = torch.Generator().manual_seed(4)
    kw: dict = {}
    if mask == "key_mask":
        km = torch.rand(b, nk, generator=g) > 0.3
        km[-1] = False  # a batch element with every key masked
        kw["key_mask"] = km.to(device)
    elif mask == "bool_mask":
        kw["attn_mask"] = (torch.rand(b, 1, nq, nk, generator=g) > 0.4).to(device)
    else:
        am = torch.randn(1, h, nq, nk, generator=g)
        am[0, 0, 2] = -math.inf  # a row excluded by the additive mask
        kw["attn_mask"] = am.to(device, dtype)
    check_against_reference(q, k, v, causal=mask == "bool_mask", **kw)


@pytest.mark.parametrize("hq,hkv", [(4, 4), (4, 2), (4, 1)], ids=["mha", "gqa", "mqa"])
def test_gqa_and_transposed_strides(hq, hkv, device, on_gpu):
    b, nq, nk, d = pick(on_gpu, (2, 35, 29, 32), (2, 1025, 999, 64))
    q, k, v = rand_qkv(b, hq, hkv, nq, nk, d, torch.float16, device, seed=5)
    # (B, N, H, D) storage seen as (B, H, N, D): the layout most models hold.
    q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    assert not q.is_contiguous()
    check_against_reference(q, k, v, causal=True)


@pytest.mark.parametrize("kw", [{"causal": True}, {"softcap": 3.0}], ids=["causal", "softcap"])
def test_fp32_gqa_dkdv_is_the_multi_head_one_summed_over_the_group(kw, device, on_gpu):
    """fp32 GQA sums the group in PyTorch's order (passes._per_query_head): dK and dV are
    bit for bit the gradients of K and V repeated over the group, summed over it afterwards.
    The in-kernel sum (one running chain over the group's queries) rounds differently."""
    b, hq, hkv, nq, nk, d = pick(on_gpu, (2, 4, 2, 37, 29, 16), (2, 8, 2, 700, 1000, 128))
    q, k, v = rand_qkv(b, hq, hkv, nq, nk, d, torch.float32, device, seed=33, scale=1.5)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(34)).to(device)
    gqa = fwd_bwd(safeattn.attention, q, k, v, do, **kw)
    group = hq // hkv
    rep = [t.repeat_interleave(group, dim=1) for t in (k, v)]
    mha = fwd_bwd(safeattn.attention, q, *rep, do, **kw)
    assert torch.equal(gqa[0], mha[0])
    for name, g, m in (("dk", gqa[3], mha[3]), ("dv", gqa[4], mha[4])):
        assert torch.equal(g, m.unflatten(1, (hkv, group)).sum(2)), name


@pytest.mark.parametrize("d", [1, 7, 59, 111, 256] if os.environ.get("CI") else [1, 7, 59, 256])
def test_head_dims(d, device, on_gpu):
    nq, nk = pick(on_gpu, (19, 23), (300, 333))
    q, k, v = rand_qkv(1, 2, 1, nq, nk, d, torch.bfloat16, device, seed=d)
    check_against_reference(q, k, v, causal="bottom_right")


def test_float32_is_ieee_not_tf32(device, on_gpu):
    """tf32 products (10-bit mantissa) would be ~1e-3 off; IEEE fp32 stays near 1e-6."""
    b, h, n, d = pick(on_gpu, (1, 2, 40, 32), (2, 4, 1024, 128))
    q, k, v = rand_qkv(b, h, h, n, n, d, torch.float32, device, seed=8)
    out = safeattn.attention(q, k, v)
    ref = reference.attention(q.double(), k.double(), v.double())
    rel = ((out.double() - ref).norm() / ref.norm()).item()
    assert rel < 1e-5, f"fp32 relative error {rel:.2e}: looks like tf32"


@pytest.mark.parametrize("softcap", [0.0, 1.5], ids=["plain", "softcap"])
def test_varlen_matches_per_sequence_reference(softcap, device, on_gpu):
    lens_q = pick(on_gpu, [5, 0, 33, 1], [1000, 0, 333, 1, 2048])
    lens_k = pick(on_gpu, [7, 3, 0, 20], [1000, 17, 0, 5, 2048])
    h, hkv, d = pick(on_gpu, (2, 1, 16), (8, 2, 128))
    g = torch.Generator().manual_seed(9)
    q = torch.randn(sum(lens_q), h, d, generator=g).to(device, torch.float16)
    k = torch.randn(sum(lens_k), hkv, d, generator=g).to(device, torch.float16)
    v = torch.randn(sum(lens_k), hkv, d, generator=g).to(device, torch.float16)
    cu_q = torch.tensor([0, *torch.tensor(lens_q).cumsum(0).tolist()], dtype=torch.int32)
    cu_k = torch.tensor([0, *torch.tensor(lens_k).cumsum(0).tolist()], dtype=torch.int32)
    args = (cu_q.to(device), cu_k.to(device), max(lens_q), max(lens_k))
    do = torch.randn(q.shape, generator=g).to(device, q.dtype)
    kw = dict(causal="bottom_right", return_lse=True, softcap=softcap)
    got = fwd_bwd(lambda a, b_, c, **x: safeattn.varlen_attention(a, b_, c, *args, **x), q, k, v,
                  do, **kw)  # fmt: skip
    ref = fwd_bwd(
        lambda a, b_, c, **x: reference.varlen_attention(a, b_, c, *args, **x),
        q.double(), k.double(), v.double(), do.double(), **kw,
    )  # fmt: skip
    base = fwd_bwd(
        lambda a, b_, c, **x: reference.varlen_attention(a, b_, c, *args, upcast=False, **x),
        q, k, v, do, **kw,
    )  # fmt: skip
    for name, gt, b_, r, f in zip(("out", "lse", "dq", "dk", "dv"), got, base, ref, (2, 2, 3, 3, 3),
                                  strict=True):  # fmt: skip
        if name == "lse":
            fin = torch.isfinite(r)
            assert torch.equal(torch.isfinite(gt), fin)
            gt, b_, r = gt[fin], b_[fin].float(), r[fin]
        assert_contract_accuracy(gt, r, b_, f, f"varlen {name}")


def test_sdpa_drop_in_matches_torch(device, on_gpu):
    b, h, n, d = pick(on_gpu, (2, 2, 24, 16), (4, 8, 512, 64))
    q, k, v = rand_qkv(b, h, h, n, n, d, torch.float32, device, seed=11)
    mask = torch.rand(b, 1, n, n, device=device) > 0.2
    mask[..., 0] = True  # SDPA itself gives NaN on fully masked rows: keep none here
    for kw in (dict(is_causal=True), dict(attn_mask=mask), dict(scale=0.3)):
        ours = safeattn.scaled_dot_product_attention(q, k, v, **kw)
        theirs = torch.nn.functional.scaled_dot_product_attention(
            q.double(), k.double(), v.double(), **kw
        )
        assert torch.allclose(ours.double(), theirs, atol=1e-5, rtol=1e-5), kw
    three_d = safeattn.scaled_dot_product_attention(q[:, 0], k[:, 0], v[:, 0], is_causal=True)
    assert three_d.shape == q[:, 0].shape


# --------------------------------------------------------------------------- contract 1


def empty_row_cases(device, on_gpu):
    b, h, n, d = pick(on_gpu, (3, 2, 37, 16), (4, 8, 777, 64))
    pad = torch.tensor([0, 5, n])[:b] if not on_gpu else torch.tensor([0, 5, 300, n])
    key_mask = (torch.arange(n)[None, :] >= pad[:, None]).to(device)  # left padding
    return b, h, n, d, [
        ("leftpad_causal", dict(causal=True, key_mask=key_mask)),
        ("bottom_right_nq_gt_nk", dict(causal="bottom_right")),
        ("window_gap", dict(window=(0, 0), key_mask=key_mask)),
    ]  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_empty_rows_are_exact_zeros(dtype, device, on_gpu):
    check_empty_rows(dtype, device, on_gpu)


def test_empty_rows_with_several_blocks_per_redo_program(device, on_gpu, monkeypatch):
    """The empty-row contract with every guarded second launch's programs walking several
    blocks each (forward.redo_grid; REDO_PROGRAMS = 1 gives the longest spans): the dK/dV
    redo, which empty rows flag, maps each flagged launch position back to its work. 40 of 80
    keys padded, causal: the empty rows' poison reaches the first two key blocks, so a redo
    program's second flag is not its first."""
    if on_gpu:
        pytest.skip("a compiled kernel refuses a global changed since it compiled")
    monkeypatch.setattr(forward, "REDO_PROGRAMS", tl.constexpr(1))
    key_mask = (torch.arange(80) >= 40)[None, :].to(device)
    cases = (1, 2, 80, 16, [("leftpad_causal", dict(causal=True, key_mask=key_mask))])
    check_empty_rows(torch.float16, device, on_gpu, cases=cases)


def check_empty_rows(dtype, device, on_gpu, cases=None, **extra):
    """Contract item 1 on the cases of empty_row_cases (or ``cases``, as it returns them), with
    ``extra`` arguments (softcap)."""
    b, h, n, d, cases = cases or empty_row_cases(device, on_gpu)
    for name, kw in cases:
        kw = {**kw, **extra}
        nk = n // 2 if name == "bottom_right_nq_gt_nk" else n
        q, k, v = rand_qkv(b, h, h, n, nk, d, dtype, device, seed=12)
        if "key_mask" in kw and nk != n:
            continue
        p = safeattn._inputs.check_attention(q, k, v, **kw)
        empty = ~safeattn._inputs.allowed_mask(p).any(-1)  # (B, H, Nq)
        assert empty.any(), f"{name}: the case has no empty row"
        do = torch.randn(q.shape, device=device).to(dtype)
        out, lse, dq, dk, dv = fwd_bwd(safeattn.attention, q, k, v, do, return_lse=True, **kw)
        assert (out[empty] == 0).all(), f"{name}: empty rows not exactly 0"
        assert (lse[empty] == -math.inf).all(), f"{name}: lse of empty rows is not -inf"
        assert (dq[empty] == 0).all(), f"{name}: dq of empty rows not exactly 0"
        assert torch.isfinite(out).all() and torch.isfinite(dk).all() and torch.isfinite(dv).all()
        # "adds exactly 0 to dK and dV": poison the empty rows' q and dO; nothing may move.
        q2, do2 = q.clone(), do.clone()
        q2[empty] = float("nan")
        do2[empty] = float("inf")
        out2, _, dq2, dk2, dv2 = fwd_bwd(safeattn.attention, q2, k, v, do2, return_lse=True, **kw)
        assert torch.equal(out2[~empty], out[~empty]), f"{name}: live rows moved"
        assert (out2[empty] == 0).all() and (dq2[empty] == 0).all()
        assert torch.equal(dk2, dk), f"{name}: empty rows contribute to dK"
        assert torch.equal(dv2, dv), f"{name}: empty rows contribute to dV"


# --------------------------------------------------------------------------- contract 2, 3


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_excluded_keys_values_never_leak(dtype, device, on_gpu):
    check_excluded_never_leak(dtype, device, on_gpu)


def check_excluded_never_leak(dtype, device, on_gpu, **extra):
    """Contract item 2 per mask kind, with ``extra`` arguments (softcap)."""
    # One clean run per mask kind, then one poisoned run per poison value (NaN, +Inf, -Inf):
    # each poison is checked on its own, without recomputing the clean reference.
    b, h, nq, nk, d = pick(on_gpu, (2, 2, 30, 41, 16), (2, 8, 600, 1000, 128))
    q, k, v = rand_qkv(b, h, h, nq, nk, d, dtype, device, seed=13)
    key_mask = torch.rand(b, nk, generator=torch.Generator().manual_seed(1)) > 0.25
    key_mask = key_mask.to(device)
    float_mask = torch.zeros(b, 1, 1, nk, device=device, dtype=dtype)
    float_mask[..., -3:] = -math.inf
    do = torch.randn(b, h, nq, d, device=device).to(dtype)
    for kw, excluded in (
        (dict(key_mask=key_mask), ~key_mask),
        (dict(attn_mask=float_mask), float_mask[:, 0, 0] == -math.inf),
        (dict(attn_mask=float_mask > -1), float_mask[:, 0, 0] == -math.inf),
    ):
        kw = {**kw, **extra}
        clean = fwd_bwd(safeattn.attention, q, k, v, do, causal="bottom_right", **kw)
        for poison in (float("nan"), float("inf"), -float("inf")):
            kp, vp = k.clone(), v.clone()
            kp.transpose(1, 2)[excluded] = poison
            vp.transpose(1, 2)[excluded] = poison
            dirty = fwd_bwd(safeattn.attention, q, kp, vp, do, causal="bottom_right", **kw)
            for name, c, x in zip(("out", "lse", "dq", "dk", "dv"), clean, dirty, strict=True):
                if c is None:
                    continue
                mask_kind = next(iter(kw))
                assert torch.equal(c, x), (
                    f"{name} changed when excluded K/V held {poison} ({mask_kind})"
                )


def test_per_pair_exclusion_under_causal(device, on_gpu):
    """A key that row j attends but rows i < j exclude: poisoning it makes rows >= j
    non-finite (contract 3) and leaves rows < j bitwise unchanged (contract 2)."""
    b, h, n, d = pick(on_gpu, (1, 2, 40, 16), (2, 4, 1000, 64))
    j = pick(on_gpu, 21, 700)
    q, k, v = rand_qkv(b, h, h, n, n, d, torch.float16, device, seed=14)
    do = torch.randn(q.shape, device=device).to(q.dtype)
    clean = fwd_bwd(safeattn.attention, q, k, v, do, causal=True)
    for poison_k in (True, False):
        kp, vp = k.clone(), v.clone()
        (kp if poison_k else vp)[:, :, j] = float("nan")
        out, _, dq, _, _ = fwd_bwd(safeattn.attention, q, kp, vp, do, causal=True)
        assert torch.equal(out[:, :, :j], clean[0][:, :, :j]), "rows before j changed"
        assert torch.equal(dq[:, :, :j], clean[2][:, :, :j]), "dq rows before j changed"
        assert torch.isnan(out[:, :, j:]).all(), "rows attending the NaN key stayed finite"


@pytest.mark.parametrize("span", ["default", "several"])
def test_the_guarded_second_launches_keep_excluded_values_out(span, device, on_gpu, monkeypatch):
    """The forward, dK/dV and dQ kernels flag the programs whose results came out non-finite
    and a second launch (GUARD=True) redoes only those: with finite inputs nothing is flagged;
    with NaN in keys every row excludes, the flagged programs' redo is what keeps the
    outputs finite (without the second launches they are NaN). ``several``: the forward's
    redo programs walk several query blocks each (forward.redo_grid): on a GPU a grid of more
    than REDO_PROGRAMS programs, under the interpreter REDO_PROGRAMS = 1 (patched; a compiled
    kernel would refuse a global changed since it compiled)."""
    b, h, n, d = pick(on_gpu, (1, 2, 40, 16), (2, 4, 1000, 64))
    if span == "several" and on_gpu:
        b, h, n = 4, 16, 1024  # 8-16 query blocks x 64 pairs: spans of 2-4 blocks
    elif span == "several":
        monkeypatch.setattr(forward, "REDO_PROGRAMS", tl.constexpr(1))
    q, k, v = rand_qkv(b, h, h, n, n, d, torch.float16, device, seed=15)
    key_mask = torch.ones(b, n, dtype=torch.bool, device=device)
    key_mask[:, -3:] = False
    redo = launch.launch_guarded_redo
    flags: dict[str, list[int]] = {}

    at = {"forward": 13, "bwd_dkdv": 8, "bwd_dq": 7}  # Leaked's place in the arguments

    def spy(name, fn, grid, args, *rest):
        # The redo gets the first launch's arguments, built once (launch.per_config).
        assert callable(args) and args(rest[-2]) is args(rest[-2]), name
        leaked = args(rest[-2])[at[name]]
        assert leaked.dtype == torch.int32 and leaked.dim() == 1, name
        redo(name, fn, grid, args, *rest)
        flags[name] = leaked[: grid[0] * grid[1]].tolist()

    monkeypatch.setattr(launch, "launch_guarded_redo", spy)
    clean = fwd_bwd(safeattn.attention, q, k, v, torch.ones_like(q), key_mask=key_mask)
    assert set(flags) == {"forward", "bwd_dkdv", "bwd_dq"}
    assert not any(v for name in flags for v in flags[name]), flags
    kp, vp = k.clone(), v.clone()
    kp[:, :, -3:] = float("nan")  # excluded for every row: NaN V leaks into the forward's
    vp[:, :, -3:] = float("nan")  # accumulator, NaN K into dQ, unless guarded
    dirty = fwd_bwd(safeattn.attention, q, kp, vp, torch.ones_like(q), key_mask=key_mask)
    assert any(flags["forward"]) and any(flags["bwd_dq"]), "no program was flagged"
    for name, c, x in zip(("out", "lse", "dq", "dk", "dv"), clean, dirty, strict=True):
        assert c is None or torch.equal(c, x), name
    monkeypatch.setattr(launch, "launch_guarded_redo", lambda *a, **kw: None)
    unguarded = fwd_bwd(safeattn.attention, q, kp, vp, torch.ones_like(q), key_mask=key_mask)
    assert torch.isnan(unguarded[0]).all(), "the first launch alone kept NaN out: test premise"
    assert torch.isnan(unguarded[2]).any(), "the first dQ launch alone kept NaN out: premise"


def test_per_config_builds_each_configs_arguments_once():
    """launch.per_config: one call's arguments are built once per config (the Hopper path's
    descriptors with them), and another config gets its own."""
    built = []
    args = launch.per_config(lambda c: (built.append(c), c.block_m))
    a, b = configs.KernelConfig(64, 64, 4, 2), configs.KernelConfig(128, 64, 8, 2)
    first = args(a)
    assert args(a) is first and built == [a]
    assert args(b)[1] == b.block_m and built == [a, b]


def test_the_exclusion_mark_survives_compilation(tmp_path):
    """The fp16/bf16 dK/dV step marks an excluded pair's P as -0.0 and selects dS on that
    mark (backward._dkdv_step). The interpreter keeps the sign of any -0.0; compiled code
    must too: triton 3.6 built the literal -0.0 as +0.0, so nothing was marked and NaN from
    excluded keys reached dK on the GPU (c0dacb5). Cross-compiled for sm90 (no GPU needed),
    the select must still carry the bits 0x80000000. With the literal, triton 3.6 (the GPUs')
    fails this test and triton 3.9 passes it; the bit-cast constant passes on both."""
    script = tmp_path / "mark.py"  # @triton.jit needs its source in a file
    script.write_text(
        "import triton, triton.language as tl\n"
        "from triton.backends.compiler import GPUTarget\n"
        "from triton.compiler import ASTSource\n"
        "from safeattn.kernels import backward\n"
        "@triton.jit\n"
        "def mark(x_ptr, out_ptr, BLOCK: tl.constexpr):\n"
        "    offs = tl.arange(0, BLOCK)\n"
        "    x = tl.load(x_ptr + offs)\n"
        "    p = tl.where(x > 0, x, backward._negative_zero())\n"
        "    tl.store(out_ptr + offs, tl.where(backward._marked_excluded(p), 1.0, p))\n"
        "sig = {'x_ptr': '*fp32', 'out_ptr': '*fp32', 'BLOCK': 'constexpr'}\n"
        "src = ASTSource(fn=mark, signature=sig, constexprs={'BLOCK': 64})\n"
        "ptx = triton.compile(src, target=GPUTarget('cuda', 90, 32)).asm['ptx']\n"
        "print([line.strip() for line in ptx.splitlines() if 'selp.f32' in line])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    # The checkout under test, installed or not: the GPU machines run the tests from a clone
    # without installing it, and the script's own folder is all a child puts on sys.path.
    checkout = os.path.dirname(os.path.dirname(safeattn.__file__))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [checkout, env.get("PYTHONPATH")]))
    res = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "0f80000000" in res.stdout, f"the -0.0 mark was lost: {res.stdout}"


@pytest.mark.parametrize("where", ["k", "v", "q"])
def test_included_nan_propagates(where, device, on_gpu):
    b, h, n, d = pick(on_gpu, (1, 2, 20, 16), (2, 4, 512, 64))
    q, k, v = rand_qkv(b, h, h, n, n, d, torch.bfloat16, device, seed=15)
    {"q": q, "k": k, "v": v}[where][0, 0, 3, 0] = float("nan")
    out, _, dq, _, _ = fwd_bwd(safeattn.attention, q, k, v, torch.ones_like(q))
    if where == "q":
        assert torch.isnan(out[0, 0, 3]).all() and torch.isfinite(out[0, 0, :3]).all()
    elif where == "k":  # a NaN score: every row that attends key 3 is NaN
        assert torch.isnan(out[0, 0]).all(), "NaN in an attended key did not propagate"
    else:  # a NaN in v[3, 0] reaches feature 0 of every row that attends key 3
        assert torch.isnan(out[0, 0, :, 0]).all(), "NaN in an attended value did not propagate"
        assert torch.isfinite(out[0, 1]).all() and torch.isfinite(out[1:]).all()
    assert not torch.isfinite(dq[0, 0]).all()


def test_a_nan_row_adds_nothing_to_keys_it_excludes(device, on_gpu):
    """A row whose LSE is NaN (it attends a NaN key) adds NaN to the dK/dV of the keys it
    attends and nothing to the others: with causal and Nk > Nq, the keys past the last
    query are attended by no row, so their dK and dV are exactly 0 (backward._dkdv_step
    subtracts the LSE before the mask)."""
    b, h, nq, nk, d = pick(on_gpu, (1, 2, 20, 27, 16), (2, 4, 500, 530, 64))
    q, k, v = rand_qkv(b, h, h, nq, nk, d, torch.float16, device, seed=16)
    k[0, 0, 3, 0] = float("nan")
    _, _, _, dk, dv = fwd_bwd(safeattn.attention, q, k, v, torch.ones_like(q), causal=True)
    assert torch.isnan(dv[0, 0, 3:nq]).any(), "premise: the NaN rows reach the keys they attend"
    for name, g in (("dk", dk), ("dv", dv)):
        assert torch.equal(g[:, :, nq:], torch.zeros_like(g[:, :, nq:])), name


# --------------------------------------------------------------------------- contract 4


@pytest.mark.parametrize(
    "nq,nk", [(0, 5), (5, 0), (1, 1), (17, 1), (1, 17), (33, 48), (0, 0)], ids=str
)
def test_tails_write_every_element(nq, nk, device, on_gpu, monkeypatch):
    monkeypatch.setenv("SAFEATTN_POISON_OUTPUTS", "1")  # outputs start as NaN
    scale = pick(on_gpu, 1, 31)
    nq, nk = nq * scale, nk * scale
    q, k, v = rand_qkv(2, 2, 1, nq, nk, 24, torch.float16, device, seed=16)
    do = torch.randn(q.shape, device=device).to(q.dtype)
    for causal in (False, "bottom_right"):
        out, lse, dq, dk, dv = fwd_bwd(safeattn.attention, q, k, v, do, causal=causal,
                                       return_lse=True)  # fmt: skip
        ref = fwd_bwd(reference.attention, q.double(), k.double(), v.double(), do.double(),
                      causal=causal, return_lse=True)  # fmt: skip
        for name, got, want in zip(("out", "lse", "dq", "dk", "dv"), (out, lse, dq, dk, dv),
                                   ref, strict=True):  # fmt: skip
            assert got.shape == want.shape, name
            assert not torch.isnan(got).any(), f"{name}: element left unwritten (NaN)"
            fin = torch.isfinite(want)
            assert torch.equal(torch.isfinite(got), fin), f"{name}: finiteness differs"
            assert torch.allclose(got[fin].double(), want[fin], atol=2e-2, rtol=2e-2), name


# --------------------------------------------------------------------------- contract 5


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_large_logits_never_overflow(dtype, device, on_gpu):
    """Logits of 1e4..1e5: a same-dtype softmax overflows (fp16) or loses everything; the
    kernel stays finite. Near-ties at this scale make the gradients ill-conditioned, so
    they are held to 3x the error of the fp32-internal reference rounded to the same dtype
    (the best any fp32-accumulating kernel can do), not to the fp64 truth alone."""
    b, h, n, d = pick(on_gpu, (1, 2, 37, 32), (2, 4, 1000, 128))
    amp = 60.0 if dtype == torch.float16 else 300.0
    q, k, v = rand_qkv(b, h, h, n, n, d, dtype, device, seed=17, scale=amp)
    do = torch.randn(q.shape, device=device).to(dtype)
    got = fwd_bwd(safeattn.attention, q, k, v, do, causal=True, return_lse=True)
    ref = fwd_bwd(reference.attention, q.double(), k.double(), v.double(), do.double(),
                  causal=True, return_lse=True)  # fmt: skip
    fp32 = fwd_bwd(reference.attention, q, k, v, do, causal=True, return_lse=True)
    assert ref[1].abs().max() > 1e4, "the case did not produce large logits"
    for name, g, r, best in zip(("out", "lse", "dq", "dk", "dv"), got, ref, fp32, strict=True):
        assert torch.isfinite(g).all(), f"{name} overflowed"
        err = (g.double() - r).norm().item()
        best_err = (best.double() - r).norm().item()
        if name in ("out", "lse"):  # well-conditioned: a convex combination and a log-sum
            assert err <= 1e-2 * r.norm().item(), f"{name}: error {err:.3e}"
        else:  # plus one unit of rounding at the gradient's natural scale |dO|·|v|·|k|·scale
            other = k if name == "dq" else q
            natural = do.double().norm() * v.double().abs().max()
            if name != "dv":
                natural = natural * other.double().abs().max() / math.sqrt(d)
            eps = torch.finfo(dtype).eps * natural.item()
            assert err <= 3 * best_err + eps, f"{name}: error {err:.3e} vs {best_err:.3e}"


# --------------------------------------------------------------------------- softcap


SOFTCAP_DTYPES = [torch.bfloat16, torch.float32]
SOFTCAP_IDS = ["bf16", "fp32"]


def softcap_case(name: str, device, on_gpu):
    """(q, k, v, kwargs) of one soft-capping case. |q·k·scale| ~ 2 against a cap of 3: the
    scores cover tanh's linear part and its knee, where the cap and its derivative matter."""
    b, hq, hkv, nq, nk, d = pick(on_gpu, (2, 2, 1, 37, 29, 16), (2, 8, 2, 700, 1000, 128))
    if name == "gqa":
        hq, hkv = pick(on_gpu, (4, 2), (16, 4))
    q, k, v = rand_qkv(b, hq, hkv, nq, nk, d, torch.float32, device, seed=31, scale=1.5)
    g = torch.Generator().manual_seed(32)
    kw: dict = {"softcap": 3.0}
    if name == "causal":
        kw["causal"] = "bottom_right"
    elif name == "key_mask":
        km = torch.rand(b, nk, generator=g) > 0.3
        km[-1] = False  # a batch element with every key masked
        kw.update(key_mask=km.to(device), causal=True)
    elif name == "float_mask":
        am = torch.randn(1, hq, nq, nk, generator=g)
        am[0, 0, 2] = -math.inf  # a row excluded by the additive mask
        am[..., 5] = -math.inf  # a key excluded for every row
        kw["attn_mask"] = am.to(device)
    elif name == "gqa":
        kw.update(causal=True, window=(9, -1))
    return q, k, v, kw


@triton.jit
def _tanh_kernel(X, Y, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(Y + offs, forward._tanh(tl.load(X + offs)))


def test_softcap_tanh_is_accurate_and_total(device):
    """The kernels' exp2-only tanh: a few ulp relative everywhere (1 - e^{-2|x|} alone
    would lose every digit near 0), exactly ±1 for ±inf and huge |x|, NaN only for NaN."""
    mags = torch.logspace(-30, 2, 4000, dtype=torch.float64)
    special = [0.0, float("inf"), -float("inf"), 1e30, -3e38, float("nan")]
    x64 = torch.cat([mags, -mags[::37], torch.tensor(special, dtype=torch.float64)])
    x = torch.cat([x64, torch.zeros(8192 - x64.numel(), dtype=torch.float64)]).float()
    x_dev = x.to(device)
    y_dev = torch.empty_like(x_dev)
    _tanh_kernel[(1,)](x_dev, y_dev, N=8192)
    y, want = y_dev.cpu().double(), torch.tanh(x.double())
    assert torch.equal(torch.isnan(y), torch.isnan(x)), "NaN exactly where the input is NaN"
    finite = ~torch.isnan(want) & (want != 0)
    ulps = ((y - want).abs() / want.abs())[finite] / 2**-24
    assert ulps.max() <= 8, f"tanh off by {ulps.max():.1f} units of 2^-24 (relative)"
    n = x64.numel()
    assert y[n - 6 : n - 1].tolist() == [0.0, 1.0, -1.0, 1.0, -1.0]


@pytest.mark.parametrize("dtype", SOFTCAP_DTYPES, ids=SOFTCAP_IDS)
@pytest.mark.parametrize("case", ["plain", "causal", "key_mask", "float_mask", "gqa"])
def test_softcap_matches_reference(case, dtype, device, on_gpu):
    """out, lse and the three gradients of capped attention against the fp64 reference."""
    q, k, v, kw = softcap_case(case, device, on_gpu)
    if "attn_mask" in kw:
        kw["attn_mask"] = kw["attn_mask"].to(dtype)
    check_against_reference(q.to(dtype), k.to(dtype), v.to(dtype), **kw)


def test_softcap_with_a_block_mask(device, on_gpu):
    """softcap beside a prebuilt safeattn.block_mask: the same kernels, the same bits, as
    the mask given as arguments."""
    q, k, v, kw = softcap_case("key_mask", device, on_gpu)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(2)).to(device)
    bm = safeattn.block_mask(q.shape[2], k.shape[2], causal=True, key_mask=kw["key_mask"])
    with_bm = fwd_bwd(safeattn.attention, q, k, v, do, block_mask=bm, softcap=kw["softcap"])
    with_args = fwd_bwd(safeattn.attention, q, k, v, do, **kw)
    for name, a, b_ in zip(("out", "lse", "dq", "dk", "dv"), with_bm, with_args, strict=True):
        assert (a is None and b_ is None) or torch.equal(a, b_), name


def test_softcap_changes_the_result(device, on_gpu):
    """The cases above are ones where the cap matters: without it, out and every gradient
    differ from the capped reference far beyond the tolerance."""
    q, k, v, kw = softcap_case("causal", device, on_gpu)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(device)
    capped = fwd_bwd(reference.attention, q.double(), k.double(), v.double(), do.double(), **kw)
    plain = fwd_bwd(safeattn.attention, q, k, v, do, **{**kw, "softcap": 0.0})
    for name, c, p in zip(("out", "lse", "dq", "dk", "dv"), capped, plain, strict=True):
        if c is not None:
            assert (c - p.double()).abs().max() > 1e-2 * c.abs().max(), name


@pytest.mark.parametrize("dtype", SOFTCAP_DTYPES, ids=SOFTCAP_IDS)
def test_softcap_empty_rows_are_exact_zeros(dtype, device, on_gpu):
    check_empty_rows(dtype, device, on_gpu, softcap=2.0)


def test_softcap_excluded_keys_values_never_leak(device, on_gpu):
    """NaN/Inf in excluded K makes a NaN or infinite score, whose cap is NaN: the masks
    must still keep it out of every result, bitwise."""
    check_excluded_never_leak(torch.bfloat16, device, on_gpu, softcap=2.0)


@pytest.mark.parametrize("poison", [float("nan"), float("inf")], ids=["nan", "inf"])
@pytest.mark.parametrize("where", ["k", "q"])
def test_softcap_included_nonfinite_propagates(where, poison, device, on_gpu):
    """tanh(±inf) = ±1: an attended Inf would become a finite capped logit. Contract item 3
    says the rows that use it are non-finite, as without a cap (and as the reference)."""
    b, h, n, d = pick(on_gpu, (1, 2, 20, 16), (2, 4, 512, 64))
    q, k, v = rand_qkv(b, h, h, n, n, d, torch.bfloat16, device, seed=15)
    {"q": q, "k": k}[where][0, 0, 3, 0] = poison
    out, lse, dq, _, _ = fwd_bwd(safeattn.attention, q, k, v, torch.ones_like(q), softcap=5.0,
                                 return_lse=True)  # fmt: skip
    rows = (0, 0, 3) if where == "q" else (0, 0)  # every row attends key 3
    assert torch.isnan(out[rows]).all(), f"an attended {poison} in {where} did not propagate"
    assert torch.isnan(lse[rows]).all(), f"lse: an attended {poison} in {where} was capped"
    assert torch.isfinite(out[0, 1]).all() and torch.isfinite(out[1:]).all()
    assert not torch.isfinite(dq[0, 0]).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_softcap_large_logits_saturate(dtype, device, on_gpu):
    """Logits of 1e4..1e5 under a cap of 30: tanh saturates (its derivative underflows to
    0 for most pairs) and every result stays finite and matches the reference, held to the
    contract's rule (DESIGN.md item 6): 3x the error of PyTorch's own math in the same dtype
    (the fp32-internal reference where that overflows). Not to the fp32-internal reference
    rounded to the dtype: in float16 the kernel's dS is rounded to float16 before dS @ K,
    which puts dq at 2-17x that error here (1.6e-3..3.6e-3 relative, interpreter, seeds
    18-22), still under PyTorch's float16 math (7e-3)."""
    b, h, n, d = pick(on_gpu, (1, 2, 37, 32), (2, 4, 1000, 128))
    amp = 60.0 if dtype == torch.float16 else 300.0
    q, k, v = rand_qkv(b, h, h, n, n, d, dtype, device, seed=17, scale=amp)
    q[:, :, ::3] /= amp  # every third row of ordinary size: scores left of the knee too
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(18)).to(device, dtype)
    kw = dict(causal=True, return_lse=True, softcap=30.0)
    got = fwd_bwd(safeattn.attention, q, k, v, do, **kw)
    ref = fwd_bwd(reference.attention, q.double(), k.double(), v.double(), do.double(), **kw)
    same = fwd_bwd(reference.attention, q, k, v, do, upcast=False, **kw)
    if not all(torch.isfinite(t).all() for t in same):
        same = fwd_bwd(reference.attention, q, k, v, do, **kw)
    raw = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(d)
    assert raw.abs().max() > 1e4, "the case did not produce large logits"
    assert ref[1].abs().max() < 30 + math.log(n), "the cap did not bound the LSE"
    for name, g, r, best in zip(("out", "lse", "dq", "dk", "dv"), got, ref, same, strict=True):
        assert torch.isfinite(g).all(), f"{name} is not finite"
        err = (g.double() - r).norm().item()
        best_err = (best.double() - r).norm().item()
        eps = torch.finfo(dtype).eps * r.norm().item()
        assert err <= 3 * best_err + eps, f"{name}: error {err:.3e} vs {best_err:.3e}"


# --------------------------------------------------------------------------- contract 9


def test_deterministic_gradients(device, on_gpu):
    b, hq, hkv, n, d = pick(on_gpu, (1, 4, 1, 40, 16), (2, 16, 2, 2048, 128))
    q, k, v = rand_qkv(b, hq, hkv, n, n, d, torch.bfloat16, device, seed=18)
    do = torch.randn(q.shape, device=device).to(q.dtype)
    first = fwd_bwd(safeattn.attention, q, k, v, do, causal=True, deterministic=True)
    for _ in range(pick(on_gpu, 1, 5)):
        again = fwd_bwd(safeattn.attention, q, k, v, do, causal=True, deterministic=True)
        for name, a, b_ in zip(("out", "lse", "dq", "dk", "dv"), first, again, strict=True):
            if a is not None:
                assert torch.equal(a, b_), f"{name} differs between runs"


# --------------------------------------------------------------------------- CPU dispatch


def test_cpu_without_interpreter_uses_reference():
    """CPU tensors without TRITON_INTERPRET run the reference: same numbers, no crash."""
    code = (
        "import torch, safeattn;"
        "from safeattn.kernels import launch; assert not launch.INTERPRET;"
        "q = torch.randn(1, 2, 9, 8, requires_grad=True);"
        "o = safeattn.attention(q, q, q, causal=True); o.sum().backward();"
        "r = safeattn.reference.attention(q, q, q, causal=True);"
        "assert torch.equal(o, r), 'not the reference'; print('ok')"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-2000:]


# --------------------------------------------------------------------------- contract 7


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("d", [128, 256])
def test_tuner_never_picks_a_config_over_the_gpu_limit(dtype, d, monkeypatch):
    """With tuning on, every launched kernel fits this GPU's opt-in shared memory."""
    monkeypatch.setenv("SAFEATTN_AUTOTUNE", "1")
    limit = launch._smem_limit(torch.device("cuda"))
    q, k, v = rand_qkv(2, 4, 2, 700, 900, d, dtype, "cuda", seed=d)
    launch._LAUNCHED.clear()
    fwd_bwd(safeattn.attention, q, k, v, torch.ones_like(q), causal=True)
    used = launch.launched_kernels()
    tma = hopper.applies(torch.cuda.get_device_capability(), dtype)  # contiguous: the TMA path
    split = hopper.split_dkdv(tma, configs.block_d(d))
    dkdv = {"bwd_dv", "bwd_dk"} if split else {"bwd_dkdv"}
    assert set(used) == {"forward", "bwd_preprocess", "bwd_dq", *dkdv}
    for r in used.values():
        assert 0 < r.shared_bytes <= limit, (r, limit)
        assert 0 < r.registers <= 255, r


def test_tuner_breaks_near_ties_by_candidate_order():
    """A candidate within TIE_TOLERANCE of the fastest wins when it comes first, so the same
    kernels pick the same config in every process (no A/A flip-flop); a clearly faster one
    still wins, and a non-finite time never does."""
    tol = configs.TIE_TOLERANCE
    assert configs.pick([1.0 + tol / 2, 1.0]) == 0
    assert configs.pick([1.0 + 2 * tol, 1.0]) == 1
    assert configs.pick([float("nan"), 2.0, 1.0]) == 2
    with pytest.raises(ValueError, match="no finite tuning time"):
        configs.pick([float("inf"), float("nan")])
