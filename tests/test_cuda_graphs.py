"""safeattn inside CUDA graphs: forward and backward captured once by ``torch.cuda.graph``,
replayed on new data, bitwise equal to eager calls on the same data.

GPU tests (``pytest --gpu``, marked ``gpu``) follow PyTorch's whole-network recipe: warm up
on a side stream (that compiles and tunes every kernel, which a capture cannot), set the
leaves' ``.grad`` to None so that the captured backward allocates the gradients from the
graph's pool, capture ``(out * grad).sum().backward()``, then copy each new batch into the
static tensors and replay. The graph and the eager call launch the same kernels with the
same configs (the tuner's choice is shared) and the kernels use no atomics, so outputs and
gradients must be bitwise equal (``torch.equal``), also when a mask changes between replays:
its tile summary is rebuilt inside the graph.

The other tests run anywhere (CPU under Triton's interpreter): they check the capture-time
logic with the capture faked by monkeypatch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

import safeattn
from safeattn import _inputs, api, blockmask
from safeattn.kernels import launch

# --------------------------------------------------------------------------- GPU cases

B, H, D = 2, 4, 64
N = 300  # not a multiple of any block: tail tiles on both axes
N_ALIGNED = 256
# Left padding per batch element, by seed: seed 0 is captured, 1 and 2 are replayed. Seed 1
# pads element 0 entirely (every row empty: out 0, no gradient).
PADS = {0: (0, 37), 1: (N, 5), 2: (130, 0)}
# varlen: three sequences packed into 600 tokens (max length 300), zero-length included.
DOC_LENS = {0: (256, 44, 300), 1: (300, 300, 0), 2: (100, 200, 300)}


def _gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def _dense(seed: int, dtype, n: int = N, heads_kv: int = H) -> tuple:
    """q (B, H, n, D), k and v (B, heads_kv, n, D), upstream gradient like q."""
    gen = _gen(seed)

    def randn(heads: int):
        return torch.randn(B, heads, n, D, device="cuda", dtype=dtype, generator=gen)

    return randn(H), randn(heads_kv), randn(heads_kv), randn(H)


def _keep(pads: tuple[int, ...], n: int = N) -> torch.Tensor:
    """(B, n) bool, True = real token: element b loses its first pads[b] keys."""
    pad = torch.tensor(pads, device="cuda")
    return torch.arange(n, device="cuda")[None, :] >= pad[:, None]


def _causal_and_kept(keep: torch.Tensor) -> torch.Tensor:
    """(B, 1, N, N) bool, causal & key kept: the mask transformers passes to SDPA."""
    n = keep.shape[1]
    tril = torch.ones(n, n, dtype=torch.bool, device="cuda").tril()
    return tril[None, None] & keep[:, None, None, :]


def _packed(seed: int, dtype) -> tuple:
    """q, k, v (600, H, D), upstream gradient like q, int32 cu_seqlens (4,)."""
    gen = _gen(seed)
    total = sum(DOC_LENS[0])
    q, k, v, grad = (torch.randn(total, H, D, device="cuda", dtype=dtype, generator=gen)
                     for _ in range(4))  # fmt: skip
    lens = torch.tensor((0, *DOC_LENS[seed]), device="cuda", dtype=torch.int32)
    return q, k, v, grad, lens.cumsum(0, dtype=torch.int32)


@dataclass(frozen=True)
class Case:
    """make(seed) -> (q, k, v, grad, *masks): new CUDA tensors, the same shapes for every
    seed. call(q, k, v, *masks) -> out: what is captured and what the eager run calls.
    prepare(*static masks) -> a call to capture instead, built before the capture."""

    make: Callable[[int], tuple]
    call: Callable
    prepare: Callable | None = None


def _attention(**kw) -> Callable:
    return lambda q, k, v: safeattn.attention(q, k, v, **kw)


def _with_key_mask(q, k, v, keep):
    return safeattn.attention(q, k, v, causal=True, key_mask=keep)


def _block_mask_per_call(q, k, v, keep):
    bm = safeattn.block_mask(N, N, causal=True, key_mask=keep)
    return safeattn.attention(q, k, v, block_mask=bm)


def _block_mask_before_capture(keep):
    bm = safeattn.block_mask(N, N, causal=True, key_mask=keep)  # a snapshot of this mask
    return lambda q, k, v, keep: safeattn.attention(q, k, v, block_mask=bm)


def _varlen(q, k, v, cu):
    return safeattn.varlen_attention(q, k, v, cu, cu, N, N, causal=True)


def _sdpa(q, k, v, mask):
    return safeattn.scaled_dot_product_attention(q, k, v, attn_mask=mask)


bf16, fp16 = torch.bfloat16, torch.float16
CASES: dict[str, Case] = {
    "dense-bf16": Case(lambda s: _dense(s, bf16, N_ALIGNED), _attention()),
    "dense-fp16": Case(lambda s: _dense(s, fp16, N_ALIGNED), _attention()),
    "causal-bf16": Case(lambda s: _dense(s, bf16), _attention(causal=True)),
    "key_mask-bf16": Case(lambda s: (*_dense(s, bf16), _keep(PADS[s])), _with_key_mask),
    "key_mask-fp16": Case(lambda s: (*_dense(s, fp16), _keep(PADS[s])), _with_key_mask),
    "window-bf16": Case(lambda s: _dense(s, bf16), _attention(causal=True, window=(64, 0))),
    "varlen-bf16": Case(lambda s: _packed(s, bf16), _varlen),
    "sdpa_bool_mask-bf16": Case(
        lambda s: (*_dense(s, bf16), _causal_and_kept(_keep(PADS[s]))), _sdpa
    ),
    "gqa_key_mask-bf16": Case(
        lambda s: (*_dense(s, bf16, heads_kv=2), _keep(PADS[s])), _with_key_mask
    ),
    # Built inside the captured call: rebuilt from the new mask on every replay.
    "block_mask_in_capture-bf16": Case(
        lambda s: (*_dense(s, bf16), _keep(PADS[s])), _block_mask_per_call
    ),
    # Built before the capture: its tiles are fixed, so every seed has the same padding.
    "block_mask_before_capture-bf16": Case(
        lambda s: (*_dense(s, bf16), _keep(PADS[1])), _with_key_mask, _block_mask_before_capture
    ),
}


def _capture(call: Callable, static: tuple):
    """Warm up, then capture forward and backward of ``call`` on the static tensors.
    Returns (graph, out, (dq, dk, dv)): the graph's static output and gradients."""
    q, k, v, grad, *masks = static

    def step():
        out = call(q, k, v, *masks)
        (out * grad).sum().backward()
        return out

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # compiles and tunes every kernel: never inside the capture
            for t in (q, k, v):
                t.grad = None
            step()
    torch.cuda.current_stream().wait_stream(side)
    for t in (q, k, v):
        t.grad = None  # the captured backward then allocates .grad from the graph's pool
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    return graph, out, (q.grad, k.grad, v.grad)


