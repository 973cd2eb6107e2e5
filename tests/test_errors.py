"""Contract item 8: bad input raises TypeError / ValueError naming the argument, with a HINT.

Every case runs through the validator itself and through the public API
(safeattn.attention / safeattn.varlen_attention call the validator first thing), so a path
that skips validation or turns it into a bare assert fails here. A second device is
simulated with the "meta" device, which exists on every PyTorch build.
"""

from __future__ import annotations

import math

import pytest
import torch

import safeattn
from safeattn import reference
from safeattn._inputs import check_attention, check_varlen

F32 = torch.float32


def dense_args(**overrides):
    """A valid dense call (q (2, 4, 5, 8), k/v (2, 2, 7, 8)) with some arguments replaced."""
    args = {
        "q": torch.randn(2, 4, 5, 8),
        "k": torch.randn(2, 2, 7, 8),
        "v": torch.randn(2, 2, 7, 8),
    }
    args.update(overrides)
    return args


def varlen_args(**overrides):
    """A valid packed call: 3 sequences (q lengths 4, 0, 6; k lengths 5, 0, 7)."""
    args = {
        "q": torch.randn(10, 4, 8),
        "k": torch.randn(12, 2, 8),
        "v": torch.randn(12, 2, 8),
        "cu_seqlens_q": torch.tensor([0, 4, 4, 10], dtype=torch.int32),
        "cu_seqlens_k": torch.tensor([0, 5, 5, 12], dtype=torch.int32),
        "max_seqlen_q": 6,
        "max_seqlen_k": 7,
    }
    args.update(overrides)
    return args


META = torch.device("meta")

