"""Backward attention kernels (FlashAttention-2 style recomputation from the saved LSE).

Three launches, none of them with atomics, so gradients are deterministic by construction:
- ``_bwd_preprocess``: delta = rowsum(dO * O) per query row (fp32).
- ``_bwd_dkdv``: one program owns a block of keys of one KV head and loops over every query
  head of its GQA group and every query block that can see those keys; it writes dK, dV once.
- ``_bwd_dq``: one program owns a block of query rows of one query head and loops over keys.

NOTE: empty rows — their saved lse2 is -inf; the backward reads it as +inf so that
``p = exp2(s - lse2)`` is exactly 0. A garbage (NaN/Inf) Q or dO row of an empty row would
still reach dK or dV as ``0 * NaN``: the dK/dV kernel flags its programs whose results came
out non-finite, and a second, guarded launch redoes only those with the empty rows' Q and
dO zeroed (``_bwd_dkdv``).

NOTE: soft-capping — both kernels recompute P from the capped scores (``_softcap``) and the
saved LSE (of the capped scores), and multiply dS by the cap's derivative 1 - tanh² before it
meets K or Q; the preprocess is unchanged (delta = rowsum(dO·O) does not see the scores).

NOTE: excluded keys — ``ds`` is selected with ``tl.where`` on excluded pairs (dP may hold
NaN from an excluded, poisoned V), and the K operand of ``dQ += dS @ K`` has its non-finite
entries zeroed in masked blocks: an included non-finite K already makes the row's dS
non-finite, so nothing that should propagate is lost.

Why one file over ~400 lines: the three launches share the recomputation, the empty-row and
excluded-key conventions above and the forward's helpers, and a change to one is a change
to all; splitting them would put one contract in three places.
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import hopper
from .forward import (
    _allowed_pairs,
    _bias_tile,
    _ids_at,
    _kept,
    _key_ranges,
    _list_start,
    _program_ids,
    _redo_flag,
    _redo_span,
    _rng_width,
    _scores,
    _softcap,
    _tma_store,
    _tma_tile,
)

# hopper.half_partial's threshold, for _dkdv_head (a kernel reads constexpr globals only).
HALF_PARTIAL_ROWS = tl.constexpr(hopper.HALF_PARTIAL_ROWS)


@triton.jit(do_not_specialize=["seq_q"])
def _bwd_preprocess(
    Out,
    dOut,
    Delta,
    CuSeqQ,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_dob, stride_doh, stride_dom, stride_dod,
    stride_lb, stride_lh, stride_lm,
    heads_q,
    seq_q,
    head_dim,
    IS_VARLEN: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
):  # fmt: skip
    """Grid: (cdiv(max Nq, BLOCK_M), B * Hq). Delta[b, h, m] = sum_d dO * O (fp32)."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // heads_q
    h = pid_bh % heads_q
    if IS_VARLEN:
        q_start = tl.load(CuSeqQ + b)
        n_q = tl.load(CuSeqQ + b + 1) - q_start
    else:
        q_start = 0
        n_q = seq_q
    m_start = pid_m * BLOCK_M
    if m_start >= n_q:
        return
    b64 = b.to(tl.int64)
    h64 = h.to(tl.int64)
    offs_m = m_start + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_m < n_q)[:, None] & (offs_d < head_dim)[None, :]
    o_base = Out + b64 * stride_ob + h64 * stride_oh + q_start.to(tl.int64) * stride_om
    do_base = dOut + b64 * stride_dob + h64 * stride_doh + q_start.to(tl.int64) * stride_dom
    o = tl.load(
        o_base + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od, mask=mask, other=0.0
    )
    do = tl.load(
        do_base + offs_m[:, None] * stride_dom + offs_d[None, :] * stride_dod, mask=mask, other=0.0
    )
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    d_base = Delta + b64 * stride_lb + h64 * stride_lh + q_start.to(tl.int64) * stride_lm
    tl.store(d_base + offs_m * stride_lm, delta, mask=offs_m < n_q)


