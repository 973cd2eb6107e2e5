"""Block masks (safeattn.blockmask): the tile summary, and the kernels' tile lists.

The summary is checked tile by tile against a brute-force classification of the element mask;
the kernels against the fp64 reference and against the contract's items 1-3 in each kind of
tile (*empty*, *partial*, *full*). CPU: the interpreter, whose summary tile is 32 (shapes
below cross several); ``--gpu``: tile 128 at larger shapes.
"""

from __future__ import annotations

import pytest
import torch
from test_kernels import DT_IDS, DTYPES, check_against_reference, fwd_bwd, pick, rand_qkv

import safeattn
from safeattn import blockmask as bm_mod
from safeattn._inputs import allowed_mask, check_attention


def left_padding(b: int, n: int, fractions, device) -> torch.Tensor:
    """(B, N) bool key mask, True = may attend; element i loses fractions[i] of its keys."""
    mask = torch.ones(b, n, dtype=torch.bool)
    for i, f in enumerate(fractions):
        mask[i, : int(f * n)] = False
    return mask.to(device)


def brute_force_tiles(p, tile: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(full, any) per (B, Hq, tile row, tile col) from the element mask, tails excluded
    from *full* as the kernels require."""
    allowed = allowed_mask(p)
    nqb, nkb = -(-p.seq_q // tile), -(-p.seq_k // tile)
    full = torch.zeros(p.batch, p.heads_q, nqb, nkb, dtype=torch.bool)
    any_ = torch.zeros_like(full)
    for i in range(nqb):
        for j in range(nkb):
            t = allowed[:, :, i * tile : (i + 1) * tile, j * tile : (j + 1) * tile]
            any_[:, :, i, j] = t.flatten(2).any(-1).cpu()
            in_range = (i + 1) * tile <= p.seq_q and (j + 1) * tile <= p.seq_k
            full[:, :, i, j] = t.flatten(2).all(-1).cpu() & in_range
    return full, any_


def decode(num: torch.Tensor, idx: torch.Tensor, shape) -> torch.Tensor:
    """Tile lists back to a bool (…, rows, cols) grid, checking the lists are ascending."""
    grid = torch.zeros(shape, dtype=torch.bool)
    num, idx = num.expand(shape[:-1]).cpu(), idx.expand(shape).cpu()
    for pos in torch.cartesian_prod(*(torch.arange(s) for s in shape[:-1])):
        pos = tuple(pos.tolist())
        listed = idx[pos][: num[pos]].tolist()
        assert listed == sorted(set(listed)), f"list at {pos} not ascending/unique: {listed}"
        grid[pos][listed] = True
    return grid


def problems(device):
    g = torch.Generator().manual_seed(7)
    b, hq, nq, nk = 3, 2, 75, 100
    q = torch.zeros(b, hq, nq, 8, device=device)
    k = torch.zeros(b, 1, nk, 8, device=device)
    pad = left_padding(b, nk, (0.0, 0.3, 1.0), device)
    yield "key_mask_causal", check_attention(q, k, k, causal="bottom_right", key_mask=pad)
    yield "key_mask_window", check_attention(q, k, k, window=(70, 40), key_mask=pad)
    bool_mask = (torch.rand(b, 1, nq, nk, generator=g) > 0.2).to(device)
    bool_mask[:, :, :, :40] = True  # some full tiles
    yield "bool_mask", check_attention(q, k, k, attn_mask=bool_mask)
    bias = torch.randn(1, hq, nq, nk, generator=g)
    bias[0, 1, :, 64:] = float("-inf")
    yield "float_mask_per_head", check_attention(q, k, k, attn_mask=bias.to(device), causal=True)


@pytest.mark.parametrize("case", ["key_mask_causal", "key_mask_window", "bool_mask",
                                  "float_mask_per_head"])  # fmt: skip
def test_summary_matches_brute_force(case, device):
    p = dict(problems(device))[case]
    tile = 32
    s = bm_mod.summarise(
        p.seq_q, p.seq_k, bottom_right=p.bottom_right, window_left=p.window_left,
        window_right=p.window_right, key_mask=p.key_mask, attn_mask=p.attn_mask,
        block_q=tile, block_k=tile, device=p.q.device,
    )  # fmt: skip
    full, any_ = brute_force_tiles(p, tile)
    shape = (p.batch, p.heads_q, *full.shape[2:])
    got_full = decode(s.kv_full_num, s.kv_full_idx, shape)
    got_part = decode(s.kv_part_num, s.kv_part_idx, shape)
    assert torch.equal(got_full, full), "full tiles differ from the element mask"
    assert not (got_full & got_part).any(), "a tile is both full and partial"
    assert not (any_ & ~full & ~got_part).any(), "a tile with allowed pairs is not visited"
    assert full.any() and (any_ & ~full).any(), "case should have full and partial tiles"
    # The transposed lists describe the same tiles.
    t_shape = (p.batch, p.heads_q, shape[3], shape[2])
    assert torch.equal(decode(s.q_full_num, s.q_full_idx, t_shape), got_full.transpose(2, 3))
    assert torch.equal(decode(s.q_part_num, s.q_part_idx, t_shape), got_part.transpose(2, 3))


def test_summary_keeps_broadcast_axes_small(device):
    p = dict(problems(device))["bool_mask"]  # (B, 1, Nq, Nk) mask, Hq = 2
    s = bm_mod.cached_summary(p, p.key_mask, p.attn_mask)
    assert s.kv_full_idx.shape[:2] == (3, 1)


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("mask", ["left_pad_causal", "hf_dense_bool", "float_bias_per_head"])
def test_tiled_masks_match_reference(dtype, mask, device, on_gpu):
    b, hq, hkv, n, d = pick(on_gpu, (3, 4, 2, 97, 32), (3, 8, 2, 1000, 128))
    q, k, v = rand_qkv(b, hq, hkv, n, n, d, dtype, device, seed=21)
    pad = left_padding(b, n, (0.0, 0.45, 1.0), device)  # the last element: every key masked
    if mask == "left_pad_causal":
        check_against_reference(q, k, v, causal=True, key_mask=pad)
    elif mask == "hf_dense_bool":
        causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()
        check_against_reference(q, k, v, attn_mask=causal & pad[:, None, None, :])
    else:
        g = torch.Generator().manual_seed(5)
        bias = torch.randn(1, hq, n, n, generator=g).to(device=device, dtype=dtype)
        bias[0, 0, :, : n // 2] = float("-inf")  # head 0 excludes the first half
        check_against_reference(q, k, v, attn_mask=bias)


def poisoned_run(q, k, v, do, excluded, poison, **kw):
    kp, vp = k.clone(), v.clone()
    kp.transpose(1, 2)[excluded] = poison
    vp.transpose(1, 2)[excluded] = poison
    return fwd_bwd(safeattn.attention, q, kp, vp, do, **kw)


@pytest.mark.parametrize("poison", [float("nan"), float("inf")], ids=str)
def test_excluded_values_in_every_tile_kind(poison, device, on_gpu):
    """NaN/Inf in keys a row may not attend, placed in an *empty* tile (batch element 1's
    padding covers whole tiles), a *partial* tile (its padding ends mid-tile) and in tiles
    that are excluded for one batch element but *full* for another (same key positions,
    element 0 keeps them): every output and gradient stays bitwise identical."""
    b, h, n, d = pick(on_gpu, (2, 2, 96, 16), (2, 4, 768, 64))
    tile = pick(on_gpu, 32, 128)
    q, k, v = rand_qkv(b, h, h, n, n, d, torch.bfloat16, device, seed=22)
    do = torch.randn(q.shape, device=device).to(q.dtype)
    pad = left_padding(b, n, (0.0, (2 * tile + tile // 2) / n), device)
    clean = fwd_bwd(safeattn.attention, q, k, v, do, causal=True, key_mask=pad)
    dirty = poisoned_run(q, k, v, do, ~pad, poison, causal=True, key_mask=pad)
    summary = bm_mod.cached_summary(check_attention(q, k, v, causal=True, key_mask=pad), pad,
                                    None).counts()  # fmt: skip
    assert summary["empty"] and summary["partial"] and summary["full"]
    for name, c, x in zip(("out", "lse", "dq", "dk", "dv"), clean, dirty, strict=True):
        if c is not None:
            assert torch.equal(c, x), f"{name} changed when excluded K/V held {poison}"
            assert torch.isfinite(c).all() or name == "lse"


def test_empty_query_tile_and_included_nan_in_full_tile(device, on_gpu):
    """A mask that empties whole query tiles: those rows are exact zeros with zero gradients.
    A NaN in a value that full-tile rows attend still makes those rows NaN (contract 3)."""
    b, h, n, d = pick(on_gpu, (1, 2, 96, 16), (1, 4, 768, 64))
    tile = pick(on_gpu, 32, 128)
    q, k, v = rand_qkv(b, h, h, n, n, d, torch.float16, device, seed=23)
    do = torch.randn(q.shape, device=device).to(q.dtype)
    mask = torch.ones(b, 1, n, n, dtype=torch.bool, device=device)
    mask[:, :, :tile] = False  # the first query tile attends nothing
    out, lse, dq, dk, dv = fwd_bwd(safeattn.attention, q, k, v, do, attn_mask=mask,
                                   return_lse=True)  # fmt: skip
    assert (out[:, :, :tile] == 0).all() and (dq[:, :, :tile] == 0).all()
    assert (lse[:, :, :tile] == float("-inf")).all()
    assert torch.isfinite(out).all() and torch.isfinite(dk).all() and torch.isfinite(dv).all()
    vp = v.clone()
    vp[0, 0, n - 1, 0] = float("nan")  # in a full tile of every live row
    out2, *_ = fwd_bwd(safeattn.attention, q, k, vp, do, attn_mask=mask)
    assert torch.isnan(out2[0, 0, tile:]).any(dim=-1).all(), "included NaN did not propagate"
    assert (out2[:, :, :tile] == 0).all(), "empty rows changed"


def test_cache_reuses_and_invalidates(device, on_gpu):
    b, h, n, d = pick(on_gpu, (2, 2, 70, 16), (2, 2, 600, 16))
    q, k, v = rand_qkv(b, h, h, n, n, d, torch.float32, device, seed=24)
    pad = left_padding(b, n, (0.0, 0.5), device)
    bm_mod.clear_cache()
    p = check_attention(q, k, v, causal=True, key_mask=pad)
    first = bm_mod.cached_summary(p, pad, None)
    assert bm_mod.cached_summary(p, pad, None) is first, "same mask object: not reused"
    same_values = pad.clone()
    p2 = check_attention(q, k, v, causal=True, key_mask=same_values)
    assert bm_mod.cached_summary(p2, same_values, None) is not first, "identity not checked"
    pad[1, :] = True  # in place: the version counter moves
    rebuilt = bm_mod.cached_summary(check_attention(q, k, v, causal=True, key_mask=pad), pad,
                                    None)  # fmt: skip
    assert rebuilt is not first
    assert rebuilt.counts()["full"] > first.counts()["full"]
    out = safeattn.attention(q, k, v, causal=True, key_mask=pad)
    ref = safeattn.reference.attention(q, k, v, causal=True, key_mask=pad)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_explicit_block_mask_matches_implicit_and_is_deterministic(device, on_gpu):
    b, hq, hkv, n, d = pick(on_gpu, (2, 4, 2, 80, 16), (2, 8, 2, 1000, 64))
    q, k, v = rand_qkv(b, hq, hkv, n, n, d, torch.bfloat16, device, seed=25)
    do = torch.randn(q.shape, device=device).to(q.dtype)
    pad = left_padding(b, n, (0.1, 0.6), device)
    bm = safeattn.block_mask(n, n, causal=True, key_mask=pad)
    assert "tiles=" in repr(bm)
    implicit = fwd_bwd(safeattn.attention, q, k, v, do, causal=True, key_mask=pad)
    explicit = fwd_bwd(safeattn.attention, q, k, v, do, block_mask=bm)
    again = fwd_bwd(safeattn.attention, q, k, v, do, block_mask=bm, deterministic=True)
    again2 = fwd_bwd(safeattn.attention, q, k, v, do, block_mask=bm, deterministic=True)
    for name, a, e, r1, r2 in zip(("out", "lse", "dq", "dk", "dv"), implicit, explicit, again,
                                  again2, strict=True):  # fmt: skip
        if a is not None:
            assert torch.equal(a, e), f"{name}: explicit block mask differs from implicit"
            assert torch.equal(r1, r2), f"{name}: not bitwise reproducible"


def test_sdpa_drop_in_dense_mask_takes_the_tiles(device, on_gpu):
    """What transformers passes: a (B, 1, N, N) bool mask of causal & not-padded."""
    b, h, n, d = pick(on_gpu, (2, 2, 70, 16), (4, 16, 1024, 128))
    q, k, v = rand_qkv(b, h, h, n, n, d, torch.float32, device, seed=26)
    pad = left_padding(b, n, (0.0, 0.4), device)
    mask = torch.ones(n, n, dtype=torch.bool, device=device).tril() & pad[:, None, None, :]
    out = safeattn.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    ref = safeattn.reference.attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=2e-5)
    p = check_attention(q, k, v, attn_mask=mask)
    counts = bm_mod.cached_summary(p, None, mask).counts()
    assert counts["full"] > 0 and counts["empty"] > 0, counts


def test_block_mask_errors(device):
    q, k, v = rand_qkv(1, 2, 2, 40, 40, 16, torch.float32, device, seed=27)
    pad = torch.ones(1, 40, dtype=torch.bool, device=device)
    bm = safeattn.block_mask(40, 40, key_mask=pad)
    with pytest.raises(ValueError, match="together with key_mask"):
        safeattn.attention(q, k, v, block_mask=bm, key_mask=pad)
    with pytest.raises(ValueError, match=r"built for \(Nq, Nk\) = \(40, 40\)"):
        safeattn.attention(q[:, :, :30], k, v, block_mask=bm)
    with pytest.raises(TypeError, match="must be a safeattn BlockMask"):
        safeattn.attention(q, k, v, block_mask=pad)
    with pytest.raises(TypeError, match=r"`key_mask` must have dtype torch\.bool"):
        safeattn.block_mask(40, 40, key_mask=pad.int())
    with pytest.raises(ValueError, match="`seq_q` must be >= 0"):
        safeattn.block_mask(-1, 40)
