"""safeattn under ``torch.compile(fullgraph=True)`` and ``torch.export``: the kernels are the
PyTorch operators ``torch.ops.safeattn.attn_fwd`` / ``attn_bwd`` (``safeattn/kernels/ops.py``),
so Dynamo traces every public entry point without a graph break, with dynamic shapes too.

On a CPU these need the kernels, i.e. ``TRITON_INTERPRET=1`` (as CI runs them); without it
safeattn computes with its pure-PyTorch reference, which is not what is tested here.
"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

import safeattn
from safeattn.kernels import launch

pytestmark = pytest.mark.skipif(
    not launch.INTERPRET and not torch.cuda.is_available(),
    reason="the operators run the Triton kernels: set TRITON_INTERPRET=1 on a CPU",
)


def _qkv(device, b=2, hq=4, hkv=2, n=40, d=16, seed=0):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    shapes = ((b, hq, n, d), (b, hkv, n, d), (b, hkv, n, d))
    return [torch.randn(s, generator=gen).to(device).requires_grad_() for s in shapes]


def _padding(device, b=2, n=40, pads=(0, 7)):
    keep = torch.ones(b, n, dtype=torch.bool)
    for i, p in enumerate(pads):
        keep[i, :p] = False
    return keep.to(device)


def _causal_sdpa_mask(keep):
    n = keep.shape[1]
    tril = torch.ones(n, n, dtype=torch.bool, device=keep.device).tril()
    return keep[:, None, None, :] & tril  # (B, 1, N, N), as transformers passes it


CASES = {
    "causal": lambda q, k, v, keep: safeattn.attention(q, k, v, causal=True),
    "window_lse": lambda q, k, v, keep: safeattn.attention(
        q, k, v, causal="bottom_right", window=(5, 0), return_lse=True
    )[0],
    "key_mask": lambda q, k, v, keep: safeattn.attention(q, k, v, causal=True, key_mask=keep),
    "sdpa_bool_mask": lambda q, k, v, keep: safeattn.scaled_dot_product_attention(
        q, k, v, attn_mask=_causal_sdpa_mask(keep), enable_gqa=True
    ),
    "deterministic": lambda q, k, v, keep: safeattn.attention(q, k, v, deterministic=True),
    "softcap": lambda q, k, v, keep: safeattn.attention(
        q, k, v, causal=True, key_mask=keep, softcap=5.0
    ),
}


def _grads(fn, q, k, v, keep):
    for t in (q, k, v):
        t.grad = None
    out = fn(q, k, v, keep)
    out.backward(torch.ones_like(out))
    return out.detach(), [t.grad.clone() for t in (q, k, v)]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("case", list(CASES))
def test_fullgraph_matches_eager(case, device):
    """One graph, no break; forward and gradients identical to eager (the same kernels)."""
    fn = CASES[case]
    q, k, v = _qkv(device)
    keep = _padding(device)
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    out_c, grads_c = _grads(compiled, q, k, v, keep)
    out_e, grads_e = _grads(fn, q, k, v, keep)
    assert dict(counters["graph_break"]) == {}
    assert counters["stats"]["unique_graphs"] == 1
    torch.testing.assert_close(out_c, out_e, rtol=0, atol=0)
    for gc, ge in zip(grads_c, grads_e, strict=True):
        torch.testing.assert_close(gc, ge, rtol=0, atol=0)


def test_varlen_fullgraph(device):
    lens = [5, 0, 17, 9]
    cu = torch.tensor([0, 5, 5, 22, 31], dtype=torch.int32, device=device)
    gen = torch.Generator(device="cpu").manual_seed(3)
    q, k, v = (torch.randn(sum(lens), 4, 16, generator=gen).to(device).requires_grad_()
               for _ in range(3))  # fmt: skip

    def fn(q, k, v, cu):
        return safeattn.varlen_attention(q, k, v, cu, cu, max(lens), max(lens), causal=True)

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    out_c = compiled(q, k, v, cu)
    out_e = fn(q, k, v, cu)
    torch.testing.assert_close(out_c, out_e, rtol=0, atol=0)
    out_c.sum().backward()
    assert torch.isfinite(q.grad).all() and dict(counters["graph_break"]) == {}


def test_dynamic_shapes_one_graph_and_masks_read_each_call(device):
    """dynamic=True: new lengths reuse the graph; the padding mask is a graph input, so a
    different mask (or the same tensor written in place) takes effect. (Lengths of one
    block-mask tile would compile a second graph: PyTorch specialises size-1 dimensions.)"""

    def fn(q, k, v, keep):
        return safeattn.attention(q, k, v, causal=True, key_mask=keep)

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager", dynamic=True)
    for n, pads in ((40, (0, 7)), (56, (3, 30)), (88, (88, 1))):
        q, k, v = _qkv(device, n=n)
        keep = _padding(device, n=n, pads=pads)
        torch.testing.assert_close(compiled(q, k, v, keep), fn(q, k, v, keep), rtol=0, atol=0)
        keep[0, :5] = False  # in place
        torch.testing.assert_close(compiled(q, k, v, keep), fn(q, k, v, keep), rtol=0, atol=0)
    assert counters["stats"]["unique_graphs"] == 1
    assert dict(counters["graph_break"]) == {}


def test_inductor_fuses_around_the_operator(device, monkeypatch):
    # Inductor's CPU C++ build imports setuptools; if an earlier test imported the stdlib's
    # distutils (asv, virtualenv), setuptools' distutils shim asserts. Use the stdlib's.
    monkeypatch.setenv("SETUPTOOLS_USE_DISTUTILS", "stdlib")

    def fn(q, k, v):
        return torch.nn.functional.gelu(safeattn.attention(q, k, v, causal=True)) * 2.0

    q, k, v = _qkv(device)
    compiled = torch.compile(fn, fullgraph=True)
    out = compiled(q, k, v)
    torch.testing.assert_close(out, fn(q, k, v), rtol=1e-5, atol=1e-6)
    out.sum().backward()
    assert torch.isfinite(q.grad).all()


def test_export_carries_the_operator(device):
    class Attn(torch.nn.Module):
        def forward(self, q, k, v, keep):
            return safeattn.attention(q, k, v, causal=True, key_mask=keep)

    q, k, v = (t.detach() for t in _qkv(device))
    keep = _padding(device)
    program = torch.export.export(Attn(), (q, k, v, keep))
    targets = [n.target for n in program.graph.nodes if n.op == "call_function"]
    assert torch.ops.safeattn.attn_fwd.default in targets
    want = Attn()(q, k, v, keep)
    torch.testing.assert_close(program.module()(q, k, v, keep), want, rtol=0, atol=0)


def test_opcheck(device):
    """torch.library's own consistency checks: schema, fake (meta) implementation, autograd
    registration, against real calls of the forward operator (masked, with tiles)."""
    from safeattn import blockmask
    from safeattn._inputs import check_attention
    from safeattn.kernels import ops  # noqa: F401  (registers the operators when run alone)

    q, k, v = _qkv(device, n=24)
    keep = _padding(device, n=24, pads=(0, 9))
    p = check_attention(q, k, v, causal=True, key_mask=keep)
    s = blockmask.summary_for(p)
    tiles = [s.kv_full_num, s.kv_full_idx, s.kv_part_num, s.kv_part_idx,
             s.q_full_num, s.q_full_idx, s.q_part_num, s.q_part_idx]  # fmt: skip
    seed = torch.tensor([1234], dtype=torch.int64, device=device)
    for softcap, dropout_p in ((0.0, 0.0), (5.0, 0.0), (0.0, 0.2)):
        args = (q, k, v, keep, None, None, None, seed if dropout_p else None, tiles, False, 2,
                24, 24, False, -1, 0, 0, p.scale, softcap, False, s.block_q, s.block_k,
                dropout_p)  # fmt: skip
        torch.library.opcheck(torch.ops.safeattn.attn_fwd.default, args)