@triton.jit
def _query_ranges(
    n_start,
    n_q,
    n_k,
    diag,
    window_left,
    window_right,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_WINDOW_LEFT: tl.constexpr,
    HAS_WINDOW_RIGHT: tl.constexpr,
):
    """Query-block boundaries that can see keys [n_start, n_start + BLOCK_N) in a call
    without key_mask / attn_mask (those take the tile lists of ``safeattn.block_mask``):
    [lo, full_lo) masked, [full_lo, full_hi) fully allowed, [full_hi, hi) masked.
    Key j is allowed for row i iff  j - diag - right <= i <= j - diag + left."""
    n_last = n_start + BLOCK_N - 1
    lo = 0
    hi = n_q
    if HAS_WINDOW_RIGHT:
        lo = tl.maximum(n_start - diag - window_right, 0)
        lo = tl.minimum(lo, hi)
        lo = (lo // BLOCK_M) * BLOCK_M
    if HAS_WINDOW_LEFT:
        hi = tl.minimum(hi, tl.maximum(n_last - diag + window_left + 1, 0))
    full_lo = lo
    full_hi = (n_q // BLOCK_M) * BLOCK_M
    if HAS_WINDOW_RIGHT:
        first_full = tl.maximum(n_last - diag - window_right, 0)
        full_lo = tl.maximum(full_lo, ((first_full + BLOCK_M - 1) // BLOCK_M) * BLOCK_M)
    if HAS_WINDOW_LEFT:
        last_full = tl.maximum(n_start - diag + window_left + 1, 0)
        full_hi = tl.minimum(full_hi, (last_full // BLOCK_M) * BLOCK_M)
    if n_start + BLOCK_N > n_k:
        full_hi = lo
    full_lo = tl.minimum(full_lo, hi)
    full_hi = tl.maximum(tl.minimum(full_hi, hi), full_lo)
    return lo, full_lo, full_hi, hi


@triton.jit
def _dkdv_step(
    dk,
    dv,
    k,
    v,
    q_base,
    do_base,
    lse_base,
    delta_base,
    km_base,
    am_base,
    DescQ,
    DescdO,
    q_b,
    q_h,
    start_m,
    offs_n,
    offs_m0,
    offs_d,
    n_q,
    n_k,
    diag,
    window_left,
    window_right,
    qk_scale,
    softcap,
    head_dim,
    stride_qm,
    stride_qd,
    stride_dom,
    stride_dod,
    stride_lm,
    stride_kmn,
    stride_amm,
    stride_amn,
    MASKED: tl.constexpr,
    GUARD: tl.constexpr,
    HAS_WINDOW_LEFT: tl.constexpr,
    HAS_WINDOW_RIGHT: tl.constexpr,
    HAS_KEY_MASK: tl.constexpr,
    MASK_KIND: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    EVEN_D: tl.constexpr,
    USE_TMA: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    rng_seed,
    rng_base,
    rng_stride,
    dropout_p,
    HAS_DROPOUT: tl.constexpr,
    FOLD_DELTA: tl.constexpr,
    PAIR_STATS: tl.constexpr,
    PART: tl.constexpr = 0,
):
    """One query block [start_m, start_m + BLOCK_M) into dK, dV. MASKED=False is the plain
    path: every pair of the block may attend and every row and key is in range. USE_TMA:
    the Q and dO tiles through DescQ/DescdO at (q_b, q_h, start_m), out-of-bounds read as 0
    as the masked loads give (forward.py's ``_fwd_step``). PART (``_bwd_dkdv``): 0 both,
    1 dV alone (no dP, dS), 2 dK alone (no P^T dO)."""
    # NOTE: PAIRED — the plain steps load each row's LSE and delta in one load, a (BLOCK_M, 2)
    # tile of pointers into both, which Triton's pipeliner brings by one cp.async a stage
    # ahead where it brought two. Measured on the H200 (session_pairs_2026-12-03): Hopper
    # D = 64 causal backward 6-10 % faster (bf16; GQA 4 too), the dense ones 0.3-3 % slower
    # (GQA 4: 7 more registers), hence only in calls with masked steps (a window, causal, a
    # mask). Not with FOLD_DELTA: delta then feeds only dP's accumulator, which the pipeliner
    # does not prefetch for, and paired it did (D = 128: 20+ more registers, spills in the
    # causal builds, wgmma serialised at M64-N64-w4-s2, dense backward 5-19 % slower). Nor in
    # the guarded redo, which runs rarely and spilled paired (D = 64 causal: 8 B). PAIR_STATS:
    # the host's per-config rule (hopper.pair_stats: the GPU, BLOCK_N, the stages).
    PAIRED: tl.constexpr = (
        PAIR_STATS
        and (not (FOLD_DELTA or GUARD))
        and (HAS_WINDOW_LEFT or HAS_WINDOW_RIGHT or HAS_KEY_MASK or MASK_KIND != 0)
    )
    mask_d = offs_d < head_dim
    offs_m = start_m + offs_m0
    if USE_TMA:
        q = _tma_tile(DescQ, q_b, q_h, start_m)
        do = _tma_tile(DescdO, q_b, q_h, start_m)
    else:
        q_ptrs = q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd
        do_ptrs = do_base + offs_m[:, None] * stride_dom + offs_d[None, :] * stride_dod
        if MASKED:
            qd_mask = (offs_m < n_q)[:, None] & mask_d[None, :]
            q = tl.load(q_ptrs, mask=qd_mask, other=0.0)
            do = tl.load(do_ptrs, mask=qd_mask, other=0.0)
        elif EVEN_D:
            q = tl.load(q_ptrs)
            do = tl.load(do_ptrs)
        else:
            q = tl.load(q_ptrs, mask=mask_d[None, :], other=0.0)
            do = tl.load(do_ptrs, mask=mask_d[None, :], other=0.0)
    if MASKED:
        row_mask = offs_m < n_q
        lse2 = tl.load(lse_base + offs_m * stride_lm, mask=row_mask, other=float("-inf"))
        delta = tl.load(delta_base + offs_m * stride_lm, mask=row_mask, other=0.0)
        live = lse2 != float("-inf")
        delta = tl.where(live, delta, 0.0)
        if GUARD:
            # NOTE: empty rows (module docstring).
            q = tl.where(live[:, None], q, 0.0)
            do = tl.where(live[:, None], do, 0.0)
    elif PAIRED:
        pair = tl.load(tl.join(lse_base + offs_m * stride_lm, delta_base + offs_m * stride_lm))
        lse2, delta = tl.split(pair)
    else:
        lse2 = tl.load(lse_base + offs_m * stride_lm)
        delta = tl.load(delta_base + offs_m * stride_lm)
    lse2 = tl.where(lse2 == float("-inf"), float("inf"), lse2)
    # NOTE: register budget — delta varies along the columns of these transposed tiles, so
    # its broadcast costs a thread as many registers as it holds columns (16 of a 64-wide
    # tile). FOLD_DELTA: it starts dP's accumulator instead of staying live (not under
    # dropout, where dP is masked and rescaled before delta meets it). The LSE was folded
    # too, as (s - lse2/c)·c, until the H100 showed dV beyond the accuracy contract with
    # logits ~1e5 (D=128: its accumulator then starts near -s_max, where P needs every bit).
    # NOTE: register budget of the bool-mask steps (fp16/bf16: MARK) — the mask is made before
    # the scores' product (a mask tile's load overlaps it), and past P it lives on only as the
    # sign of P's zeros: an excluded pair's P is -0.0, which _marked_excluded finds for dS's
    # select. Kept as a bool tile across the dV and dP products, the bool-mask build (Hopper
    # M64-N64-w4-s2, D=128) spilled 24 B; made first and marked, none (sm90, triton 3.6, CUDA
    # 13.0's ptxas; live_static_sm90.py). Only there: the other masked builds need no relief,
    # and marked they ran slower on the H200 (dK/dV kernel, bf16: key padding + causal +2 % at
    # D=64 and +5 % at D=128, packed documents +2-3 %, windows +0.9 % / -2.2 %;
    # docs/perf/session_mark_2026-12-02). fp32 keeps the order and the bool tile it was
    # verified with: marked, its dV missed the contract's bound in one case (trainable_bias
    # fp32, 2.72e-6 > 1.89e-6, H200).
    MARK: tl.constexpr = MASKED and DOT_PRECISION != "ieee" and MASK_KIND == 1
    if MARK:
        allowed, bias = _allowed_pairs(
            offs_m, offs_n, n_q, n_k, diag, window_left, window_right,
            km_base, stride_kmn, am_base, stride_amm, stride_amn,
            HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT, HAS_KEY_MASK, MASK_KIND,
        )  # fmt: skip
    sT = _scores(k, q, DOT_PRECISION, UPCAST_DOT) * qk_scale
    if HAS_SOFTCAP:
        # NOTE: soft-capping (forward.py): P from the capped scores, as the forward saw them.
        sT, tT = _softcap(sT, softcap)
    if MASKED:
        if not MARK:
            allowed, bias = _allowed_pairs(
                offs_m, offs_n, n_q, n_k, diag, window_left, window_right,
                km_base, stride_kmn, am_base, stride_amm, stride_amn,
                HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT, HAS_KEY_MASK, MASK_KIND,
            )  # fmt: skip
        allowedT = tl.trans(allowed)
        if MASK_KIND == 2:
            sT = sT + tl.trans(bias)
        sT = tl.where(allowedT, sT, float("-inf"))
    elif MASK_KIND == 2:
        # NOTE: full tiles of an additive mask (forward.py): the bias applies unselected.
        sT = sT + tl.trans(_bias_tile(am_base, offs_m, offs_n, stride_amm, stride_amn))
    # The LSE after the mask and the bias, as the dQ kernel: 61d2547 subtracted it first (for
    # the LSE fold), and two fp32 dV accuracy tests failed on the H100 until it moved back.
    pT = tl.math.exp2(sT - lse2[None, :])
    if MASKED:
        # An excluded pair's P exactly 0 even where the row's LSE is NaN (a row that attends a
        # NaN key): exp2(-inf - NaN) is NaN, and such a row adds NaN only to keys it attends.
        pT = tl.where(allowedT, pT, _negative_zero() if MARK else 0.0)
    pT_v = pT
    if HAS_DROPOUT:
        # NOTE: dropout (forward.py): the forward's mask, transposed; dV is scaled at the end.
        keptT = tl.trans(_kept(rng_seed, rng_base, rng_stride, offs_m, offs_n, dropout_p))
        pT_v = tl.where(keptT, pT, 0.0)
    if PART != 2:
        if UPCAST_DOT == 2:
            dv = tl.dot(pT_v, do.to(tl.float32), dv, input_precision=DOT_PRECISION)
        else:
            dv = tl.dot(pT_v.to(do.dtype), do, dv, input_precision=DOT_PRECISION)
    if PART == 1:
        return dk, dv
    if FOLD_DELTA and not HAS_DROPOUT:
        dsT = pT * _scores_plus(v, do, -delta, DOT_PRECISION, UPCAST_DOT)
    else:
        dpT = _scores(v, do, DOT_PRECISION, UPCAST_DOT)
        if HAS_DROPOUT:
            dpT = tl.where(keptT, dpT * (1.0 / (1.0 - dropout_p)), 0.0)
        dsT = pT * (dpT - delta[None, :])
    if HAS_SOFTCAP:
        # d(cap·tanh(x/cap))/dx = 1 - tanh²: dS of the raw scores, before the where below
        # (an excluded pair's tanh may be NaN; the where selects 0 there).
        dsT = dsT * (1.0 - tT * tT)
    if MARK:
        dsT = tl.where(_marked_excluded(pT), 0.0, dsT)
    elif MASKED:
        dsT = tl.where(allowedT, dsT, 0.0)
    if UPCAST_DOT == 2:
        dk = tl.dot(dsT, q.to(tl.float32), dk, input_precision=DOT_PRECISION)
    else:
        dk = tl.dot(dsT.to(q.dtype), q, dk, input_precision=DOT_PRECISION)
    return dk, dv


@triton.jit
def _negative_zero():
    """fp32 -0.0, the mark of an excluded pair in ``_dkdv_step``'s P. Bit-cast from its bits:
    triton 3.6 builds the literal ``-0.0`` as +0.0 (it compares equal to 0), which marked
    nothing and failed 14 GPU contract tests (c0dacb5, 2026-12-01)."""
    return tl.full((), -2147483648, tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def _marked_excluded(p):
    """The pairs ``_dkdv_step`` excluded, from its P alone: exactly -0.0 there (bits
    0x80000000). An included pair's P is exp2(·): +0 or more, or NaN."""
    return (p == 0.0) & (p.to(tl.int32, bitcast=True) < 0)


@triton.jit
def _scores_plus(a, b, col, DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr):
    """``a @ b^T + col[None, :]`` in fp32, a: (R, D), b: (C, D), col: (C,). On a GPU the
    broadcast column term is the dot's initial accumulator (``_dkdv_step``'s register note);
    under the interpreter it is added to ``forward._scores``'s logits."""
    acc = tl.broadcast_to(col[None, :], (a.shape[0], b.shape[0]))
    if UPCAST_DOT:
        return _scores(a, b, DOT_PRECISION, UPCAST_DOT) + acc
    return tl.dot(a, tl.trans(b), acc, input_precision=DOT_PRECISION)


@triton.jit
def _block_start(start, i, idx_ptr, LISTED: tl.constexpr, SPARSE_Q: tl.constexpr,
                 BLOCK_M: tl.constexpr):  # fmt: skip
    """First query row of the i-th block: ``start + i * BLOCK_M``, or (LISTED) of the i-th
    kernel block of the tile list at ``idx_ptr`` (forward.py's ``_list_start``)."""
    if LISTED:
        return _list_start(idx_ptr, i, SPARSE_Q // BLOCK_M, SPARSE_Q, BLOCK_M)
    return start + i * BLOCK_M


@triton.jit
def _blocks(start, end, BLOCK: tl.constexpr):
    """How many blocks ``range(start, end, BLOCK)`` visits (0 when end <= start)."""
    return (tl.maximum(end - start, 0) + BLOCK - 1) // BLOCK


@triton.jit
def _dkdv_inner(
    dk, dv, k, v, q_base, do_base, lse_base, delta_base, km_base, am_base, DescQ, DescdO, q_b, q_h,
    start, count, idx_ptr,
    offs_n, offs_m0, offs_d, n_q, n_k, diag, window_left, window_right, qk_scale, softcap, head_dim,
    stride_qm, stride_qd, stride_dom, stride_dod, stride_lm, stride_kmn, stride_amm, stride_amn,
    MASKED: tl.constexpr,
    GUARD: tl.constexpr,
    LISTED: tl.constexpr,
    SPARSE_Q: tl.constexpr,
    HAS_WINDOW_LEFT: tl.constexpr,
    HAS_WINDOW_RIGHT: tl.constexpr,
    HAS_KEY_MASK: tl.constexpr,
    MASK_KIND: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    BLOCK_M: tl.constexpr,
    EVEN_D: tl.constexpr,
    USE_TMA: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT: tl.constexpr,
    FOLD_DELTA: tl.constexpr,
    PAIR_STATS: tl.constexpr,
    heads=1, stride_qh=0, stride_doh=0, stride_lh=0, stride_amh=0, rng_head=0,
    HEADS: tl.constexpr = False,
    PART: tl.constexpr = 0,
    split=0, jump=0,
    JUMP: tl.constexpr = False,
):  # fmt: skip
    """``count`` query blocks (``_block_start``) of one query head into dK, dV; with HEADS,
    ``count`` blocks of each of ``heads`` query heads (the head strides from the first head's
    bases) in one loop, block by block and the heads in turn within a block. JUMP: two ranges
    in one loop, the blocks from the ``split``-th on ``jump`` rows further on."""
    for j in tl.range(0, count * heads if HEADS else count):
        g = 0
        i = j
        if HEADS:
            # heads innermost, ``heads`` a launch constant (_bwd_dkdv's GROUP): a shift, not a
            # division by the block count, which held the causal GQA M64-N64-w4-s2 build's
            # extra registers: 40 B spilled, 0 B this way (sm90, triton 3.6, static).
            i = j // heads
            g = j - i * heads
        g64 = tl.cast(g, tl.int64)
        start_m = _block_start(start, i, idx_ptr, LISTED, SPARSE_Q, BLOCK_M)
        if JUMP:
            start_m += tl.where(i >= split, jump, 0)
        dk, dv = _dkdv_step(
            dk, dv, k, v, q_base + g64 * stride_qh, do_base + g64 * stride_doh,
            lse_base + g64 * stride_lh, delta_base + g64 * stride_lh, km_base,
            am_base + g64 * stride_amh, DescQ, DescdO,
            q_b, q_h + g, start_m, offs_n,
            offs_m0, offs_d, n_q, n_k, diag, window_left, window_right, qk_scale, softcap,
            head_dim, stride_qm, stride_qd, stride_dom, stride_dod, stride_lm, stride_kmn,
            stride_amm, stride_amn, MASKED, GUARD, HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT,
            HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP, EVEN_D, USE_TMA, DOT_PRECISION, UPCAST_DOT,
            rng_seed, rng_base + g64 * rng_head, rng_stride, dropout_p, HAS_DROPOUT, FOLD_DELTA,
            PAIR_STATS, PART,
        )  # fmt: skip
    return dk, dv


@triton.jit
def _dkdv_head(
    dk, dv, k, v, q_base, do_base, lse_base, delta_base, km_base, am_base, DescQ, DescdO, q_b, q_h,
    DescQh, DescdOh,
    FullNum, FullIdx, PartNum, PartIdx, num_off, idx_off, n_start,
    offs_n, offs_m0, offs_d, n_q, n_k, diag, window_left, window_right, qk_scale, softcap, head_dim,
    stride_qm, stride_qd, stride_dom, stride_dod, stride_lm, stride_kmn, stride_amm, stride_amn,
    GUARD: tl.constexpr,
    SPARSE: tl.constexpr,
    SPARSE_Q: tl.constexpr,
    HAS_WINDOW_LEFT: tl.constexpr,
    HAS_WINDOW_RIGHT: tl.constexpr,
    HAS_KEY_MASK: tl.constexpr,
    MASK_KIND: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    EVEN_D: tl.constexpr,
    USE_TMA: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT: tl.constexpr,
    FOLD_DELTA: tl.constexpr,
    PAIR_STATS: tl.constexpr,
    heads=1, stride_qh=0, stride_doh=0, stride_lh=0, stride_amh=0, rng_head=0,
    HEADS: tl.constexpr = False,
    NO_TAIL: tl.constexpr = False,
    PART: tl.constexpr = 0,
):  # fmt: skip
    """All the query blocks of one query head that see this program's keys, into dK, dV:
    (SPARSE) the head's transposed tile lists at ``num_off``/``idx_off``, full tiles then
    partial ones; else the analytic ranges, masked / fully allowed / masked (NO_TAIL: the
    caller knows the last is empty in every program). DescQh, DescdOh: Q and dO in tiles of
    BLOCK_M // 2 rows, for the partial tiles' steps (the note below), else None."""
    if SPARSE:
        SUB: tl.constexpr = SPARSE_Q // BLOCK_M
        n_full = tl.load(FullNum + num_off) * SUB
        # NOTE: register budget of the partial tiles — their steps hold the element mask and
        # its selects beside the dK, dV accumulators. With BLOCK_M query rows a step, the
        # Hopper M64-N64-w4-s2 build spilled 40 B (key_mask + causal) and 144 B (bool mask),
        # though each tile loop alone compiled without a spill (sm90, triton 3.6, CUDA 13.0's
        # ptxas, static), and the tuner's spill filter left the masked calls to M32-N64-w4-s3
        # (0.492 ms against 0.407 for the spilling M64 tile: H200, bf16, key_padding_causal,
        # D=128). So the Hopper path walks the partial tiles in steps of half the rows from
        # HALF_PARTIAL_ROWS rows on (hopper.half_partial; Q, dO descriptors of that height);
        # full tiles keep the whole block. With the epilogue's leak probe (_bwd_dkdv) both
        # compile without a spill (static); live on the H200 (torch's ptxas) the first has
        # none and ran 0.412 ms, the bool-mask one 24 B and 0.728 ms against 0.927 ms (32 B)
        # for M32-N64-w4-s3 (docs/perf/session_masked_dkdv_2026-12-01).
        HALF: tl.constexpr = USE_TMA and BLOCK_M >= HALF_PARTIAL_ROWS
        PART_M: tl.constexpr = BLOCK_M // 2 if HALF else BLOCK_M
        n_part = tl.load(PartNum + num_off) * (SPARSE_Q // PART_M)
        dk, dv = _dkdv_inner(
            dk, dv, k, v, q_base, do_base, lse_base, delta_base, km_base, am_base, DescQ,
            DescdO, q_b, q_h, 0, n_full,
            FullIdx + idx_off, offs_n, offs_m0, offs_d, n_q, n_k, diag, window_left, window_right,
            qk_scale, softcap, head_dim, stride_qm, stride_qd, stride_dom, stride_dod, stride_lm,
            stride_kmn, stride_amm, stride_amn, False, GUARD, True, SPARSE_Q, HAS_WINDOW_LEFT,
            HAS_WINDOW_RIGHT, HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP, BLOCK_M, EVEN_D, USE_TMA,
            DOT_PRECISION, UPCAST_DOT,
            rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT, FOLD_DELTA, PAIR_STATS,
            PART=PART,
        )  # fmt: skip
        dk, dv = _dkdv_inner(
            dk, dv, k, v, q_base, do_base, lse_base, delta_base, km_base, am_base,
            DescQh if HALF else DescQ, DescdOh if HALF else DescdO, q_b, q_h, 0, n_part,
            PartIdx + idx_off, offs_n, tl.arange(0, PART_M), offs_d, n_q, n_k, diag, window_left,
            window_right, qk_scale, softcap, head_dim, stride_qm, stride_qd, stride_dom, stride_dod,
            stride_lm, stride_kmn, stride_amm, stride_amn, True, GUARD, True, SPARSE_Q,
            HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT, HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP, PART_M, False,
            USE_TMA, DOT_PRECISION, UPCAST_DOT,
            rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT, FOLD_DELTA, PAIR_STATS,
            PART=PART,
        )  # fmt: skip
    else:
        # NOTE: a masked range that is empty in every program is not compiled: its live
        # ranges crowd the register file even when it runs no iteration. Without a right
        # window (causal is one) lo = full_lo = 0; NO_TAIL (passes: no mask, varlen or
        # left window, lengths multiples of every tile) empties [full_hi, hi). The dense
        # D=128 Hopper M64-N64-w4-s2 build: 223 registers and no spill, 255 and 48-56 B
        # with both masked loops; causal: 0 B against 128 B (sm90, triton 3.6, static).
        # With both, every query block is fully allowed: counted plainly, as the ranges'
        # arithmetic made the dense M64-N128-w8-s3 build 17 % slower (H200, N=4096).
        # NOTE: one masked loop — with both masked ranges (a right window and a tail), each
        # loop a copy of the masked step: the varlen_docs build (portable, M32-N64-w4-s3,
        # D=128) spilled 8 B with the two, none without the tail's (sm90, triton 3.6, CUDA
        # 13.0's ptxas; live on the H200 the same 8 B). Here the tail's blocks follow the
        # head's in one loop (JUMP), before the full ones; fp32 keeps the three loops and the
        # order its accuracy tests were set on (as the GQA loop, _bwd_dkdv).
        ONE_MASKED: tl.constexpr = HAS_WINDOW_RIGHT and not NO_TAIL and DOT_PRECISION != "ieee"
        if NO_TAIL and not HAS_WINDOW_RIGHT:
            full_lo = 0
            n_full = n_q // BLOCK_M
        else:
            lo, full_lo, full_hi, hi = _query_ranges(
                n_start, n_q, n_k, diag, window_left, window_right,
                BLOCK_M, BLOCK_N, HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT,
            )  # fmt: skip
            n_full = _blocks(full_lo, full_hi, BLOCK_M)
            if ONE_MASKED:
                n_head = _blocks(lo, full_lo, BLOCK_M)
                dk, dv = _dkdv_inner(
                    dk, dv, k, v, q_base, do_base, lse_base, delta_base, km_base, am_base,
                    DescQ, DescdO, q_b, q_h, lo, n_head + _blocks(full_hi, hi, BLOCK_M), FullIdx,
                    offs_n, offs_m0, offs_d, n_q, n_k, diag, window_left, window_right, qk_scale,
                    softcap, head_dim, stride_qm, stride_qd, stride_dom, stride_dod, stride_lm,
                    stride_kmn, stride_amm, stride_amn, True, GUARD, False, SPARSE_Q,
                    HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT, HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP,
                    BLOCK_M, False, USE_TMA, DOT_PRECISION, UPCAST_DOT,
                    rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT, FOLD_DELTA, PAIR_STATS,
                    heads, stride_qh, stride_doh, stride_lh, stride_amh, rng_head, HEADS, PART,
                    n_head, full_hi - lo - n_head * BLOCK_M, True,
                )  # fmt: skip
            elif HAS_WINDOW_RIGHT:
                dk, dv = _dkdv_inner(
                    dk, dv, k, v, q_base, do_base, lse_base, delta_base, km_base, am_base,
                    DescQ, DescdO, q_b, q_h, lo, _blocks(lo, full_lo, BLOCK_M), FullIdx, offs_n,
                    offs_m0, offs_d, n_q, n_k, diag, window_left, window_right, qk_scale,
                    softcap, head_dim, stride_qm, stride_qd, stride_dom, stride_dod, stride_lm,
                    stride_kmn, stride_amm, stride_amn, True, GUARD, False, SPARSE_Q,
                    HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT, HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP,
                    BLOCK_M, False, USE_TMA, DOT_PRECISION, UPCAST_DOT,
                    rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT, FOLD_DELTA, PAIR_STATS,
                    heads, stride_qh, stride_doh, stride_lh, stride_amh, rng_head, HEADS, PART,
                )  # fmt: skip
        dk, dv = _dkdv_inner(
            dk, dv, k, v, q_base, do_base, lse_base, delta_base, km_base, am_base, DescQ,
            DescdO, q_b, q_h, full_lo,
            n_full, FullIdx, offs_n, offs_m0, offs_d, n_q, n_k,
            diag, window_left, window_right, qk_scale, softcap, head_dim, stride_qm, stride_qd,
            stride_dom, stride_dod, stride_lm, stride_kmn, stride_amm, stride_amn, False, GUARD,
            False, SPARSE_Q, HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT, HAS_KEY_MASK, MASK_KIND,
            HAS_SOFTCAP, BLOCK_M, EVEN_D, USE_TMA, DOT_PRECISION, UPCAST_DOT,
            rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT, FOLD_DELTA, PAIR_STATS,
            heads, stride_qh, stride_doh, stride_lh, stride_amh, rng_head, HEADS, PART,
        )  # fmt: skip
        if not NO_TAIL and not ONE_MASKED:
            dk, dv = _dkdv_inner(
                dk, dv, k, v, q_base, do_base, lse_base, delta_base, km_base, am_base, DescQ,
                DescdO, q_b, q_h, full_hi,
                _blocks(full_hi, hi, BLOCK_M), FullIdx, offs_n, offs_m0, offs_d, n_q, n_k, diag,
                window_left, window_right, qk_scale, softcap, head_dim, stride_qm, stride_qd,
                stride_dom, stride_dod, stride_lm, stride_kmn, stride_amm, stride_amn, True, GUARD,
                False, SPARSE_Q, HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT, HAS_KEY_MASK, MASK_KIND,
                HAS_SOFTCAP, BLOCK_M, False, USE_TMA, DOT_PRECISION, UPCAST_DOT,
                rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT, FOLD_DELTA, PAIR_STATS,
                heads, stride_qh, stride_doh, stride_lh, stride_amh, rng_head, HEADS, PART,
            )  # fmt: skip
    return dk, dv


@triton.jit
def _launch_id():
    """This program's index in its 2-D grid as launched, whatever order it then takes its
    work in (forward._program_ids): where ``_bwd_dkdv`` keeps its ``Leaked`` flag. Read where
    it is used, from the hardware's ids: a pointer to the flag computed up front lived across
    both tile loops into the epilogue and was one of the values the block-mask builds spilled."""
    return tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)


@triton.jit(do_not_specialize=["seq_q", "seq_k", "window_left", "window_right", "sched_chunk"])
def _bwd_dkdv(
    Q, K, V, dOut, Lse2, Delta, dK, dV, Leaked, Seed,
    KeyMask, AttnMask, CuSeqQ, CuSeqK, FullNum, FullIdx, PartNum, PartIdx,
    DescQ, DescK, DescV, DescdO, DescdK, DescdV,  # USE_TMA: tensor descriptors; else None
    DescQh, DescdOh,  # Q, dO in half-height tiles where _dkdv_head's partial steps take them
    qk_scale, sm_scale, softcap, dropout_p,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_dom, stride_dod,
    stride_dkb, stride_dkh, stride_dkn, stride_dkd,
    stride_dvb, stride_dvh, stride_dvn, stride_dvd,
    stride_lb, stride_lh, stride_lm,
    stride_kmb, stride_kmn,
    stride_amb, stride_amh, stride_amm, stride_amn,
    stride_snb, stride_snh, stride_sib, stride_sih, stride_sir,
    heads_kv, group, seq_q, seq_k, window_left, window_right, head_dim,
    sched_chunk,  # (b, h_kv) pairs per chunk of the launch order (forward._program_ids)
    IS_VARLEN: tl.constexpr,
    BOTTOM_RIGHT: tl.constexpr,
    HAS_WINDOW_LEFT: tl.constexpr,
    HAS_WINDOW_RIGHT: tl.constexpr,
    HAS_KEY_MASK: tl.constexpr,
    MASK_KIND: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    SPARSE: tl.constexpr,
    SPARSE_Q: tl.constexpr,
    SPARSE_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    EVEN_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    GQA: tl.constexpr = False,
    GUARD: tl.constexpr = False,
    USE_TMA: tl.constexpr = False,  # the Hopper path (kernels/hopper.py)
    HAS_DROPOUT: tl.constexpr = False,  # the forward's dropout (forward._kept), regenerated
    FOLD_DELTA: tl.constexpr = False,  # _dkdv_step's register note (passes.backward sets it)
    PAIR_STATS: tl.constexpr = False,  # _dkdv_step's PAIRED note (passes.backward sets it)
    NO_TAIL: tl.constexpr = False,  # no trailing masked query block: _dkdv_head's note
    PART: tl.constexpr = 0,  # 0: dK and dV; 1: dV alone; 2: dK alone (the docstring's split)
    GROUP: tl.constexpr = 1,  # ``group`` as a launch constant (dense GQA's flat loop)
):  # fmt: skip
    """Grid: (cdiv(max Nk, BLOCK_N), B * Hkv). Writes dK, dV for BLOCK_N keys of one KV head,
    summing over the GQA group's query heads in a fixed order.

    Two launches where a row can be empty (causal, a window or a mask; module docstring):
    the first (GUARD=False) leaves the Q and dO rows of empty query rows as they are and
    writes, per program, whether its dK or dV came out non-finite (``Leaked``, int32, one
    per program, at its ``_launch_id``); the second (GUARD=True) recomputes only those
    programs, with the rows zeroed, and overwrites their dK, dV. Why not one launch: ptxas
    serialises every tensor-core instruction of a function in which the zeroing selects sit
    between the wgmmas of a pipelined loop (C7515, docs/perf/dkdv_h100_2026-11-25.md), and a
    second pass in the same kernel doubled it and spilled. A program whose results overflowed with
    no empty row is flagged too; its redo computes the same numbers, so only time is lost.

    PART splits the kernel in two launches (``hopper.split_dkdv``: the Hopper path at D=256),
    each with its own guarded redo: dV alone (S, P^T dO) and dK alone (S, dP, dS^T Q). Five
    matmuls instead of four, but one fp32 accumulator per program instead of two: the joint
    build holds dK, dV, K and V in registers and spills at any tile with 128 keys."""
    MAY_EMPTY: tl.constexpr = HAS_WINDOW_LEFT or HAS_WINDOW_RIGHT or HAS_KEY_MASK or MASK_KIND != 0
    if GUARD:
        # On forward.redo_grid, as the forward's guarded launch (forward._attn_fwd's note); the
        # flags sit at the first launch's _launch_id, so a span is a run of launch positions
        # in one grid row, and each flagged one maps to its work as the first launch did.
        n_n = tl.cdiv(seq_k, BLOCK_N)
        first, span, flags = _redo_span(Leaked + tl.program_id(1) * n_n, n_n)
        if tl.max(flags, 0) != 0:
            for i in tl.range(0, span, num_stages=1):  # the body pipelines its own loops
                if _redo_flag(flags, i) != 0:
                    lin = tl.program_id(1) * n_n + first + i
                    if USE_TMA and BLOCK_D == 128:
                        pid_n, pid_bh = _ids_at(lin, n_n, tl.num_programs(1), sched_chunk, False)
                    else:
                        pid_n = lin % n_n
                        pid_bh = lin // n_n
                    _dkdv_program(
                        pid_n, pid_bh, MAY_EMPTY, Q, K, V, dOut, Lse2, Delta, dK, dV, Leaked, Seed,
                        KeyMask, AttnMask, CuSeqQ, CuSeqK, FullNum, FullIdx, PartNum, PartIdx,
                        DescQ, DescK, DescV, DescdO, DescdK, DescdV, DescQh, DescdOh, qk_scale,
                        sm_scale, softcap, dropout_p, stride_qb, stride_qh, stride_qm, stride_qd,
                        stride_kb, stride_kh, stride_kn, stride_kd, stride_vb, stride_vh,
                        stride_vn, stride_vd, stride_dob, stride_doh, stride_dom, stride_dod,
                        stride_dkb, stride_dkh, stride_dkn, stride_dkd, stride_dvb, stride_dvh,
                        stride_dvn, stride_dvd, stride_lb, stride_lh, stride_lm, stride_kmb,
                        stride_kmn, stride_amb, stride_amh, stride_amm, stride_amn, stride_snb,
                        stride_snh, stride_sib, stride_sih, stride_sir, heads_kv, group, seq_q,
                        seq_k, window_left, window_right, head_dim, IS_VARLEN, BOTTOM_RIGHT,
                        HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT, HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP,
                        SPARSE, SPARSE_Q, SPARSE_K, BLOCK_M, BLOCK_N, BLOCK_D, EVEN_D,
                        DOT_PRECISION, UPCAST_DOT, GQA, GUARD, USE_TMA, HAS_DROPOUT, FOLD_DELTA,
                        PAIR_STATS,
                        NO_TAIL, PART, GROUP,
                    )  # fmt: skip
    else:
        # Launch order: the first key block (the heaviest under causal) first. The Hopper path at
        # D=128 takes the (b, h_kv) pairs in chunks (forward._program_ids, its note): causal GQA
        # backward 2.07 ms with them, 2.19 ms without (H200, SpeedSuite at 59a5007 and e0aa634).
        # Elsewhere one pair after another: with the chunks the live dK/dV at D=64 (M32-N128-w4-s3)
        # spilled 8 B (sm90, triton 3.6 with CUDA 13.0's and 12.8's ptxas: a 40-byte stack frame
        # against 32; LiveResourcesSuite at 59a5007), and the portable kernels spill (its note).
        if USE_TMA and BLOCK_D == 128:
            pid_n, pid_bh = _program_ids(sched_chunk, False)
        else:
            pid_n = tl.program_id(0)
            pid_bh = tl.program_id(1)
        _dkdv_program(
            pid_n, pid_bh, MAY_EMPTY, Q, K, V, dOut, Lse2, Delta, dK, dV, Leaked, Seed, KeyMask,
            AttnMask, CuSeqQ, CuSeqK, FullNum, FullIdx, PartNum, PartIdx, DescQ, DescK, DescV,
            DescdO, DescdK, DescdV, DescQh, DescdOh, qk_scale, sm_scale, softcap, dropout_p,
            stride_qb, stride_qh, stride_qm, stride_qd, stride_kb, stride_kh, stride_kn, stride_kd,
            stride_vb, stride_vh, stride_vn, stride_vd, stride_dob, stride_doh, stride_dom,
            stride_dod, stride_dkb, stride_dkh, stride_dkn, stride_dkd, stride_dvb, stride_dvh,
            stride_dvn, stride_dvd, stride_lb, stride_lh, stride_lm, stride_kmb, stride_kmn,
            stride_amb, stride_amh, stride_amm, stride_amn, stride_snb, stride_snh, stride_sib,
            stride_sih, stride_sir, heads_kv, group, seq_q, seq_k, window_left, window_right,
            head_dim, IS_VARLEN, BOTTOM_RIGHT, HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT, HAS_KEY_MASK,
            MASK_KIND, HAS_SOFTCAP, SPARSE, SPARSE_Q, SPARSE_K, BLOCK_M, BLOCK_N, BLOCK_D, EVEN_D,
            DOT_PRECISION, UPCAST_DOT, GQA, GUARD, USE_TMA, HAS_DROPOUT, FOLD_DELTA, PAIR_STATS,
            NO_TAIL, PART,
            GROUP,
        )  # fmt: skip


@triton.jit
def _dkdv_program(
    pid_n, pid_bh, MAY_EMPTY: tl.constexpr, Q, K, V, dOut, Lse2, Delta, dK, dV, Leaked, Seed,
    KeyMask, AttnMask, CuSeqQ, CuSeqK, FullNum, FullIdx, PartNum, PartIdx, DescQ, DescK, DescV,
    DescdO, DescdK, DescdV, DescQh, DescdOh, qk_scale, sm_scale, softcap, dropout_p, stride_qb,
    stride_qh, stride_qm, stride_qd, stride_kb, stride_kh, stride_kn, stride_kd, stride_vb,
    stride_vh, stride_vn, stride_vd, stride_dob, stride_doh, stride_dom, stride_dod, stride_dkb,
    stride_dkh, stride_dkn, stride_dkd, stride_dvb, stride_dvh, stride_dvn, stride_dvd, stride_lb,
    stride_lh, stride_lm, stride_kmb, stride_kmn, stride_amb, stride_amh, stride_amm, stride_amn,
    stride_snb, stride_snh, stride_sib, stride_sih, stride_sir, heads_kv, group, seq_q, seq_k,
    window_left, window_right, head_dim, IS_VARLEN: tl.constexpr, BOTTOM_RIGHT: tl.constexpr,
    HAS_WINDOW_LEFT: tl.constexpr, HAS_WINDOW_RIGHT: tl.constexpr, HAS_KEY_MASK: tl.constexpr,
    MASK_KIND: tl.constexpr, HAS_SOFTCAP: tl.constexpr, SPARSE: tl.constexpr, SPARSE_Q:
    tl.constexpr, SPARSE_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D:
    tl.constexpr, EVEN_D: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr, GQA:
    tl.constexpr, GUARD: tl.constexpr, USE_TMA: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    FOLD_DELTA: tl.constexpr, PAIR_STATS: tl.constexpr, NO_TAIL: tl.constexpr, PART: tl.constexpr,
    GROUP: tl.constexpr,
):  # fmt: skip
    """One program of ``_bwd_dkdv``: key block ``pid_n`` of the (b, h_kv) pair ``pid_bh``; the
    other arguments are the kernel's."""
    b = pid_bh // heads_kv
    h_kv = pid_bh % heads_kv
    if IS_VARLEN:
        q_start = tl.load(CuSeqQ + b)
        n_q = tl.load(CuSeqQ + b + 1) - q_start
        k_start = tl.load(CuSeqK + b)
        n_k = tl.load(CuSeqK + b + 1) - k_start
    else:
        q_start = 0
        n_q = seq_q
        k_start = 0
        n_k = seq_k
    n_start = pid_n * BLOCK_N
    if n_start >= n_k:
        if MAY_EMPTY and not GUARD:
            tl.store(Leaked + _launch_id(), 0)
    else:  # (not an early return: the guarded launch calls this inside a loop)
        diag = 0
        if BOTTOM_RIGHT:
            diag = n_k - n_q
        b64 = b.to(tl.int64)
        hkv64 = h_kv.to(tl.int64)
        offs_n = n_start + tl.arange(0, BLOCK_N)
        offs_m0 = tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        kv_mask = (offs_n < n_k)[:, None] & (offs_d < head_dim)[None, :]
        k_base = K + b64 * stride_kb + hkv64 * stride_kh + k_start.to(tl.int64) * stride_kn
        v_base = V + b64 * stride_vb + hkv64 * stride_vh + k_start.to(tl.int64) * stride_vn
        if USE_TMA:  # never varlen (k_start = 0): rows past Nk read as 0, as the masked load
            k = _tma_tile(DescK, b, h_kv, n_start)
            v = _tma_tile(DescV, b, h_kv, n_start)
        else:
            k = tl.load(
                k_base + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                mask=kv_mask,
                other=0.0,
            )
            v = tl.load(
                v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                mask=kv_mask,
                other=0.0,
            )
        km_base = KeyMask + b64 * stride_kmb
        q_off = q_start.to(tl.int64)
        dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
        dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
        tile_n = 0
        if SPARSE:
            tl.static_assert(SPARSE_Q % BLOCK_M == 0 and SPARSE_K % BLOCK_N == 0)
            tile_n = n_start // SPARSE_K
        # NOTE: heads in the outer loop, all of a head's query blocks inside it: the order in which
        # dK and dV sum (fixed, for deterministic=True, and the one the fp32 accuracy tests were
        # set on). Without GQA (a launch constant) there is no head loop at all.
        rng_seed, rng_stride = 0, _rng_width(seq_k)
        if HAS_DROPOUT:
            rng_seed = tl.load(Seed)
        # Dense GQA: the group's heads run inside each query-block loop (_dkdv_inner's HEADS), not
        # around the loops: nested, the head loop held 40-55 more registers (sm90, triton 3.6) and
        # the D=128 tiles spilled. Within a range the sum goes block by block, the group's heads
        # (GROUP of them, a launch constant) in turn, so the order differs from the nested one.
        # fp32 keeps the nested order its accuracy tests were set on: the H200 failed the fp32
        # softcap case (at its bound, a masked tail) with the flat one.
        FLAT: tl.constexpr = GQA and not SPARSE and DOT_PRECISION != "ieee"
        for g in tl.range(0, group if GQA and not FLAT else 1):
            h64 = (h_kv * group + g).to(tl.int64)
            rng_base = (b64 * heads_kv * group + h64) * seq_q * rng_stride
            dk, dv = _dkdv_head(
                dk, dv, k, v,
                Q + b64 * stride_qb + h64 * stride_qh + q_off * stride_qm,
                dOut + b64 * stride_dob + h64 * stride_doh + q_off * stride_dom,
                Lse2 + b64 * stride_lb + h64 * stride_lh + q_off * stride_lm,
                Delta + b64 * stride_lb + h64 * stride_lh + q_off * stride_lm,
                km_base, AttnMask + b64 * stride_amb + h64 * stride_amh,
                DescQ, DescdO, b, h_kv * group + g, DescQh, DescdOh,
                FullNum, FullIdx, PartNum, PartIdx,
                # the transposed tile lists of query head h: the query tiles that see this key tile
                b64 * stride_snb + h64 * stride_snh + tile_n,
                b64 * stride_sib + h64 * stride_sih + tile_n * stride_sir,
                n_start, offs_n, offs_m0, offs_d, n_q, n_k, diag, window_left, window_right,
                qk_scale, softcap, head_dim, stride_qm, stride_qd, stride_dom, stride_dod,
                stride_lm, stride_kmn, stride_amm, stride_amn, GUARD, SPARSE, SPARSE_Q,
                HAS_WINDOW_LEFT,
                HAS_WINDOW_RIGHT, HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP, BLOCK_M, BLOCK_N, EVEN_D,
                USE_TMA, DOT_PRECISION, UPCAST_DOT,
                rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT, FOLD_DELTA, PAIR_STATS,
                GROUP, stride_qh, stride_doh, stride_lh, stride_amh, seq_q * rng_stride, FLAT,
                NO_TAIL, PART,
            )  # fmt: skip

        if HAS_DROPOUT:
            dv = dv * (1.0 / (1.0 - dropout_p))  # the kept P's 1 / (1 - p), once
        if MAY_EMPTY and not GUARD:
            # NOTE: the leak probe — x * 0 is NaN exactly when x is NaN or ±inf, and a sum with a
            # NaN term is NaN: one multiply-add per element into a scalar per thread, where a
            # per-element non-finite test held a predicate tile of both accumulators at the
            # epilogue, the block-mask builds' register peak (_dkdv_head's note).
            probe = 0.0
            if PART != 2:
                probe = tl.sum(tl.sum(dv * 0.0, 1), 0)
            if PART != 1:
                probe = probe + tl.sum(tl.sum(dk * 0.0, 1), 0)
            tl.store(Leaked + _launch_id(), (probe != 0.0).to(tl.int32))
        dk = dk * sm_scale
        if USE_TMA:
            if PART != 1:
                _tma_store(DescdK, b, h_kv, n_start, dk.to(dK.dtype.element_ty))
            if PART != 2:
                _tma_store(DescdV, b, h_kv, n_start, dv.to(dV.dtype.element_ty))
        else:
            dk_base = dK + b64 * stride_dkb + hkv64 * stride_dkh + k_start.to(tl.int64) * stride_dkn
            dv_base = dV + b64 * stride_dvb + hkv64 * stride_dvh + k_start.to(tl.int64) * stride_dvn
            if PART != 1:
                tl.store(
                    dk_base + offs_n[:, None] * stride_dkn + offs_d[None, :] * stride_dkd,
                    dk.to(dK.dtype.element_ty),
                    mask=kv_mask,
                )
            if PART != 2:
                tl.store(
                    dv_base + offs_n[:, None] * stride_dvn + offs_d[None, :] * stride_dvd,
                    dv.to(dV.dtype.element_ty),
                    mask=kv_mask,
                )


@triton.jit
def _dq_step(
    dq,
    q,
    do,
    lse2,
    delta,
    k_base,
    v_base,
    km_base,
    am_base,
    DescK,
    DescV,
    kv_b,
    kv_h,
    start_n,
    offs_m,
    offs_n0,
    offs_d,
    n_q,
    n_k,
    diag,
    window_left,
    window_right,
    qk_scale,
    softcap,
    head_dim,
    stride_kn,
    stride_kd,
    stride_vn,
    stride_vd,
    stride_kmn,
    stride_amm,
    stride_amn,
    MASKED: tl.constexpr,
    GUARD: tl.constexpr,
    HAS_WINDOW_LEFT: tl.constexpr,
    HAS_WINDOW_RIGHT: tl.constexpr,
    HAS_KEY_MASK: tl.constexpr,
    MASK_KIND: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    EVEN_D: tl.constexpr,
    USE_TMA: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    db_base,
    stride_dbm,
    stride_dbn,
    HAS_DBIAS: tl.constexpr,
    rng_seed,
    rng_base,
    rng_stride,
    dropout_p,
    HAS_DROPOUT: tl.constexpr,
):
    """One key block [start_n, start_n + BLOCK_N) into dQ. MASKED=False is the plain path:
    every pair of the block may attend and every row and key is in range. USE_TMA: the K and
    V tiles through DescK/DescV at (kv_b, kv_h, start_n), as forward.py's ``_fwd_step``."""
    mask_d = offs_d < head_dim
    offs_n = start_n + offs_n0
    if USE_TMA:
        k = _tma_tile(DescK, kv_b, kv_h, start_n)
        v = _tma_tile(DescV, kv_b, kv_h, start_n)
    else:
        k_ptrs = k_base + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd
        v_ptrs = v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd
        if MASKED:
            kv_mask = (offs_n < n_k)[:, None] & mask_d[None, :]
            k = tl.load(k_ptrs, mask=kv_mask, other=0.0)
            v = tl.load(v_ptrs, mask=kv_mask, other=0.0)
        elif EVEN_D:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        else:
            k = tl.load(k_ptrs, mask=mask_d[None, :], other=0.0)
            v = tl.load(v_ptrs, mask=mask_d[None, :], other=0.0)
    s = _scores(q, k, DOT_PRECISION, UPCAST_DOT)
    if UPCAST_DOT == 2:
        dp = tl.dot(do.to(tl.float32), tl.trans(v.to(tl.float32)), input_precision=DOT_PRECISION)
    else:
        dp = tl.dot(do, tl.trans(v), input_precision=DOT_PRECISION)
    s = s * qk_scale  # after dP, as before _scores: keeps the compiled GPU code as it was
    if HAS_DROPOUT:
        # NOTE: dropout (forward.py): dP of the dropped, rescaled P.
        kept = _kept(rng_seed, rng_base, rng_stride, offs_m, offs_n, dropout_p)
        dp = tl.where(kept, dp * (1.0 / (1.0 - dropout_p)), 0.0)
    if HAS_SOFTCAP:
        # NOTE: soft-capping (forward.py): P from the capped scores, as the forward saw them.
        s, t = _softcap(s, softcap)
    if MASKED:
        allowed, bias = _allowed_pairs(
            offs_m, offs_n, n_q, n_k, diag, window_left, window_right,
            km_base, stride_kmn, am_base, stride_amm, stride_amn,
            HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT, HAS_KEY_MASK, MASK_KIND,
        )  # fmt: skip
        if MASK_KIND == 2:
            s = s + bias
        s = tl.where(allowed, s, float("-inf"))
    elif MASK_KIND == 2:
        # NOTE: full tiles of an additive mask (forward.py): the bias applies unselected.
        s = s + _bias_tile(am_base, offs_m, offs_n, stride_amm, stride_amn)
    p = tl.math.exp2(s - lse2[:, None])
    ds = p * (dp - delta[:, None])
    if HAS_DBIAS:
        # dBias = dS, the gradient of the logits the bias is added to: before the cap's
        # derivative; excluded pairs exactly 0 (a NaN from an excluded V row stays out).
        db_ptrs = db_base + offs_m[:, None] * stride_dbm + offs_n[None, :] * stride_dbn
        if MASKED:
            in_range = (offs_m < n_q)[:, None] & (offs_n < n_k)[None, :]
            db = tl.where(allowed, ds, 0.0).to(db_base.dtype.element_ty)
            tl.store(db_ptrs, db, mask=in_range)
        else:
            tl.store(db_ptrs, ds.to(db_base.dtype.element_ty))
    if HAS_SOFTCAP:
        ds = ds * (1.0 - t * t)  # the cap's derivative, before the where (as in _dkdv_step)
    if MASKED:
        ds = tl.where(allowed, ds, 0.0)
        if GUARD:
            # NOTE: excluded keys (module docstring).
            k32 = k.to(tl.float32)
            k = tl.where((k32 == k32) & (tl.abs(k32) != float("inf")), k, 0.0)
    if UPCAST_DOT == 2:
        dq = tl.dot(ds, k.to(tl.float32), dq, input_precision=DOT_PRECISION)
    else:
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=DOT_PRECISION)
    return dq


@triton.jit
def _dq_inner(
    dq,
    q,
    do,
    lse2,
    delta,
    k_base,
    v_base,
    km_base,
    am_base,
    DescK,
    DescV,
    kv_b,
    kv_h,
    start,
    end,
    idx_ptr,
    offs_m,
    offs_n0,
    offs_d,
    n_q,
    n_k,
    diag,
    window_left,
    window_right,
    qk_scale,
    softcap,
    head_dim,
    stride_kn,
    stride_kd,
    stride_vn,
    stride_vd,
    stride_kmn,
    stride_amm,
    stride_amn,
    MASKED: tl.constexpr,
    GUARD: tl.constexpr,
    LISTED: tl.constexpr,
    SPARSE_K: tl.constexpr,
    HAS_WINDOW_LEFT: tl.constexpr,
    HAS_WINDOW_RIGHT: tl.constexpr,
    HAS_KEY_MASK: tl.constexpr,
    MASK_KIND: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    BLOCK_N: tl.constexpr,
    EVEN_D: tl.constexpr,
    USE_TMA: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    db_base,
    stride_dbm,
    stride_dbn,
    HAS_DBIAS: tl.constexpr,
    rng_seed,
    rng_base,
    rng_stride,
    dropout_p,
    HAS_DROPOUT: tl.constexpr,
):
    """Key blocks [start, end) step BLOCK_N, or (LISTED) the kernel blocks t in [start, end)
    of the tile list at ``idx_ptr`` (forward.py's ``_list_start``)."""
    if LISTED:
        for t in tl.range(start, end):
            start_n = _list_start(idx_ptr, t, SPARSE_K // BLOCK_N, SPARSE_K, BLOCK_N)
            dq = _dq_step(
                dq, q, do, lse2, delta, k_base, v_base, km_base, am_base, DescK, DescV, kv_b,
                kv_h, start_n, offs_m, offs_n0, offs_d, n_q, n_k, diag, window_left,
                window_right, qk_scale, softcap, head_dim, stride_kn, stride_kd, stride_vn,
                stride_vd, stride_kmn, stride_amm, stride_amn, MASKED, GUARD, HAS_WINDOW_LEFT,
                HAS_WINDOW_RIGHT, HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP, EVEN_D, USE_TMA,
                DOT_PRECISION, UPCAST_DOT, db_base, stride_dbm, stride_dbn, HAS_DBIAS,
                rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT,
            )  # fmt: skip
    else:
        for start_n in tl.range(start, end, BLOCK_N):
            dq = _dq_step(
                dq, q, do, lse2, delta, k_base, v_base, km_base, am_base, DescK, DescV, kv_b,
                kv_h, start_n, offs_m, offs_n0, offs_d, n_q, n_k, diag, window_left,
                window_right, qk_scale, softcap, head_dim, stride_kn, stride_kd, stride_vn,
                stride_vd, stride_kmn, stride_amm, stride_amn, MASKED, GUARD, HAS_WINDOW_LEFT,
                HAS_WINDOW_RIGHT, HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP, EVEN_D, USE_TMA,
                DOT_PRECISION, UPCAST_DOT, db_base, stride_dbm, stride_dbn, HAS_DBIAS,
                rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT,
            )  # fmt: skip
    return dq


@triton.jit
def _dq_rows(
    q, do, lse2, delta, k_base, v_base, km_base, am_base, DescK, DescV, kv_b, kv_h, FullNum,
    FullIdx, PartNum, PartIdx,
    m_start, b64, h64, offs_m, offs_n0, offs_d, n_q, n_k, diag, window_left, window_right,
    qk_scale, softcap, head_dim, stride_kn, stride_kd, stride_vn, stride_vd, stride_kmn, stride_amm,
    stride_amn, stride_snb, stride_snh, stride_sib, stride_sih, stride_sir,
    GUARD: tl.constexpr,
    HAS_WINDOW_LEFT: tl.constexpr,
    HAS_WINDOW_RIGHT: tl.constexpr,
    HAS_KEY_MASK: tl.constexpr,
    MASK_KIND: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    SPARSE: tl.constexpr,
    SPARSE_Q: tl.constexpr,
    SPARSE_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    EVEN_D: tl.constexpr,
    USE_TMA: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    db_base,
    stride_dbm,
    stride_dbn,
    HAS_DBIAS: tl.constexpr,
    rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT: tl.constexpr,
    NO_TAIL: tl.constexpr = False,
):  # fmt: skip
    """dQ (unscaled, fp32) of one program's rows over all the key blocks they may see:
    the tile lists when SPARSE, else the analytic ranges of ``_key_ranges`` (NO_TAIL: the
    caller knows their last, masked range is empty in every program)."""
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    if SPARSE:
        tl.static_assert(SPARSE_Q % BLOCK_M == 0 and SPARSE_K % BLOCK_N == 0)
        SUB: tl.constexpr = SPARSE_K // BLOCK_N
        tile_m = m_start // SPARSE_Q
        num_off = b64 * stride_snb + h64 * stride_snh + tile_m
        idx_off = b64 * stride_sib + h64 * stride_sih + tile_m * stride_sir
        n_full = tl.load(FullNum + num_off) * SUB
        n_part = tl.load(PartNum + num_off) * SUB
        dq = _dq_inner(
            dq, q, do, lse2, delta, k_base, v_base, km_base, am_base, DescK, DescV, kv_b,
            kv_h, 0, n_full, FullIdx + idx_off,
            offs_m, offs_n0, offs_d, n_q, n_k, diag, window_left, window_right, qk_scale, softcap,
            head_dim, stride_kn, stride_kd, stride_vn, stride_vd, stride_kmn, stride_amm,
            stride_amn, False, GUARD, True, SPARSE_K, HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT,
            HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP, BLOCK_N, EVEN_D, USE_TMA, DOT_PRECISION,
            UPCAST_DOT, db_base, stride_dbm, stride_dbn, HAS_DBIAS,
            rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT,
        )  # fmt: skip
        dq = _dq_inner(
            dq, q, do, lse2, delta, k_base, v_base, km_base, am_base, DescK, DescV, kv_b,
            kv_h, 0, n_part, PartIdx + idx_off,
            offs_m, offs_n0, offs_d, n_q, n_k, diag, window_left, window_right, qk_scale, softcap,
            head_dim, stride_kn, stride_kd, stride_vn, stride_vd, stride_kmn, stride_amm,
            stride_amn, True, GUARD, True, SPARSE_K, HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT,
            HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP, BLOCK_N, False, USE_TMA, DOT_PRECISION,
            UPCAST_DOT, db_base, stride_dbm, stride_dbn, HAS_DBIAS,
            rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT,
        )  # fmt: skip
    else:
        lo, full_lo, full_hi, hi = _key_ranges(
            m_start, n_k, diag, window_left, window_right,
            BLOCK_M, BLOCK_N, HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT,
        )  # fmt: skip
        # NOTE: as in _dkdv_head, a masked range empty in every program is not compiled:
        # without a left window lo = full_lo = 0; NO_TAIL (passes: no mask, varlen or right
        # window, lengths multiples of every tile) empties [full_hi, hi).
        if HAS_WINDOW_LEFT:
            dq = _dq_inner(
                dq, q, do, lse2, delta, k_base, v_base, km_base, am_base, DescK, DescV, kv_b,
                kv_h, lo, full_lo, FullIdx, offs_m,
                offs_n0, offs_d, n_q, n_k, diag, window_left, window_right, qk_scale, softcap,
                head_dim, stride_kn, stride_kd, stride_vn, stride_vd, stride_kmn, stride_amm,
                stride_amn, True, GUARD, False, SPARSE_K, HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT,
                HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP, BLOCK_N, False, USE_TMA, DOT_PRECISION,
                UPCAST_DOT, db_base, stride_dbm, stride_dbn, HAS_DBIAS,
                rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT,
            )  # fmt: skip
        dq = _dq_inner(
            dq, q, do, lse2, delta, k_base, v_base, km_base, am_base, DescK, DescV, kv_b,
            kv_h, full_lo, full_hi, FullIdx,
            offs_m, offs_n0, offs_d, n_q, n_k, diag, window_left, window_right, qk_scale, softcap,
            head_dim, stride_kn, stride_kd, stride_vn, stride_vd, stride_kmn, stride_amm,
            stride_amn, False, GUARD, False, SPARSE_K, HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT,
            HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP, BLOCK_N, EVEN_D, USE_TMA, DOT_PRECISION,
            UPCAST_DOT, db_base, stride_dbm, stride_dbn, HAS_DBIAS,
            rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT,
        )  # fmt: skip
        if not NO_TAIL:
            dq = _dq_inner(
                dq, q, do, lse2, delta, k_base, v_base, km_base, am_base, DescK, DescV, kv_b,
                kv_h, full_hi, hi, FullIdx, offs_m,
                offs_n0, offs_d, n_q, n_k, diag, window_left, window_right, qk_scale, softcap,
                head_dim, stride_kn, stride_kd, stride_vn, stride_vd, stride_kmn, stride_amm,
                stride_amn, True, GUARD, False, SPARSE_K, HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT,
                HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP, BLOCK_N, False, USE_TMA, DOT_PRECISION,
                UPCAST_DOT, db_base, stride_dbm, stride_dbn, HAS_DBIAS,
                rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT,
            )  # fmt: skip
    return dq


@triton.jit(do_not_specialize=["seq_q", "seq_k", "window_left", "window_right", "sched_chunk"])
def _bwd_dq(
    Q, K, V, dOut, Lse2, Delta, dQ, Leaked, DBias, Seed,
    KeyMask, AttnMask, CuSeqQ, CuSeqK, FullNum, FullIdx, PartNum, PartIdx,
    DescQ, DescK, DescV, DescdO, DescdQ,  # USE_TMA: tensor descriptors; else None
    qk_scale, sm_scale, softcap, dropout_p,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_dom, stride_dod,
    stride_dqb, stride_dqh, stride_dqm, stride_dqd,
    stride_lb, stride_lh, stride_lm,
    stride_kmb, stride_kmn,
    stride_amb, stride_amh, stride_amm, stride_amn,
    stride_dbb, stride_dbh, stride_dbm, stride_dbn,
    stride_snb, stride_snh, stride_sib, stride_sih, stride_sir,
    heads_q, group, seq_q, seq_k, window_left, window_right, head_dim,
    sched_chunk,  # (b, h) pairs per chunk of the launch order (forward._program_ids)
    IS_VARLEN: tl.constexpr,
    BOTTOM_RIGHT: tl.constexpr,
    HAS_WINDOW_LEFT: tl.constexpr,
    HAS_WINDOW_RIGHT: tl.constexpr,
    HAS_KEY_MASK: tl.constexpr,
    MASK_KIND: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    SPARSE: tl.constexpr,
    SPARSE_Q: tl.constexpr,
    SPARSE_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    EVEN_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    USE_TMA: tl.constexpr = False,  # the Hopper path (kernels/hopper.py)
    GUARD: tl.constexpr = False,  # the second launch: redo the programs flagged in Leaked
    HAS_DBIAS: tl.constexpr = False,  # also write dBias = dS into DBias (B, Hq, Nq, Nk)
    HAS_DROPOUT: tl.constexpr = False,  # the forward's dropout (forward._kept), regenerated
    NO_TAIL: tl.constexpr = False,  # no trailing masked key block: _dq_rows's note
):  # fmt: skip
    """Grid: (cdiv(max Nq, BLOCK_M), B * Hq). Writes dQ for BLOCK_M rows of one query head.

    Two launches where an in-range key can be excluded, as the forward (forward._attn_fwd):
    the first writes, per program, whether its dQ came out non-finite (``Leaked``); the
    second (GUARD=True) redoes only those programs with the guard. A second pass inside one
    launch spilled (sm90, D=64 M128-N64-w4: a 344-byte stack frame with it, none without)."""
    MAY_EXCLUDE: tl.constexpr = (
        HAS_WINDOW_LEFT or HAS_WINDOW_RIGHT or HAS_KEY_MASK or MASK_KIND != 0
    )
    if GUARD:
        # On forward.redo_grid, as the forward's guarded launch (forward._attn_fwd's note).
        n_m = tl.cdiv(seq_q, BLOCK_M)
        pid_bh = tl.program_id(1)
        first, span, flags = _redo_span(Leaked + pid_bh * n_m, n_m)
        if tl.max(flags, 0) != 0:
            for i in tl.range(0, span, num_stages=1):  # the body pipelines its own loops
                pid_m = first + i
                if _redo_flag(flags, i) != 0:
                    leak_at = Leaked + pid_bh * n_m + pid_m
                    _dq_program(
                        pid_m, pid_bh, leak_at, MAY_EXCLUDE, Q, K, V, dOut, Lse2, Delta, dQ, DBias,
                        Seed, KeyMask, AttnMask, CuSeqQ, CuSeqK, FullNum, FullIdx, PartNum,
                        PartIdx, DescQ, DescK, DescV, DescdO, DescdQ, qk_scale, sm_scale, softcap,
                        dropout_p, stride_qb, stride_qh, stride_qm, stride_qd, stride_kb,
                        stride_kh, stride_kn, stride_kd, stride_vb, stride_vh, stride_vn,
                        stride_vd, stride_dob, stride_doh, stride_dom, stride_dod, stride_dqb,
                        stride_dqh, stride_dqm, stride_dqd, stride_lb, stride_lh, stride_lm,
                        stride_kmb, stride_kmn, stride_amb, stride_amh, stride_amm, stride_amn,
                        stride_dbb, stride_dbh, stride_dbm, stride_dbn, stride_snb, stride_snh,
                        stride_sib, stride_sih, stride_sir, heads_q, group, seq_q, seq_k,
                        window_left, window_right, head_dim, IS_VARLEN, BOTTOM_RIGHT,
                        HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT, HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP,
                        SPARSE, SPARSE_Q, SPARSE_K, BLOCK_M, BLOCK_N, BLOCK_D, EVEN_D,
                        DOT_PRECISION, UPCAST_DOT, USE_TMA, GUARD, HAS_DBIAS, HAS_DROPOUT, NO_TAIL,
                    )  # fmt: skip
    else:
        # The Hopper path as the forward: the last query blocks, which see the most keys, start
        # first, in chunks of (b, h) pairs (forward._program_ids, its note).
        if USE_TMA:
            pid_m, pid_bh = _program_ids(sched_chunk, True)
        else:
            pid_m = tl.program_id(0)
            pid_bh = tl.program_id(1)
        leak_at = Leaked + pid_bh * tl.num_programs(0) + pid_m
        _dq_program(
            pid_m, pid_bh, leak_at, MAY_EXCLUDE, Q, K, V, dOut, Lse2, Delta, dQ, DBias, Seed,
            KeyMask, AttnMask, CuSeqQ, CuSeqK, FullNum, FullIdx, PartNum, PartIdx, DescQ, DescK,
            DescV, DescdO, DescdQ, qk_scale, sm_scale, softcap, dropout_p, stride_qb, stride_qh,
            stride_qm, stride_qd, stride_kb, stride_kh, stride_kn, stride_kd, stride_vb, stride_vh,
            stride_vn, stride_vd, stride_dob, stride_doh, stride_dom, stride_dod, stride_dqb,
            stride_dqh, stride_dqm, stride_dqd, stride_lb, stride_lh, stride_lm, stride_kmb,
            stride_kmn, stride_amb, stride_amh, stride_amm, stride_amn, stride_dbb, stride_dbh,
            stride_dbm, stride_dbn, stride_snb, stride_snh, stride_sib, stride_sih, stride_sir,
            heads_q, group, seq_q, seq_k, window_left, window_right, head_dim, IS_VARLEN,
            BOTTOM_RIGHT, HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT, HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP,
            SPARSE, SPARSE_Q, SPARSE_K, BLOCK_M, BLOCK_N, BLOCK_D, EVEN_D, DOT_PRECISION,
            UPCAST_DOT, USE_TMA, GUARD, HAS_DBIAS, HAS_DROPOUT, NO_TAIL,
        )  # fmt: skip


@triton.jit
def _dq_program(
    pid_m, pid_bh, leak_at, MAY_EXCLUDE: tl.constexpr, Q, K, V, dOut, Lse2, Delta, dQ, DBias, Seed,
    KeyMask, AttnMask, CuSeqQ, CuSeqK, FullNum, FullIdx, PartNum, PartIdx, DescQ, DescK, DescV,
    DescdO, DescdQ, qk_scale, sm_scale, softcap, dropout_p, stride_qb, stride_qh, stride_qm,
    stride_qd, stride_kb, stride_kh, stride_kn, stride_kd, stride_vb, stride_vh, stride_vn,
    stride_vd, stride_dob, stride_doh, stride_dom, stride_dod, stride_dqb, stride_dqh, stride_dqm,
    stride_dqd, stride_lb, stride_lh, stride_lm, stride_kmb, stride_kmn, stride_amb, stride_amh,
    stride_amm, stride_amn, stride_dbb, stride_dbh, stride_dbm, stride_dbn, stride_snb, stride_snh,
    stride_sib, stride_sih, stride_sir, heads_q, group, seq_q, seq_k, window_left, window_right,
    head_dim, IS_VARLEN: tl.constexpr, BOTTOM_RIGHT: tl.constexpr, HAS_WINDOW_LEFT: tl.constexpr,
    HAS_WINDOW_RIGHT: tl.constexpr, HAS_KEY_MASK: tl.constexpr, MASK_KIND: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr, SPARSE: tl.constexpr, SPARSE_Q: tl.constexpr, SPARSE_K:
    tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, EVEN_D:
    tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr, USE_TMA: tl.constexpr,
    GUARD: tl.constexpr, HAS_DBIAS: tl.constexpr, HAS_DROPOUT: tl.constexpr, NO_TAIL: tl.constexpr,
):  # fmt: skip
    """One program of ``_bwd_dq``: query block ``pid_m`` of the (b, h) pair ``pid_bh``, its
    flag at ``leak_at``; the other arguments are the kernel's."""
    b = pid_bh // heads_q
    h = pid_bh % heads_q
    h_kv = h // group
    if IS_VARLEN:
        q_start = tl.load(CuSeqQ + b)
        n_q = tl.load(CuSeqQ + b + 1) - q_start
        k_start = tl.load(CuSeqK + b)
        n_k = tl.load(CuSeqK + b + 1) - k_start
    else:
        q_start = 0
        n_q = seq_q
        k_start = 0
        n_k = seq_k
    m_start = pid_m * BLOCK_M
    if m_start >= n_q:
        if MAY_EXCLUDE and not GUARD:
            tl.store(leak_at, 0)
    else:  # (not an early return: the guarded launch calls this inside a loop)
        diag = 0
        if BOTTOM_RIGHT:
            diag = n_k - n_q
        b64 = b.to(tl.int64)
        h64 = h.to(tl.int64)
        offs_m = m_start + tl.arange(0, BLOCK_M)
        offs_n0 = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_D)
        mask_m = offs_m < n_q
        qd_mask = mask_m[:, None] & (offs_d < head_dim)[None, :]
        q_base = Q + b64 * stride_qb + h64 * stride_qh + q_start.to(tl.int64) * stride_qm
        do_base = dOut + b64 * stride_dob + h64 * stride_doh + q_start.to(tl.int64) * stride_dom
        if USE_TMA:  # never varlen (q_start = 0): rows past Nq read as 0, as the masked load
            q = _tma_tile(DescQ, b, h, m_start)
            do = _tma_tile(DescdO, b, h, m_start)
        else:
            q = tl.load(
                q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=qd_mask,
                other=0.0,
            )
            do = tl.load(
                do_base + offs_m[:, None] * stride_dom + offs_d[None, :] * stride_dod,
                mask=qd_mask,
                other=0.0,
            )
        l_off = b64 * stride_lb + h64 * stride_lh + q_start.to(tl.int64) * stride_lm
        lse2 = tl.load(Lse2 + l_off + offs_m * stride_lm, mask=mask_m, other=float("-inf"))
        delta = tl.load(Delta + l_off + offs_m * stride_lm, mask=mask_m, other=0.0)
        # NOTE: empty rows (module docstring).
        lse2 = tl.where(lse2 == float("-inf"), float("inf"), lse2)

        k_base = K + b64 * stride_kb + h_kv.to(tl.int64) * stride_kh
        k_base += k_start.to(tl.int64) * stride_kn
        v_base = V + b64 * stride_vb + h_kv.to(tl.int64) * stride_vh
        v_base += k_start.to(tl.int64) * stride_vn
        km_base = KeyMask + b64 * stride_kmb
        am_base = AttnMask + b64 * stride_amb + h64 * stride_amh
        db_base = DBias + b64 * stride_dbb + h64 * stride_dbh
        rng_seed, rng_stride = 0, _rng_width(seq_k)
        rng_base = (b64 * heads_q + h64) * seq_q * rng_stride
        if HAS_DROPOUT:
            rng_seed = tl.load(Seed)

        dq = _dq_rows(
            q, do, lse2, delta, k_base, v_base, km_base, am_base, DescK, DescV, b, h_kv, FullNum,
            FullIdx, PartNum, PartIdx, m_start, b64, h64, offs_m, offs_n0, offs_d, n_q, n_k, diag,
            window_left, window_right, qk_scale, softcap, head_dim, stride_kn, stride_kd,
            stride_vn, stride_vd, stride_kmn, stride_amm, stride_amn, stride_snb, stride_snh,
            stride_sib, stride_sih, stride_sir, GUARD, HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT,
            HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP, SPARSE, SPARSE_Q, SPARSE_K, BLOCK_M, BLOCK_N,
            BLOCK_D, EVEN_D, USE_TMA, DOT_PRECISION, UPCAST_DOT, db_base, stride_dbm, stride_dbn,
            HAS_DBIAS, rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT, NO_TAIL,
        )  # fmt: skip
        # NOTE: excluded keys (module docstring): the second launch redoes, with the guard, the
        # programs whose dQ leaked. Not compiled in where no in-range key can be excluded.
        if MAY_EXCLUDE and not GUARD:
            tl.store(leak_at, tl.max(((dq != dq) | (tl.abs(dq) == float("inf"))).to(tl.int32)))
        dq = dq * sm_scale
        if USE_TMA:
            _tma_store(DescdQ, b, h, m_start, dq.to(dQ.dtype.element_ty))
        else:
            dq_base = dQ + b64 * stride_dqb + h64 * stride_dqh + q_start.to(tl.int64) * stride_dqm
            tl.store(
                dq_base + offs_m[:, None] * stride_dqm + offs_d[None, :] * stride_dqd,
                dq.to(dQ.dtype.element_ty),
                mask=qd_mask,
            )