def _load(static: tuple, new: tuple) -> None:
    with torch.no_grad():
        for dst, src in zip(static, new, strict=True):
            dst.copy_(src)


def _eager(call: Callable, data: tuple):
    """Forward and backward of ``call`` on fresh leaves holding ``data``."""
    q, k, v, grad, *masks = data
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    out = call(q, k, v, *masks)
    (out * grad).sum().backward()
    return out.detach(), (q.grad, k.grad, v.grad)


def _mismatch(got: torch.Tensor, want: torch.Tensor) -> str | None:
    """None if bitwise equal, else where and how much they differ."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"shape/dtype {tuple(got.shape)} {got.dtype} != {tuple(want.shape)} {want.dtype}"
    if torch.equal(got, want):
        return None
    differ = (got != want) & ~(got.isnan() & want.isnan())
    if not differ.any():  # NaN in the same places, equal elsewhere
        return None
    first = torch.nonzero(differ)[0].tolist()
    diff = (got.float() - want.float()).abs()
    return (
        f"{int(differ.sum())} of {got.numel()} elements differ, first at {first} "
        f"({got[tuple(first)].item()} vs {want[tuple(first)].item()}), max abs diff "
        f"{diff.nan_to_num(float('inf')).max().item()}; NaN got/want "
        f"{int(got.isnan().sum())}/{int(want.isnan().sum())}"
    )


def _assert_same(what: str, got_out, got_grads, want_out, want_grads) -> None:
    problems = []
    for name, got, want in zip(("out", "dq", "dk", "dv"), (got_out, *got_grads),
                               (want_out, *want_grads), strict=True):  # fmt: skip
        if got is None or want is None:
            problems.append(f"{name}: gradient missing (graph {got is None}, eager {want is None})")
            continue
        problem = _mismatch(got, want)
        if problem:
            problems.append(f"{name}: {problem}")
    assert not problems, f"{what}: replay != eager\n  " + "\n  ".join(problems)


# The first case tunes by timing in its warm-up (as a user's would); the others take the
# first fitting config (SAFEATTN_AUTOTUNE=0): a capture reuses whatever the warm-up chose,
# and timing every candidate of every case would only add minutes of compiling.
TIMED_TUNING = "dense-bf16"


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(CASES))
def test_replay_matches_eager(name, device, monkeypatch):
    if name != TIMED_TUNING:
        monkeypatch.setenv("SAFEATTN_AUTOTUNE", "0")
    case = CASES[name]
    static = case.make(0)
    q, k, v, _, *masks = static
    for t in (q, k, v):
        t.requires_grad_(True)
    call = case.prepare(*masks) if case.prepare else case.call
    graph, out, grads = _capture(call, static)
    for seed in (1, 2):
        new = case.make(seed)
        _load(static, new)
        graph.replay()
        want_out, want_grads = _eager(case.call, new)
        torch.cuda.synchronize()
        assert torch.isfinite(out).all(), f"{name} seed {seed}: non-finite output"
        _assert_same(f"{name} seed {seed}", out, grads, want_out, want_grads)


@pytest.mark.gpu
def test_nan_in_padded_positions_stays_out_under_replay(device, monkeypatch):
    """Contract item 2 in a graph: NaN written into the padded (excluded) key and value
    positions before a replay changes nothing: output and gradients are bitwise those of an
    eager run with zeros there; element 0 of seed 1 (all padding) gives exact zeros."""
    monkeypatch.setenv("SAFEATTN_AUTOTUNE", "0")  # as in test_replay_matches_eager
    case = CASES["key_mask-bf16"]
    static = case.make(0)
    for t in static[:3]:
        t.requires_grad_(True)
    graph, out, grads = _capture(case.call, static)
    for seed in (1, 2):
        q, k, v, grad, keep = case.make(seed)
        padded = ~keep[:, None, :, None]  # (B, 1, N, 1): broadcast over heads and D
        poisoned = (q, k.masked_fill(padded, float("nan")), v.masked_fill(padded, float("nan")),
                    grad, keep)  # fmt: skip
        clean = (q, k.masked_fill(padded, 0.0), v.masked_fill(padded, 0.0), grad, keep)
        _load(static, poisoned)
        graph.replay()
        want_out, want_grads = _eager(case.call, clean)
        torch.cuda.synchronize()
        for name, t in zip(("out", "dq", "dk", "dv"), (out, *grads), strict=True):
            assert torch.isfinite(t).all(), f"seed {seed}: NaN reached {name}"
        _assert_same(f"NaN-padded seed {seed}", out, grads, want_out, want_grads)
        if seed == 1:  # element 0 is all padding: every row empty
            assert not out[0].any() and not grads[0][0].any(), "empty rows are not exactly 0"


@pytest.mark.gpu
def test_capture_without_warm_up_raises_a_clear_error(device, monkeypatch):
    """No tuned config during a capture: a RuntimeError naming the warm-up, not a CUDA
    error from timing candidates inside the capture."""
    monkeypatch.setattr(launch, "_CHOSEN", {})  # nothing tuned, whatever ran before
    q, k, v, _ = _dense(0, bf16)
    graph = torch.cuda.CUDAGraph()
    expected = r"(?s)no config chosen yet.*HINT: run the captured"
    with pytest.raises(RuntimeError, match=expected), torch.cuda.graph(graph):
        scaled = q * 1.0  # a kernel recorded before the failure (an empty graph warns)
        safeattn.attention(scaled, k, v, causal=True)
    del graph
    out = safeattn.attention(q, k, v, causal=True)  # the device is still usable
    assert torch.isfinite(out).all()


# --------------------------------------------------------------------------- anywhere


@pytest.fixture
def tuner(monkeypatch):
    """The launcher as on a GPU (no interpreter), with an empty tuner state, a fake
    ``_choose`` that records its calls, and the capture state under the test's control."""
    state = SimpleNamespace(capturing=False, chosen=[])
    monkeypatch.setattr(launch, "INTERPRET", False)
    monkeypatch.setattr(launch, "_CHOSEN", {})
    monkeypatch.setattr(launch, "_TIMINGS", {})
    monkeypatch.setattr(launch, "_LAUNCHED", {})
    monkeypatch.setattr(launch, "_SOURCES", {})
    monkeypatch.setattr(launch, "_gpu_names", lambda index: ("fake-gpu", "sm90"))
    monkeypatch.setattr(launch, "capturing", lambda device: state.capturing)

    def choose(name, *args):
        state.chosen.append(name)
        return launch.configs.candidates(name, 64, torch.bfloat16)[0], "tuned", []

    monkeypatch.setattr(launch, "_choose", choose)
    return state


