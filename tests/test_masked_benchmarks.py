"""The masked-attention benchmarks' building blocks on a CPU, at tiny sizes: the workloads
(``regress/workloads.py``), the masks each implementation gets
(``benchmarks/_masks.py``) and the Llama-style model (``benchmarks/_llama.py``).

What they must show before a GPU times them: every implementation of one mask kind
computes the same attention (so the suites compare like with like), the masks have the
structure the docstrings state, the attended-pair counts (the TFLOP/s basis) are what the
masks attend, and the model trains one step with each implementation to the same loss.
FlexAttention has no backward on a CPU: its forward is compared, its backward is left to
the GPU.
"""

from __future__ import annotations

import importlib
import itertools
import sys

import pytest
import torch
from asv_helpers import REPO

from regress import workloads

sys.path.insert(0, str(REPO))  # the benchmarks package lives at the repository root
masks = importlib.import_module("benchmarks._masks")
llama = importlib.import_module("benchmarks._llama")
speed = importlib.import_module("benchmarks.speed")
flex_attention = pytest.importorskip("torch.nn.attention.flex_attention").flex_attention
# Eager FlexAttention is the point on a CPU (a reference of its masks), not a mistake.
pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")

# Tiny versions: 64 tokens per sequence, 2 heads of 16 (interpreter-friendly).
TINY_N, TINY_HEADS, TINY_D = 64, 2, 16
TINY_MODEL = workloads.ModelConfig(
    layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=96, vocab=101
)


def tiny(kind: str) -> workloads.MaskWorkload:
    return workloads.MASK_WORKLOADS[kind].shrunk(TINY_N)


# --- workloads -----------------------------------------------------------------------------


def test_workloads_are_the_ones_issue_11_names():
    w = workloads.MASK_WORKLOADS
    assert workloads.MASK_KINDS == (
        "key_padding_causal", "sliding_window", "varlen_docs", "bool_mask"
    )
    kp = w["key_padding_causal"]
    assert (kp.batch, kp.seq_len) == (8, 2048)
    assert kp.left_padding[0] == 0 and kp.left_padding[-1] == round(0.6 * 2048)
    steps = [b - a for a, b in itertools.pairwise(kp.left_padding)]
    assert max(steps) - min(steps) <= 1  # evenly spread
    assert (w["sliding_window"].batch, w["sliding_window"].seq_len) == (2, 8192)
    assert w["sliding_window"].window == 1024
    docs = w["varlen_docs"].doc_lengths
    assert len(docs) == 10 and sum(docs) == 16384 and len(set(docs)) == 10
    bm = w["bool_mask"]
    assert (bm.batch, bm.seq_len, bm.left_padding) == (4, 4096, (0, 512, 1024, 2048))
    assert workloads.model_padding("left", 2048) == (0, 341, 683, 1024)
    assert workloads.model_padding("none", 4096) == (0, 0, 0, 0)
    assert [workloads.heads_for(d) * d for d in (64, 128)] == [2048, 2048]


def test_speed_docstring_states_the_attended_pair_counts():
    for kind, w in workloads.MASK_WORKLOADS.items():
        assert f"{w.attended_pairs():,} pairs" in speed.__doc__, kind


def _dense(kind: str, w: workloads.MaskWorkload) -> torch.Tensor:
    """The dense mask the SDPA peers get, broadcast to the workload's batch: (B, N, N)."""
    if kind in ("key_padding_causal", "bool_mask"):
        mask = masks.padded_causal_dense(masks.keep_mask(w.left_padding, w.seq_len, "cpu"))
    elif kind == "sliding_window":
        mask = masks.window_dense(w.seq_len, w.window, "cpu")
    else:
        mask = masks.documents_dense(masks.document_ids(w.doc_lengths, "cpu"))
    return mask.expand(w.batch, 1, w.seq_len, w.seq_len)[:, 0]


@pytest.mark.parametrize("kind", workloads.MASK_KINDS)
def test_attended_pairs_count_what_the_masks_attend(kind):
    """The TFLOP/s basis: attended_pairs() equals the dense mask's True count (tiny size),
    and every mask kind's structure is causal."""
    w = tiny(kind)
    dense = _dense(kind, w)
    assert int(dense.sum()) == w.attended_pairs()
    assert not dense.triu(diagonal=1).any()  # never a future key