# (id, arguments, expected exception, argument name the message must contain)
DENSE_CASES = [
    ("q_not_tensor", dense_args(q=[[1.0]]), TypeError, "q"),
    ("k_int64", dense_args(k=torch.ones(2, 2, 7, 8, dtype=torch.int64)), TypeError, "k"),
    ("q_float64", dense_args(q=torch.randn(2, 4, 5, 8, dtype=torch.float64)), TypeError, "q"),
    ("dtype_mismatch", dense_args(v=torch.randn(2, 2, 7, 8).half()), TypeError, "v"),
    ("device_mismatch", dense_args(k=torch.randn(2, 2, 7, 8, device=META)), ValueError, "k"),
    ("q_3d", dense_args(q=torch.randn(4, 5, 8)), ValueError, "q"),
    ("v_5d", dense_args(v=torch.randn(1, 2, 2, 7, 8)), ValueError, "v"),
    ("batch_mismatch", dense_args(k=torch.randn(3, 2, 7, 8), v=torch.randn(3, 2, 7, 8)),
     ValueError, "batch"),
    ("head_dim_mismatch", dense_args(k=torch.randn(2, 2, 7, 6), v=torch.randn(2, 2, 7, 6)),
     ValueError, "head dim"),
    ("kv_shape_mismatch", dense_args(v=torch.randn(2, 2, 6, 8)), ValueError, "v"),
    ("heads_not_divisible", dense_args(k=torch.randn(2, 3, 7, 8), v=torch.randn(2, 3, 7, 8)),
     ValueError, "Hkv"),
    ("head_dim_0", dense_args(q=torch.randn(2, 4, 5, 0), k=torch.randn(2, 2, 7, 0),
                              v=torch.randn(2, 2, 7, 0)), ValueError, "head dim"),
    ("head_dim_257", dense_args(q=torch.randn(1, 1, 2, 257), k=torch.randn(1, 1, 3, 257),
                                v=torch.randn(1, 1, 3, 257)), ValueError, "head dim"),
    ("key_mask_list", dense_args(key_mask=[[True] * 7] * 2), TypeError, "key_mask"),
    ("key_mask_float", dense_args(key_mask=torch.ones(2, 7)), TypeError, "key_mask"),
    ("key_mask_shape", dense_args(key_mask=torch.ones(2, 5, dtype=torch.bool)), ValueError,
     "key_mask"),
    ("key_mask_per_query", dense_args(key_mask=torch.ones(2, 5, 7, dtype=torch.bool)),
     ValueError, "key_mask"),
    ("key_mask_device", dense_args(key_mask=torch.ones(2, 7, dtype=torch.bool, device=META)),
     ValueError, "key_mask"),
    ("attn_mask_int", dense_args(attn_mask=torch.ones(5, 7, dtype=torch.int32)), TypeError,
     "attn_mask"),
    ("attn_mask_not_tensor", dense_args(attn_mask=0.0), TypeError, "attn_mask"),
    ("attn_mask_not_broadcastable", dense_args(attn_mask=torch.ones(5, 6, dtype=torch.bool)),
     ValueError, "attn_mask"),
    ("attn_mask_5d", dense_args(attn_mask=torch.ones(1, 2, 4, 5, 7, dtype=torch.bool)),
     ValueError, "attn_mask"),
    ("attn_mask_device", dense_args(attn_mask=torch.zeros(5, 7, device=META)), ValueError,
     "attn_mask"),
    ("causal_string", dense_args(causal="yes"), ValueError, "causal"),
    ("causal_int", dense_args(causal=1), TypeError, "causal"),
    ("window_single", dense_args(window=(3,)), TypeError, "window"),
    ("window_float", dense_args(window=(1.5, 0)), TypeError, "window"),
    ("window_below_minus_1", dense_args(window=(-2, 0)), ValueError, "window"),
    ("window_string", dense_args(window="ab"), TypeError, "window"),
    ("scale_string", dense_args(scale="0.1"), TypeError, "scale"),
    ("scale_inf", dense_args(scale=math.inf), ValueError, "scale"),
    ("scale_nan", dense_args(scale=math.nan), ValueError, "scale"),
    ("return_lse_string", dense_args(return_lse="yes"), TypeError, "return_lse"),
    ("softcap_negative", dense_args(softcap=-30.0), ValueError, "softcap"),
    ("softcap_nan", dense_args(softcap=math.nan), ValueError, "softcap"),
    ("softcap_inf", dense_args(softcap=math.inf), ValueError, "softcap"),
    ("softcap_subnormal", dense_args(softcap=1e-40), ValueError, "softcap"),
    ("softcap_string", dense_args(softcap="30"), TypeError, "softcap"),
    ("softcap_bool", dense_args(softcap=True), TypeError, "softcap"),
    ("softcap_tensor", dense_args(softcap=torch.tensor(30.0)), TypeError, "softcap"),
]  # fmt: skip

VARLEN_CASES = [
    ("q_4d", varlen_args(q=torch.randn(1, 10, 4, 8)), ValueError, "q"),
    ("k_float16", varlen_args(k=torch.randn(12, 2, 8).half()), TypeError, "k"),
    ("heads_not_divisible", varlen_args(k=torch.randn(12, 3, 8), v=torch.randn(12, 3, 8)),
     ValueError, "Hkv"),
    ("cu_q_list", varlen_args(cu_seqlens_q=[0, 4, 4, 10]), TypeError, "cu_seqlens_q"),
    ("cu_q_int64", varlen_args(cu_seqlens_q=torch.tensor([0, 4, 4, 10])), TypeError,
     "cu_seqlens_q"),
    ("cu_k_2d", varlen_args(cu_seqlens_k=torch.tensor([[0, 5, 5, 12]], dtype=torch.int32)),
     ValueError, "cu_seqlens_k"),
    ("cu_lengths_differ", varlen_args(cu_seqlens_k=torch.tensor([0, 5, 12], dtype=torch.int32)),
     ValueError, "cu_seqlens_k"),
    ("cu_first_not_0", varlen_args(cu_seqlens_q=torch.tensor([1, 4, 4, 10], dtype=torch.int32)),
     ValueError, "cu_seqlens_q"),
    ("cu_non_monotone", varlen_args(cu_seqlens_q=torch.tensor([0, 6, 4, 10], dtype=torch.int32)),
     ValueError, "cu_seqlens_q"),
    ("cu_last_not_total", varlen_args(cu_seqlens_k=torch.tensor([0, 5, 5, 11],
                                                                dtype=torch.int32)),
     ValueError, "cu_seqlens_k"),
    ("cu_device", varlen_args(cu_seqlens_q=torch.tensor([0, 4, 4, 10], dtype=torch.int32,
                                                        device=META)),
     ValueError, "cu_seqlens_q"),
    ("max_seqlen_too_small", varlen_args(max_seqlen_q=5), ValueError, "max_seqlen_q"),
    ("max_seqlen_negative", varlen_args(max_seqlen_k=-1), ValueError, "max_seqlen_k"),
    ("max_seqlen_float", varlen_args(max_seqlen_k=7.0), TypeError, "max_seqlen_k"),
    ("causal_string", varlen_args(causal="top-left"), ValueError, "causal"),
    ("window_negative", varlen_args(window=(0, -3)), ValueError, "window"),
    ("softcap_negative", varlen_args(softcap=-1.0), ValueError, "softcap"),
    ("softcap_nan", varlen_args(softcap=math.nan), ValueError, "softcap"),
]  # fmt: skip