class _FakeKernel:
    """``fn[grid](*args, **constexprs)`` that records launches, or raises ``error``."""

    def __init__(self, error: Exception | None = None):
        self.error = error
        self.launches = 0

    def __getitem__(self, grid):
        def run(*args, **constexprs):
            if self.error is not None:
                raise self.error
            self.launches += 1
            return SimpleNamespace(metadata=SimpleNamespace(shared=0), n_regs=32, n_spills=0)

        return run


def _meta(**overrides) -> launch.Meta:
    fields = dict(varlen=False, batch=2, heads_q=4, heads_kv=4, seq_q=300, seq_k=300,
                  head_dim=64, bottom_right=False, window_left=-1, window_right=0,
                  has_key_mask=True, mask_kind=0, scale=0.125, deterministic=False)  # fmt: skip
    return launch.Meta(**(fields | overrides))


def _launch(fn, meta: launch.Meta | None = None):
    meta = meta or _meta()
    grid = lambda cfg: (1, 1)
    cuda = torch.device("cuda", 0)  # a device object only: nothing runs on it
    return launch._launch("forward", fn, grid, (), meta, torch.bfloat16, cuda, 300, 300)


def test_capture_reuses_the_config_chosen_by_the_warm_up(tuner):
    kernel = _FakeKernel()
    warm = _launch(kernel)  # eager: chooses
    tuner.capturing = True
    captured = _launch(kernel)  # same problem in a capture: reuses, chooses nothing
    assert captured == warm and tuner.chosen == ["forward"] and kernel.launches == 2