def test_padded_causal_mask_is_causal_and_key_not_padded():
    pads = (0, 3, 8)
    keep = masks.keep_mask(pads, 8, "cpu")
    assert keep.tolist()[1] == [False] * 3 + [True] * 5 and not keep[2].any()
    dense = masks.padded_causal_dense(keep)
    assert dense.shape == (3, 1, 8, 8) and dense.dtype == torch.bool
    for b, i, j in itertools.product(range(3), range(8), range(8)):
        assert bool(dense[b, 0, i, j]) == (j <= i and j >= pads[b]), (b, i, j)
    # The rows inside the padding see no key: the empty rows safeattn exists for.
    empty = ~dense.any(-1)[:, 0]
    assert empty.tolist() == [[i < p for i in range(8)] for p in pads]


def test_sdpa_gets_the_empty_rows_unmasked_and_the_rest_unchanged():
    dense = masks.padded_causal_dense(masks.keep_mask((0, 5), 8, "cpu"))
    opened = masks.unmask_empty_rows(dense)
    empty = ~dense.any(-1, keepdim=True).expand_as(dense)
    assert opened[empty].all()
    assert torch.equal(opened[~empty], dense[~empty])
    assert opened.any(-1).all()


def test_varlen_layout_and_document_mask():
    docs = (3, 1, 4)
    assert masks.cu_seqlens(docs, "cpu").tolist() == [0, 3, 4, 8]
    assert masks.cu_seqlens(docs, "cpu").dtype == torch.int32
    ids = masks.document_ids(docs, "cpu")
    assert ids.tolist() == [0, 0, 0, 1, 2, 2, 2, 2]
    dense = masks.documents_dense(ids)[0, 0]
    for i, j in itertools.product(range(8), range(8)):
        assert bool(dense[i, j]) == (ids[i] == ids[j] and j <= i)


@pytest.mark.parametrize("kind", workloads.MASK_KINDS)
def test_flex_mask_mods_match_the_dense_masks(kind):
    from torch.nn.attention.flex_attention import create_mask

    w = tiny(kind)
    keep = masks.keep_mask(w.left_padding, w.seq_len, "cpu") if w.left_padding else None
    if kind in ("key_padding_causal", "bool_mask"):
        mod = masks.padded_causal_mod(keep)
    elif kind == "sliding_window":
        mod = masks.window_mod(w.window)
    else:
        mod = masks.documents_mod(masks.document_ids(w.doc_lengths, "cpu"))
    dense = create_mask(mod, w.batch, 1, w.seq_len, w.seq_len, device="cpu")[:, 0]
    assert torch.equal(dense, _dense(kind, w))


# --- one call per (mask kind, implementation) ---------------------------------------------


def _outputs(kind: str) -> dict[str, torch.Tensor]:
    """Forward outputs (B, H, N, D) of every implementation on the tiny workload, same
    inputs; safeattn on the CPU runs under Triton's interpreter (tests/conftest.py)."""
    outs = {}
    for impl in ("safeattn", "flex", "sdpa"):
        case = masks.mask_case(kind, impl, "float32", TINY_D, "cpu", tiny(kind),
                               flex=flex_attention, heads=TINY_HEADS)
        q, k, v, _ = (t.detach() for t in case.inputs)  # flex: no CPU backward
        out = case.call(q, k, v)
        outs[impl] = out.transpose(0, 1)[None] if out.dim() == 3 else out
    return outs


@pytest.mark.parametrize("kind", workloads.MASK_KINDS)
def test_every_implementation_computes_the_same_attention(kind):
    outs = _outputs(kind)
    w = tiny(kind)
    assert outs["safeattn"].shape == (w.batch, TINY_HEADS, w.seq_len, TINY_D)
    for impl in ("flex", "sdpa"):
        torch.testing.assert_close(outs[impl], outs["safeattn"], atol=2e-5, rtol=1e-4,
                                   msg=lambda m, impl=impl: f"{impl} vs safeattn: {m}")


@pytest.mark.parametrize("kind", workloads.MASK_KINDS)
def test_safeattn_case_runs_its_backward(kind):
    """The timed passes replay safeattn's backward: it runs for every mask kind."""
    case = masks.mask_case(kind, "safeattn", "float32", TINY_D, "cpu", tiny(kind),
                           heads=TINY_HEADS)
    q, k, v, grad_out = case.inputs
    case.call(q, k, v).backward(grad_out)
    for t in (q, k, v):
        assert t.grad is not None and torch.isfinite(t.grad).all()
    if kind == "varlen_docs":  # the packed layout a varlen caller holds
        assert q.shape == (TINY_N, TINY_HEADS, TINY_D) and q.is_contiguous()