def call_dense(entry, args):
    args = dict(args)
    return entry(args.pop("q"), args.pop("k"), args.pop("v"), **args)


def call_varlen(entry, args):
    args = dict(args)
    positional = [args.pop(n) for n in ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k",
                                        "max_seqlen_q", "max_seqlen_k")]  # fmt: skip
    return entry(*positional, **args)


def assert_clear_error(excinfo, argument: str):
    message = str(excinfo.value)
    assert argument in message, f"message does not name {argument!r}:\n{message}"
    assert "HINT:" in message, f"message has no HINT line:\n{message}"
    assert "\n" in message, f"message is not multi-line:\n{message}"


DENSE_ENTRIES = {"check_attention": check_attention, "safeattn.attention": safeattn.attention}
VARLEN_ENTRIES = {"check_varlen": check_varlen, "safeattn.varlen_attention":
                  safeattn.varlen_attention}  # fmt: skip


@pytest.mark.parametrize("entry", list(DENSE_ENTRIES))
@pytest.mark.parametrize(("args", "exc", "argument"), [c[1:] for c in DENSE_CASES],
                         ids=[c[0] for c in DENSE_CASES])  # fmt: skip
def test_dense_errors(entry, args, exc, argument):
    with pytest.raises(exc) as excinfo:
        call_dense(DENSE_ENTRIES[entry], args)
    assert_clear_error(excinfo, argument)


@pytest.mark.parametrize("entry", list(VARLEN_ENTRIES))
@pytest.mark.parametrize(("args", "exc", "argument"), [c[1:] for c in VARLEN_CASES],
                         ids=[c[0] for c in VARLEN_CASES])  # fmt: skip
def test_varlen_errors(entry, args, exc, argument):
    with pytest.raises(exc) as excinfo:
        call_varlen(VARLEN_ENTRIES[entry], args)
    assert_clear_error(excinfo, argument)