def test_untuned_kernel_in_capture_raises_instead_of_tuning(tuner):
    tuner.capturing = True
    kernel = _FakeKernel()
    with pytest.raises(RuntimeError) as info:
        _launch(kernel, _meta(head_dim=40, window_left=16))
    message = str(info.value)
    assert tuner.chosen == [] and kernel.launches == 0, "tuned or launched during a capture"
    assert "forward kernel has no config chosen yet" in message
    assert "head_dim=40" in message and "window=(16, 0)" in message
    assert "HINT: run the captured code once eagerly before capturing" in message


def test_launch_failing_in_capture_names_the_warm_up(tuner):
    _launch(_FakeKernel())  # tuned (eagerly)
    tuner.capturing = True
    cuda_error = RuntimeError(
        "Triton Error [CUDA]: operation not permitted when stream is capturing"
    )
    with pytest.raises(RuntimeError, match=r"(?s)failed during CUDA graph capture.*HINT") as info:
        _launch(_FakeKernel(cuda_error))
    assert info.value.__cause__ is cuda_error


def test_launch_failing_outside_capture_is_not_rewritten(tuner):
    _launch(_FakeKernel())
    other = ValueError("some compiler error")
    with pytest.raises(ValueError) as info:
        _launch(_FakeKernel(other))
    assert info.value is other