def test_unknown_kinds_and_impls_are_refused():
    with pytest.raises(ValueError, match="unknown mask kind"):
        masks.mask_case("triangle", "safeattn", "float32", 16, "cpu", tiny("bool_mask"))
    with pytest.raises(ValueError, match="unknown impl"):
        masks.mask_case("bool_mask", "xformers", "float32", 16, "cpu", tiny("bool_mask"))


# --- the model ------------------------------------------------------------------------------


def test_batch_pads_left_and_ignores_the_padding_in_the_loss():
    batch = llama.make_batch(TINY_MODEL, (0, 5), 12, "cpu")
    assert batch.keep.tolist()[1] == [False] * 5 + [True] * 7
    assert (batch.input_ids[1, :5] == 0).all() and (batch.input_ids[1, 5:] > 0).all()
    assert batch.labels[1].tolist()[:5] == [llama.IGNORE_INDEX] * 5
    assert batch.labels[1, 5:-1].tolist() == batch.input_ids[1, 6:].tolist()
    assert batch.labels[:, -1].tolist() == [llama.IGNORE_INDEX] * 2
    assert batch.positions[1].tolist() == [0] * 6 + list(range(1, 7))
    unpadded = llama.make_batch(TINY_MODEL, (0, 0), 12, "cpu")
    assert unpadded.keep is None and unpadded.positions[0].tolist() == list(range(12))


@pytest.mark.parametrize("padding", ["none", "left"])
def test_model_step_gives_the_same_loss_and_gradients_with_each_impl(padding):
    """One training step of the tiny model in float32: safeattn (interpreter) and SDPA
    (CPU math) reach the same loss and gradients; FlexAttention's forward the same loss
    (its backward needs a GPU). Grouped-query attention (4 query / 2 KV heads) throughout."""
    seq_len = 32
    pads = workloads.left_padding(4, seq_len, 0.5) if padding == "left" else (0,) * 4
    batch = llama.make_batch(TINY_MODEL, pads, seq_len, "cpu")
    results = {}
    for impl in ("safeattn", "sdpa"):
        params = llama.init_params(TINY_MODEL, "cpu", "float32")
        loss = llama.train_step(params, TINY_MODEL, batch, impl)
        assert torch.isfinite(loss)
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in params.values())
        results[impl] = (loss, {n: p.grad for n, p in params.items()})
    torch.testing.assert_close(results["sdpa"][0], results["safeattn"][0])
    for name, grad in results["safeattn"][1].items():
        torch.testing.assert_close(results["sdpa"][1][name], grad, atol=1e-6, rtol=1e-4,
                                   msg=lambda m, name=name: f"{name}: {m}")
    frozen = {n: p.detach() for n, p in llama.init_params(TINY_MODEL, "cpu", "float32").items()}
    attend = llama.attention_for("flex", batch.keep, seq_len, "cpu", flex=flex_attention)
    flex_loss = llama.loss(frozen, TINY_MODEL, batch, attend)
    torch.testing.assert_close(flex_loss, results["safeattn"][0])


def test_flex_model_step_where_torch_runs_it():
    """The whole flex training step, where this torch has a FlexAttention backward for the
    device (not on a CPU so far: then skipped with torch's reason; tools.smoke runs
    it on a GPU)."""
    batch = llama.make_batch(TINY_MODEL, (0, 2, 4, 8), 16, "cpu")
    params = llama.init_params(TINY_MODEL, "cpu", "float32")
    try:
        loss = llama.train_step(params, TINY_MODEL, batch, "flex", flex=flex_attention)
    except NotImplementedError as exc:
        pytest.skip(f"FlexAttention on this device: {exc}")
    assert torch.isfinite(loss) and all(p.grad is not None for p in params.values())


def test_prewarm_inputs_have_the_models_layout():
    """Compiled FlexAttention specialises on strides: the prewarm's inputs must be laid out
    as the model's attention inputs are, or the suite compiles again."""
    seen = []

    def attend(q, k, v):
        seen.append([t.stride() for t in (q, k, v)])
        return torch.zeros_like(q)

    params = {n: p.detach() for n, p in llama.init_params(TINY_MODEL, "cpu", "float32").items()}
    llama.loss(params, TINY_MODEL, llama.make_batch(TINY_MODEL, (0, 3), 16, "cpu"), attend)
    q, k, v, grad_out = llama.qkv_like_model(TINY_MODEL, 2, 16, "float32", "cpu")
    assert seen[0] == [t.stride() for t in (q, k, v)]
    assert grad_out.shape == q.shape and q.requires_grad and not grad_out.requires_grad