def test_valid_calls_pass_validation():
    """The base arguments above are valid, so every error case is caused by its one change;
    a float mask of another float dtype and varied but valid options are accepted too."""
    p = call_dense(check_attention, dense_args(attn_mask=torch.zeros(5, 7, dtype=torch.float64)))
    assert p.attn_mask.shape == (2, 4, 5, 7) and p.scale == pytest.approx(1 / math.sqrt(8))
    p = call_dense(check_attention, dense_args(causal="bottom_right", window=(3, 2)))
    assert (p.causal, p.bottom_right, p.window_left, p.window_right) == (True, True, 3, 0)
    p = call_dense(check_attention, dense_args(window=[2, 1], key_mask=torch.ones(2, 7) > 0))
    assert (p.causal, p.window_left, p.window_right) == (False, 2, 1)
    p = call_varlen(check_varlen, varlen_args(max_seqlen_q=9, causal=True))
    assert (p.batch, p.seq_q, p.seq_k, p.window_right) == (3, 9, 7, 0)
    # softcap: None and 0 are off (0.0), an int cap is a float cap.
    assert call_dense(check_attention, dense_args()).softcap == 0.0
    assert call_dense(check_attention, dense_args(softcap=None)).softcap == 0.0
    assert call_dense(check_attention, dense_args(softcap=0)).softcap == 0.0
    p = call_dense(check_attention, dense_args(softcap=50))
    assert p.softcap == 50.0 and isinstance(p.softcap, float)
    assert call_varlen(check_varlen, varlen_args(softcap=30.0)).softcap == 30.0


def test_reference_accepts_float64_api_does_not():
    args = {n: torch.randn(1, 1, 3, 4, dtype=torch.float64) for n in ("q", "k", "v")}
    assert call_dense(reference.attention, args).dtype == torch.float64
    with pytest.raises(TypeError) as excinfo:
        call_dense(safeattn.attention, args)
    assert_clear_error(excinfo, "q")


def test_cu_seqlens_checked_once_per_unmodified_tensor(monkeypatch):
    """A cu_seqlens passed again unmodified is not read back again (each read is a host
    sync); an in-place write is seen (the version counter), so a value made invalid raises
    as on a first call; an equal but new tensor is read and checked again."""
    from safeattn import _cu_seqlens

    _cu_seqlens.clear_cu_seqlens_cache()
    reads = []
    real_tolist = torch.Tensor.tolist

    def counting_tolist(self):
        reads.append(self.shape)
        return real_tolist(self)

    monkeypatch.setattr(torch.Tensor, "tolist", counting_tolist)
    args = varlen_args()
    call_varlen(check_varlen, args)
    assert len(reads) == 2  # cu_seqlens_q and cu_seqlens_k, once each
    p = call_varlen(check_varlen, args)
    assert len(reads) == 2 and (p.batch, p.seq_q, p.seq_k) == (3, 6, 7)

    args["cu_seqlens_q"][1] = 7  # in place: [0, 7, 4, 10], decreasing
    with pytest.raises(ValueError) as excinfo:
        call_varlen(check_varlen, args)
    assert_clear_error(excinfo, "cu_seqlens_q")
    assert len(reads) == 3

    args["cu_seqlens_q"][1] = 4  # valid again, but max_seqlen_k too small for a new k layout
    args["cu_seqlens_k"] = torch.tensor([0, 2, 2, 12], dtype=torch.int32)  # lengths 2, 0, 10
    with pytest.raises(ValueError) as excinfo:
        call_varlen(check_varlen, args)
    assert_clear_error(excinfo, "max_seqlen_k")

    fresh = varlen_args()
    before = len(reads)
    call_varlen(check_varlen, fresh)
    assert len(reads) == before + 2


@pytest.mark.parametrize("entry", ["attention", "varlen_attention"])
def test_inputs_validated_once_per_call(entry, monkeypatch):
    """The reference path of the public API (CPU without the interpreter) checks the
    arguments once: it hands the validated problem on instead of re-checking the call."""
    from safeattn import _inputs, api

    checks = []
    real = _inputs.check_qkv_types

    def counting(*args, **kwargs):
        checks.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(_inputs, "check_qkv_types", counting)
    monkeypatch.setattr(api, "_use_kernels", lambda p: False)
    if entry == "attention":
        args = dense_args()
        want = call_dense(reference.attention, args)
        del checks[:]
        got = call_dense(safeattn.attention, args)
    else:
        args = varlen_args()
        want = call_varlen(reference.varlen_attention, args)
        del checks[:]
        got = call_varlen(safeattn.varlen_attention, args)
    assert len(checks) == 1
    assert torch.equal(got, want)