def _small(device):
    """Shapes for the eager-path tests: the GPU cases' on a GPU (kernels already compiled by
    them), interpreter-sized on a CPU."""
    if device == "cuda":
        q, k, v, _ = _dense(0, bf16)
        return q, k, v, _keep(PADS[0])
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 40, 16, generator=gen) for _ in range(3))
    keep = torch.ones(2, 40, dtype=torch.bool)
    keep[1, :13] = False
    return q, k, v, keep


needs_kernels = pytest.mark.skipif(
    not launch.INTERPRET and not torch.cuda.is_available(),
    reason="runs the Triton kernels: set TRITON_INTERPRET=1 on a CPU",
)


@needs_kernels
def test_masks_are_summarised_per_call_while_capturing(device, monkeypatch):
    """In a capture the summary is built in the graph (so a replay sees the mask copied in
    before it), never taken from or put into the eager cache."""
    q, k, v, keep = _small(device)
    blockmask.clear_cache()
    want = safeattn.attention(q, k, v, causal=True, key_mask=keep)  # eager: cached
    assert len(blockmask._CACHE) == 1
    built = []

    def in_capture(p):
        built.append(p)
        return summary_in_capture(p)

    def no_cache(*args):
        raise AssertionError("the eager summary cache was consulted during a capture")

    summary_in_capture = blockmask.summary_in_capture
    monkeypatch.setattr(api, "capturing", lambda device: True)
    monkeypatch.setattr(blockmask, "summary_in_capture", in_capture)
    monkeypatch.setattr(blockmask, "cached_summary", no_cache)
    got = safeattn.attention(q, k, v, causal=True, key_mask=keep)
    assert len(built) == 1 and len(blockmask._CACHE) == 1
    assert torch.equal(got, want)


def test_varlen_values_are_trusted_during_capture(device, monkeypatch):
    """Reading cu_seqlens would sync: in a capture only type, shape and device are checked."""
    q = torch.zeros(10, 2, 16, device=device)
    bad = torch.tensor([1, 4, 10], dtype=torch.int32, device=device)  # does not start at 0
    with pytest.raises(ValueError, match="must start at 0"):
        _inputs.check_varlen(q, q, q, bad, bad, 6, 6)
    monkeypatch.setattr(_inputs, "capturing", lambda device: True)
    p = _inputs.check_varlen(q, q, q, bad, bad, 6, 6)
    assert (p.batch, p.seq_q, p.seq_k) == (2, 6, 6)
    with pytest.raises(TypeError, match="int32"):  # what needs no host read is still checked
        _inputs.check_varlen(q, q, q, bad.long(), bad, 6, 6)


def test_block_mask_needs_no_host_read_during_capture(device, monkeypatch):
    _, _, _, keep = _small(device)
    bm = safeattn.block_mask(keep.shape[1], keep.shape[1], causal=True, key_mask=keep)
    assert "tiles={" in repr(bm)
    monkeypatch.setattr(_inputs, "capturing", lambda device: True)
    assert "tiles not counted (CUDA graph capture)" in repr(bm)  # counts() would sync
    with pytest.raises(RuntimeError, match="outside the captured region"):
        bm.summary.counts()
    built = safeattn.block_mask(keep.shape[1], keep.shape[1], causal=True, key_mask=keep)
    assert torch.equal(built.summary.kv_part_idx, bm.summary.kv_part_idx)


def test_summary_failing_in_capture_names_the_way_around(monkeypatch):
    cuda_error = RuntimeError("CUDA error: operation not permitted when stream is capturing")

    def fails(p):
        raise cuda_error

    monkeypatch.setattr(blockmask, "summary_for", fails)
    with pytest.raises(RuntimeError, match=r"(?s)summary.*inside CUDA graph.*block_mask=bm"):
        blockmask.summary_in_capture(None)
