"""The Hopper path (safeattn/kernels/hopper.py): when it is taken, and that it computes what
the portable kernels compute, forward and backward.

CPU: ``SAFEATTN_TMA=1`` forces the path under the interpreter, where both paths run the
same 32x16 blocks: the outputs must be equal bit for bit with the dK/dV fold off
(``hopper.fold_delta``, D = 128) and close with it on, poisoned inputs and empty rows
included, and the contract checks of test_kernels must hold on it. ``--gpu`` (an sm90 GPU
takes the path by default): both paths against the fp64 reference at realistic sizes, and
the launched forward kernel's registers and spills.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from test_kernels import (
    check_against_reference,
    check_empty_rows,
    check_excluded_never_leak,
    pick,
    rand_qkv,
)

import safeattn
from safeattn import blockmask
from safeattn.kernels import configs, hopper, launch, passes, tuning

HALF = [torch.float16, torch.bfloat16]
HALF_IDS = ["fp16", "bf16"]


def _interpreter_dtype(dtype, on_gpu):
    """The agreement checks run one 2-byte dtype under the interpreter: the two paths differ
    in addressing only, the same code for fp16 and bf16 there. --gpu runs both."""
    if not on_gpu and dtype == torch.float16:
        pytest.skip("CPU runs bfloat16 only (interpreter time); --gpu runs both")


# --------------------------------------------------------------------------- when


def test_setting_reads_the_environment(monkeypatch):
    monkeypatch.delenv(hopper.ENV, raising=False)
    assert hopper.setting() == "auto"
    for value in ("0", "1", "auto", " AUTO "):
        monkeypatch.setenv(hopper.ENV, value)
        assert hopper.setting() == value.strip().lower()
    monkeypatch.setenv(hopper.ENV, "yes")
    with pytest.raises(ValueError, match="SAFEATTN_TMA='yes' is not one of auto, 0, 1"):
        hopper.setting()


def test_a_bad_setting_fails_the_call_with_the_hint(device, monkeypatch):
    monkeypatch.setenv(hopper.ENV, "on")
    q, k, v = rand_qkv(1, 1, 1, 8, 8, 16, torch.float16, device)
    with pytest.raises(ValueError, match="HINT: auto takes the Hopper"):
        safeattn.attention(q, k, v)


def test_applies_to_sm90_half_precision_only():
    assert hopper.applies((9, 0), torch.bfloat16) and hopper.applies((9, 0), torch.float16)
    assert not hopper.applies((9, 0), torch.float32)
    for capability in ((8, 0), (8, 6), (8, 9), (10, 0)):
        assert not hopper.applies(capability, torch.bfloat16)


def test_addressable_layouts():
    t = torch.zeros(2, 3, 40, 64, dtype=torch.bfloat16)
    assert hopper.addressable(t)
    assert hopper.addressable(torch.zeros(2, 40, 3, 64, dtype=torch.float16).transpose(1, 2))
    # size-1 dimensions: their stride is never stepped along, whatever it is
    assert hopper.addressable(torch.zeros(1, 3, 40, 64, dtype=torch.float16)[:, :1])
    assert not hopper.addressable(t.transpose(2, 3))  # D not unit-stride
    assert not hopper.addressable(torch.zeros(2, 3, 40, 7, dtype=torch.float16))  # 14-byte rows
    assert not hopper.addressable(torch.zeros(2, 3, 40, 65, dtype=torch.float16)[..., 1:])
    assert not hopper.addressable(t[:, :, :0])  # empty
    assert not hopper.addressable(torch.zeros(40, 3, 64, dtype=torch.float16))  # varlen rank
    expanded = torch.zeros(2, 1, 40, 64, dtype=torch.float16).expand(2, 3, 40, 64)
    assert not hopper.addressable(expanded)  # stride 0 along a real dimension


def test_use_tma_decision(monkeypatch):
    t = torch.zeros(2, 3, 40, 64, dtype=torch.bfloat16)
    cpu = torch.device("cpu")
    monkeypatch.setenv(hopper.ENV, "auto")
    assert not hopper.use_tma(False, cpu, t, t)  # auto: sm90 GPUs only
    monkeypatch.setenv(hopper.ENV, "1")
    assert hopper.use_tma(False, cpu, t, t)
    assert not hopper.use_tma(True, cpu, t, t)  # varlen: never
    assert not hopper.use_tma(False, cpu, t, t.transpose(2, 3))  # one tensor it cannot address
    monkeypatch.setenv(hopper.ENV, "0")
    assert not hopper.use_tma(False, cpu, t, t)


def test_the_path_is_taken_at_every_head_dim(monkeypatch):
    """Automatically on sm90 for D=128 and D=256 alike (the backward's D=256 limit is gone:
    with the D=256 sweep's configs its Hopper backward is the faster one)."""
    monkeypatch.setattr(hopper, "_capability", lambda index: (9, 0))
    cuda = torch.device("cuda", 0)
    monkeypatch.setenv(hopper.ENV, "auto")
    for d in (64, 128, 256):
        t = torch.zeros(1, 2, 64, d, dtype=torch.bfloat16)
        assert hopper.use_tma(False, cuda, t, t)
    monkeypatch.setattr(hopper, "_capability", lambda index: (8, 0))
    assert not hopper.use_tma(False, cuda, t, t)  # auto: not on sm80


def test_the_split_dkdv_is_the_hopper_paths_at_d256_with_lists_of_its_own():
    """hopper.split_dkdv: the dK/dV kernel runs as dV then dK on the Hopper path at D=256
    only; its halves' configs exist there alone and hold one accumulator each (keep)."""
    assert hopper.split_dkdv(True, 256)
    assert not hopper.split_dkdv(True, 128) and not hopper.split_dkdv(False, 256)
    assert set(configs.SPLIT_PARTS) == {"bwd_dv", "bwd_dk"}
    for kernel in configs.SPLIT_PARTS:
        shipped = configs.candidates(kernel, 256, torch.bfloat16, tma=True)
        assert shipped and shipped == configs._HOPPER_SPLIT[kernel][256]
        assert all(configs.keep(c, kernel, 256) for c in shipped)
        assert not configs.keep(configs.KernelConfig(64, 128, 4, 2), kernel, 256)  # 256 regs
        assert configs.candidates(kernel, 128, torch.bfloat16, tma=True) == []
        assert configs.candidates(kernel, 256, torch.bfloat16) == []  # portable: joint kernel


def test_the_path_has_its_own_configs_and_tune_keys():
    for bucket in (32, 64, 128, 256):
        tma = configs.candidates("forward", bucket, torch.bfloat16, tma=True)
        assert tma and tma == configs._HOPPER_FORWARD[bucket]
        assert all(configs.keep(c, "forward", bucket) for c in tma)
    for kernel in ("bwd_dkdv", "bwd_dq"):  # their own lists from the Hopper sweep
        for bucket in (32, 64, 128, 256):
            tma = configs.candidates(kernel, bucket, torch.bfloat16, tma=True)
            assert tma and tma == configs._HOPPER_BACKWARD[kernel][bucket]
        assert configs.candidates(kernel, 128, torch.bfloat16, tma=True) != configs.candidates(
            kernel, 128, torch.bfloat16
        )
    with pytest.raises(ValueError, match="no bwd_preprocess configs"):
        configs.candidates("bwd_preprocess", 128, torch.bfloat16, tma=True)
    with pytest.raises(ValueError, match="float32"):
        configs.candidates("forward", 128, torch.float32, tma=True)
    meta = launch.Meta(False, 1, 1, 1, 8, 8, 64, False, -1, -1, False, 0, 0.1, False)
    assert ("tma", 1) not in meta.flags
    assert dataclasses.replace(meta, tma=True).flags == (*meta.flags, ("tma", 1))


# --------------------------------------------------------------------------- what


def _forward(q, k, v, mode, monkeypatch, **kw):
    monkeypatch.setenv(hopper.ENV, mode)
    return safeattn.attention(q, k, v, return_lse=True, **kw)


def _fwd_bwd(q, k, v, mode, monkeypatch, **kw):
    """(out, lse, dq, dk, dv) with ``SAFEATTN_TMA=mode``, from fresh leaves."""
    monkeypatch.setenv(hopper.ENV, mode)
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    out, lse = safeattn.attention(q, k, v, return_lse=True, **kw)
    out.backward(torch.ones_like(out) if out.numel() else out)
    return out.detach(), lse, q.grad, k.grad, v.grad


CASES = {
    "dense": {},
    "causal": {"causal": True},
    "bottom_right_gqa": {"causal": "bottom_right"},
    "window": {"window": (5, 3)},
    "leftpad_causal": {"causal": True, "key_mask": "leftpad"},
    "float_mask": {"attn_mask": "float"},
    "softcap": {"causal": True, "softcap": 2.0},
}


def _case(name, dtype, device, on_gpu, d):
    b, hq, hkv, nq, nk = pick(on_gpu, (2, 4, 2, 45, 52), (2, 16, 8, 1000, 1100))
    q, k, v = rand_qkv(b, hq, hkv, nq, nk, d, dtype, device, seed=3)
    kw = dict(CASES[name])
    if kw.get("key_mask") == "leftpad":
        pad = torch.tensor([0, nk // 3])
        kw["key_mask"] = (torch.arange(nk)[None, :] >= pad[:, None]).to(device)
    if kw.get("attn_mask") == "float":
        g = torch.Generator().manual_seed(4)
        mask = torch.randn(b, 1, nq, nk, generator=g)
        mask[torch.rand(b, 1, nq, nk, generator=g) < 0.2] = -math.inf
        kw["attn_mask"] = mask.to(device=device, dtype=dtype)
    return q, k, v, kw


@pytest.mark.parametrize("d", [32, 40])
@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
@pytest.mark.parametrize("name", list(CASES))
def test_the_paths_agree(name, dtype, d, device, on_gpu, monkeypatch):
    """Interpreter: bit for bit (the same blocks, only the addressing differs), with NaN in
    excluded and in attended keys. GPU: both paths within the contract's accuracy."""
    _interpreter_dtype(dtype, on_gpu)
    q, k, v, kw = _case(name, dtype, device, on_gpu, d)
    if on_gpu:
        for mode in ("0", "1"):
            monkeypatch.setenv(hopper.ENV, mode)
            check_against_reference(q, k, v, **kw)
        return
    _check_agreement(q, k, v, kw, monkeypatch)


@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
@pytest.mark.parametrize("name", ["causal", "leftpad_causal", "float_mask", "dense"])
def test_the_dkdv_fold_agrees(name, dtype, device, on_gpu, monkeypatch):
    """D = 128, where the Hopper path folds delta into dK/dV's dP dot
    (``hopper.fold_delta``): interpreter, as above (bit for bit with the fold off; close, with
    the same NaN and Inf entries, with it on). GPU: against the fp64 reference."""
    _interpreter_dtype(dtype, on_gpu)
    q, k, v, kw = _case(name, dtype, device, on_gpu, 128)
    assert hopper.fold_delta(True, configs.block_d(128))
    if on_gpu:
        monkeypatch.setenv(hopper.ENV, "1")
        check_against_reference(q, k, v, **kw)
        return
    _check_agreement(q, k, v, kw, monkeypatch)


def test_the_stats_pair_only_where_measured_and_under_the_interpreter(monkeypatch):
    """``hopper.pairs``: the dK/dV kernel's paired LSE/delta load on sm90 at 64 keys or more
    and 3 stages or more, where it was measured faster; never on sm80/86/89, nor at sm90's
    32-key (D = 256) or two-stage tiles. ``pair_stats``: always under the interpreter (so
    these tests run it), else the rule for the device's capability."""
    c = configs.KernelConfig
    paired = [c(64, 64, 4, 3), c(32, 64, 4, 3), c(32, 128, 4, 3), c(64, 128, 8, 3)]
    apart = [c(32, 64, 4, 2), c(64, 64, 4, 2), c(64, 32, 4, 3), c(32, 32, 4, 2)]
    for capability in (80, 86, 89, 90):
        for cfg in paired + apart:
            assert hopper.pairs(capability, cfg) == (capability == 90 and cfg in paired), cfg
    assert all(hopper.pair_stats(torch.device("cpu"), cfg) for cfg in apart)
    for capability, on in (((8, 0), False), ((8, 9), False), ((9, 0), True)):
        monkeypatch.setattr(hopper, "_capability", lambda index, c=capability: c)
        assert hopper.pair_stats(torch.device("cuda", 0), paired[0]) == on, capability
        assert not hopper.pair_stats(torch.device("cuda", 0), apart[0]), capability


PAIRED_CASES = {
    "causal": {"causal": True},
    "window": {"window": (70, 0)},
    "leftpad_causal": {"causal": True, "key_mask": "leftpad"},
}


@pytest.mark.parametrize("name", list(PAIRED_CASES))
def test_the_paired_stats_agree(name, device, on_gpu, monkeypatch):
    """The dK/dV kernel's plain steps with each row's LSE and delta as one load
    (``hopper.pair_stats``) or as two: the same values, so the interpreter gives the same
    bits on both paths, with NaN in one key row and Inf in one value row too. 160 rows: the
    interpreter's 32 x 16 tiles wholly inside the causal triangle and the window are the
    plain steps that pair. GPU: the reference, with the pairing the GPU chooses."""
    b, h, n = pick(on_gpu, (1, 2, 160), (2, 16, 1000))
    q, k, v = rand_qkv(b, h, h, n, n, 32, torch.bfloat16, device, seed=3)
    kw = dict(PAIRED_CASES[name])
    if kw.get("key_mask") == "leftpad":
        pad = torch.arange(b) * (n // 3)
        kw["key_mask"] = (torch.arange(n)[None, :] >= pad[:, None]).to(device)
    if on_gpu:
        check_against_reference(q, k, v, **kw)
        return
    k2, v2 = k.clone(), v.clone()
    k2[0, :, 7], v2[-1, :, 11] = math.nan, math.inf
    for kk, vv in ((k, v), (k2, v2)):
        for mode in ("0", "1"):
            paired = _fwd_bwd(q, kk, vv, mode, monkeypatch, **kw)
            with monkeypatch.context() as m:
                m.setattr(hopper, "pair_stats", lambda device, cfg: False)
                apart = _fwd_bwd(q, kk, vv, mode, monkeypatch, **kw)
            for a, b in zip(paired, apart, strict=True):
                torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


def _check_agreement(q, k, v, kw, monkeypatch):
    """The portable and the Hopper path under the interpreter, clean and with NaN in one key
    row and Inf in one value row (with a key mask, in a padding key too): bit for bit with
    the dK/dV fold off; with it on (its default where ``hopper.fold_delta`` says so) dK
    rounds differently, so close, with the same NaN and Inf entries."""
    k2, v2 = k.clone(), v.clone()
    k2[0, :, 7], v2[-1, :, 11] = math.nan, math.inf
    fold = hopper.fold_delta(True, configs.block_d(q.shape[-1]))
    for kk, vv in ((k, v), (k2, v2)):
        portable = _fwd_bwd(q, kk, vv, "0", monkeypatch, **kw)
        folded = _fwd_bwd(q, kk, vv, "1", monkeypatch, **kw)
        tma = folded  # without the fold at this head dim, the Hopper path's one build
        if fold:
            with monkeypatch.context() as m:
                m.setattr(hopper, "fold_delta", lambda *args: False)
                tma = _fwd_bwd(q, kk, vv, "1", monkeypatch, **kw)
        names = ("out", "lse", "dq", "dk", "dv")
        for name, a, b, c in zip(names, portable, tma, folded, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
            for kind in ("isfinite", "isnan", "isposinf"):
                differ = getattr(a, kind)() != getattr(c, kind)()
                assert not differ.any(), f"{name} {kind}: {differ.nonzero()[:4].tolist()} " \
                    f"portable {a[differ][:4].tolist()} folded {c[differ][:4].tolist()}"
            fin = a.isfinite()
            torch.testing.assert_close(c[fin], a[fin], rtol=2e-2, atol=2e-3)


@pytest.mark.parametrize("name", ["leftpad_causal", "float_mask"])
def test_partial_tiles_in_half_steps(name, device, on_gpu, monkeypatch):
    """``hopper.half_partial``: with a block mask and BLOCK_M >= HALF_PARTIAL_ROWS the Hopper
    dK/dV walks its partial tiles in half-height steps through descriptors of that height.
    Interpreter: 64-row dK/dV blocks over a 64-row summary tile, against the portable path
    with the same blocks in whole steps (close, the same NaN and Inf entries; the poisoned
    key and value rows of ``_check_agreement``), and contract items 1 and 2 on the path.
    GPU: the D=128 tiles that take the half steps, against the fp64 reference."""
    if on_gpu:
        monkeypatch.setenv("SAFEATTN_AUTOTUNE", "0")  # the one candidate below
        monkeypatch.setenv(tuning.TABLE_ENV, "0")
        monkeypatch.setenv(tuning.CACHE_ENV, "0")
        monkeypatch.setenv(hopper.ENV, "1")
        q, k, v, kw = _case(name, torch.bfloat16, device, on_gpu, 128)
        for cfg in (configs.KernelConfig(64, 64, 4, 2), configs.KernelConfig(64, 128, 8, 3)):
            monkeypatch.setitem(configs._HOPPER["bwd_dkdv"], 128, [cfg])
            launch.clear_choices()
            check_against_reference(q, k, v, **kw)
            if name == "leftpad_causal":  # the contract checks mask both ways themselves
                check_empty_rows(torch.bfloat16, device, on_gpu)
                check_excluded_never_leak(torch.bfloat16, device, on_gpu)
        launch.clear_choices()
        return
    monkeypatch.setitem(configs._INTERPRETER, "bwd_dkdv", configs.KernelConfig(64, 32, 4, 1))
    monkeypatch.setattr(blockmask, "INTERPRETER_BLOCK", 64)
    assert hopper.half_partial(True, True, 64) and not hopper.half_partial(True, True, 32)
    assert not hopper.half_partial(False, True, 64) and not hopper.half_partial(True, False, 64)
    rows, real = [], hopper.descriptors

    def spy(tensors, tile_rows, block_d):
        rows.append(list(tile_rows))
        return real(tensors, tile_rows, block_d)

    monkeypatch.setattr(passes.hopper, "descriptors", spy)
    b, hq, hkv, n, d = 2, 2, 1, 130, 32
    q, k, v = rand_qkv(b, hq, hkv, n, n, d, torch.bfloat16, device, seed=8)
    kw = dict(CASES[name])
    if name == "leftpad_causal":
        pad = torch.tensor([0, 70])
        kw["key_mask"] = torch.arange(n)[None, :] >= pad[:, None]
    else:
        g = torch.Generator().manual_seed(9)
        mask = torch.randn(b, 1, n, n, generator=g)
        mask[torch.rand(b, 1, n, n, generator=g) < 0.3] = -math.inf
        kw["attn_mask"] = mask.to(torch.bfloat16)
    k2, v2 = k.clone(), v.clone()
    k2[0, :, 7], v2[-1, :, 11] = math.nan, math.inf
    for kk, vv in ((k, v), (k2, v2)):
        portable = _fwd_bwd(q, kk, vv, "0", monkeypatch, **kw)
        rows.clear()
        halves = _fwd_bwd(q, kk, vv, "1", monkeypatch, **kw)
        assert [32, 32] in rows, rows  # the half-height Q, dO descriptors were built
        for what, a, c in zip(("out", "lse", "dq", "dk", "dv"), portable, halves, strict=True):
            if what in ("out", "lse", "dq"):  # not the dK/dV kernel: the same blocks
                torch.testing.assert_close(c, a, rtol=0, atol=0, equal_nan=True)
                continue
            for kind in ("isfinite", "isnan", "isposinf", "isneginf"):
                differ = getattr(a, kind)() != getattr(c, kind)()
                assert not differ.any(), f"{what} {kind}: {differ.nonzero()[:4].tolist()}"
            fin = a.isfinite()
            torch.testing.assert_close(c[fin], a[fin], rtol=1e-2, atol=1e-2)
    if name == "leftpad_causal":  # the contract checks mask both ways themselves
        monkeypatch.setenv(hopper.ENV, "1")
        check_empty_rows(torch.bfloat16, device, on_gpu)
        check_excluded_never_leak(torch.bfloat16, device, on_gpu)


@pytest.mark.parametrize("scale", [0.0, -0.3])
def test_the_dkdv_fold_keeps_any_scale(scale, device, on_gpu, monkeypatch):
    """Scale 0 (a uniform softmax) and a negative scale through the dK/dV kernel with its
    fold on, against the fp64 reference (the LSE fold, since removed, divided by the scale)."""
    assert hopper.fold_delta(True, 128)
    monkeypatch.setenv(hopper.ENV, "1")
    q, k, v, kw = _case("causal", torch.float16, device, on_gpu, 128)
    check_against_reference(q, k, v, scale=scale, **kw)


def test_the_kernels_read_through_the_descriptors(device, monkeypatch):
    """Mutants whose descriptors swap K and V change the output and each gradient: every
    kernel on the path really reads its tiles through them (the bit-for-bit agreement above
    is not two portable runs)."""
    q, k, v = rand_qkv(1, 2, 2, 40, 40, 32, torch.float16, device, seed=5)
    good = _fwd_bwd(q, k, v, "1", monkeypatch)
    real = hopper.descriptors

    def swapped(tensors, rows, block_d):
        tensors = list(tensors)
        tensors[1], tensors[2] = tensors[2], tensors[1]  # (q, k, v, ...) in every kernel
        return real(tensors, rows, block_d)

    monkeypatch.setattr(passes.hopper, "descriptors", swapped)
    bad = _fwd_bwd(q, k, v, "1", monkeypatch)
    for name, g, b in zip(("out", "lse", "dq", "dk", "dv"), good, bad, strict=True):
        assert not torch.equal(g, b), f"{name} did not change"
    monkeypatch.setattr(passes.hopper, "descriptors", real)
    portable = _fwd_bwd(q, k, v, "0", monkeypatch)  # the portable path ignores them
    if device == "cpu":  # the same blocks: bit for bit (a GPU tunes each path apart)
        for g, p in zip(good, portable, strict=True):
            assert torch.equal(g, p)


@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
def test_contract_holds_on_the_path(dtype, device, on_gpu, monkeypatch):
    """Contract items 1 and 2 (test_kernels' checks) with the path forced."""
    monkeypatch.setenv(hopper.ENV, "1")
    check_empty_rows(dtype, device, on_gpu)
    check_excluded_never_leak(dtype, device, on_gpu)


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
def test_an_sm90_gpu_takes_the_path_by_default(d, monkeypatch):
    """On an sm90 GPU, auto takes the path: every tune key carries ``tma``. (Its
    registers and spills are measured, not asserted: LiveResourcesSuite, docs/perf.)"""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the Hopper path is for sm90 GPUs")
    monkeypatch.setenv(hopper.ENV, "auto")
    launch.clear_choices()
    q, k, v = (
        t.requires_grad_(True)
        for t in rand_qkv(4, 16, 16, 2048, 2048, d, torch.bfloat16, "cuda", seed=6)
    )
    safeattn.attention(q, k, v, causal=True).backward(torch.ones_like(q))
    keys = list(launch.chosen_configs())
    assert {key[0] for key in keys} >= {"forward", "bwd_dkdv", "bwd_dq"}, keys
    assert all(("tma", 1) in key[5] for key in keys), keys
    monkeypatch.setenv(hopper.ENV, "0")
    launch.clear_choices()
    safeattn.attention(q, k, v, causal=True).backward(torch.ones_like(q))
    keys = list(launch.chosen_configs())
    assert keys and all(("tma", 1) not in key[5] for key in keys), keys
