"""Forward attention kernel (FlashAttention-2 style online softmax).

One program computes BLOCK_M query rows of one (batch, query head). Without key_mask /
attn_mask, key blocks are visited in three ranges computed from the causal/window geometry:
masked blocks before the fully-allowed ones, fully-allowed blocks (no masking code at all),
masked blocks after. With them, the program walks the tile lists of ``safeattn.blockmask``:
its full tiles (no masking code), then its partial tiles (masked); empty tiles are never
loaded. Scores live in the log2 domain: ``s2 = q·k · scale·log2(e)``
so the exponentials are ``exp2``; the saved LSE is in that domain too (``lse2``), which keeps
the backward exact for large logits (no ln/log2 round trip).

NOTE: empty rows — a row whose every key is excluded keeps ``m = -inf``; exponentials are
taken against a safe maximum of 0 so that ``exp2(-inf - (-inf))`` (NaN) never occurs, the
row's sum stays 0, its output is written as exactly 0 and its lse2 as -inf.

NOTE: soft-capping (HAS_SOFTCAP, a constexpr: kernels without it compile as before) — the
scores become ``softcap·tanh(s / softcap)`` (``_softcap``, in the log2 domain) right after
``q·k``: before an additive mask's bias and before masking, as FlashAttention-2,
FlexAttention and Gemma 2 do. Excluded pairs are still replaced by -inf afterwards, whatever
their capped score became (NaN from a poisoned K included), so empty rows and excluded keys
behave exactly as without a cap.

NOTE: excluded values — ``p @ v`` with ``p = 0`` and a NaN in ``v`` is NaN, so masking the
scores alone cannot keep a poisoned, excluded value out of a row. The guard (GUARD=True): in
masked blocks the kernel zeroes non-finite entries of V before the product and records, per
row, whether any *allowed* key of that row had a non-finite value; such rows are written as
NaN (contract item 3: an included non-finite input is never silently replaced). The guard
costs a scan of every masked V tile, so a program first runs without it: a leak shows up as
a non-finite accumulator, and only then (NaN/Inf inputs) does a second launch redo that
program with the guard (``_attn_fwd``). Finite inputs never pay for the scan; results are
the same either way (for finite V, the guard changes nothing that reaches the product).

Why one file over ~400 lines: the kernel and the ``@triton.jit`` helpers the backward imports
from it (``_scores``, ``_key_ranges``, the tile lists, the bias tile) change together and are
read together. The shared prologue and tile loads get a module of their own in the kernel
rewrite (issues 11 and 13), which has to be measured on a GPU before it lands.
"""

from __future__ import annotations

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)
# The guarded second launch (_attn_fwd, redo_grid): each program reads the flags of up to
# REDO_SPAN query blocks of one (b, h) pair at once and redoes only the flagged ones, with
# spans as short as leave about REDO_PROGRAMS programs (two waves on a 132-SM GPU), so that a
# launch whose every block is flagged still spreads over the SMs.
REDO_SPAN = tl.constexpr(32)
REDO_PROGRAMS = tl.constexpr(264)


def redo_grid(grid: tuple[int, int]) -> tuple[int, int]:
    """The guarded second launch's grid for a first launch on ``grid`` (blocks, B * Hq); the
    kernel derives the same span (``_attn_fwd``)."""
    blocks, pairs = grid
    span = min(triton.cdiv(blocks * pairs, REDO_PROGRAMS.value), REDO_SPAN.value)
    return (triton.cdiv(blocks, span), pairs)


@triton.jit
def _allowed_pairs(
    offs_m,
    offs_n,
    n_q,
    n_k,
    diag,
    window_left,
    window_right,
    km_base,
    stride_kmn,
    am_base,
    stride_amm,
    stride_amn,
    HAS_WINDOW_LEFT: tl.constexpr,
    HAS_WINDOW_RIGHT: tl.constexpr,
    HAS_KEY_MASK: tl.constexpr,
    MASK_KIND: tl.constexpr,
):
    """(BLOCK_M, BLOCK_N) bool of allowed (query, key) pairs, plus the float bias (log2 units)
    of an additive mask (the scalar 0.0 when there is none)."""
    allowed = (offs_n < n_k)[None, :] & (offs_m < n_q)[:, None]
    if HAS_WINDOW_RIGHT:
        allowed = allowed & (offs_n[None, :] <= offs_m[:, None] + diag + window_right)
    if HAS_WINDOW_LEFT:
        allowed = allowed & (offs_n[None, :] >= offs_m[:, None] + diag - window_left)
    if HAS_KEY_MASK:
        km = tl.load(km_base + offs_n * stride_kmn, mask=offs_n < n_k, other=0)
        allowed = allowed & (km != 0)[None, :]
    bias = 0.0  # replaced by a tensor only for an additive mask (MASK_KIND is constexpr)
    if MASK_KIND != 0:
        am_ptrs = am_base + offs_m[:, None] * stride_amm + offs_n[None, :] * stride_amn
        am_inb = (offs_m < n_q)[:, None] & (offs_n < n_k)[None, :]
        if MASK_KIND == 1:
            am = tl.load(am_ptrs, mask=am_inb, other=0)
            allowed = allowed & (am != 0)
        else:
            am = tl.load(am_ptrs, mask=am_inb, other=0.0).to(tl.float32)
            allowed = allowed & (am != float("-inf"))
            bias = am * LOG2E
    return allowed, bias


@triton.jit
def _redo_span(flags_of_pair, n_blocks):
    """A guarded second launch's program on ``redo_grid``: (first block, span, the span's
    flags as a REDO_SPAN vector, 0 past it) of its (b, h) pair, whose ``n_blocks`` flags
    start at ``flags_of_pair``. The span as ``redo_grid`` computes it."""
    span = tl.minimum(tl.cdiv(n_blocks * tl.num_programs(1), REDO_PROGRAMS), REDO_SPAN)
    first = tl.program_id(0) * span
    offs = tl.arange(0, REDO_SPAN)
    in_span = (offs < span) & (first + offs < n_blocks)
    return first, span, tl.load(flags_of_pair + first + offs, mask=in_span, other=0)


@triton.jit
def _redo_flag(flags, i):
    """Element ``i`` of a :func:`_redo_span` flag vector."""
    return tl.sum(tl.where(tl.arange(0, REDO_SPAN) == i, flags, 0), 0)


@triton.jit
def _program_ids(sched_chunk, HEAVY_LAST: tl.constexpr):
    """(block, bh) of this program in a (blocks, B * heads) grid, in the launch order of
    ``kernels/schedule.py``: the (b, h) pairs in chunks of ``sched_chunk`` (the last chunk
    takes the remainder), and inside a chunk block by block across its pairs, the heaviest
    block first (the last one when HEAVY_LAST, the first otherwise).

    Why: under causal (or a window or mask) the programs' work differs by up to the number of
    blocks, and the GPU starts programs in launch order; with the blocks of one pair after
    another, heavy programs of the last pairs started in the last wave and ran alone. Chunks
    keep what the programs in flight read (K/V; Q/dO in dK/dV) small enough for L2.

    NOTE: Hopper path only (USE_TMA). The ids are computed values that live until the
    epilogue's stores, where ``tl.program_id`` is re-read for free: in the static audit (triton
    3.9) the remap made 51 portable sm80/86/89/90 configs spill 8-128 B where they had not
    (30 KB more stack over 907 rows), while the TMA kernels moved by -200..+56 B, none newly
    spilling. On the GPU's toolchain (triton 3.6) the live dK/dV at D=64 still grew a spill
    with it, so dK/dV takes it at D=128 only (``backward._bwd_dkdv``)."""
    n_blk = tl.num_programs(0)
    n_bh = tl.num_programs(1)
    lin = tl.program_id(1) * n_blk + tl.program_id(0)  # launch order: axis 0 fastest
    n_chunks = tl.maximum(n_bh // sched_chunk, 1)
    chunk = tl.minimum(lin // (sched_chunk * n_blk), n_chunks - 1)
    first = chunk * sched_chunk
    width = tl.where(chunk == n_chunks - 1, n_bh - first, sched_chunk)
    r = lin - first * n_blk
    step = r // width
    bh = first + r - step * width
    if HEAVY_LAST:
        return n_blk - 1 - step, bh
    return step, bh


@triton.jit
def _ids_at(lin, n_blk, n_bh, sched_chunk, HEAVY_LAST: tl.constexpr):
    """:func:`_program_ids` of the program launched ``lin``-th in a (n_blk, n_bh) grid (a
    guarded second launch on ``redo_grid`` asks it for the first launch's programs).

    The same arithmetic as ``_program_ids``, written twice on purpose: with ``_program_ids``
    calling this function, the first launch of the causal GQA dK/dV build at D=128 compiled to
    other machine code (sm90, triton 3.6; same registers, no spill), and the timed launches
    are meant to stay byte for byte what was measured."""
    n_chunks = tl.maximum(n_bh // sched_chunk, 1)
    chunk = tl.minimum(lin // (sched_chunk * n_blk), n_chunks - 1)
    first = chunk * sched_chunk
    width = tl.where(chunk == n_chunks - 1, n_bh - first, sched_chunk)
    r = lin - first * n_blk
    step = r // width
    bh = first + r - step * width
    if HEAVY_LAST:
        return n_blk - 1 - step, bh
    return step, bh


@triton.jit
def _tma_tile(desc, b, h, row):
    """The (rows, D) tile at row ``row`` of head (b, h) through a [1, 1, rows, D] tensor
    descriptor (the Hopper path, kernels/hopper.py); out-of-bounds elements read as 0."""
    t = desc.load([b, h, row, 0])
    return t.reshape(t.shape[2], t.shape[3])


@triton.jit
def _fwd_step(
    acc, m_i, l_i, row_bad,  # the online softmax's state
    q,
    k_base, v_base, km_base, am_base,
    DescK, DescV, kv_b, kv_h,  # USE_TMA: K/V descriptors, this program's batch and KV head
    start_n,
    offs_m, offs_n0, offs_d,
    n_q, n_k, diag, window_left, window_right,
    qk_scale,
    softcap,
    head_dim,
    stride_kn, stride_kd, stride_vn, stride_vd,
    stride_kmn, stride_amm, stride_amn,
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
    rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT: tl.constexpr,
    FOLD_SCALE: tl.constexpr,
):  # fmt: skip
    """One key block [start_n, start_n + BLOCK_N) into the online softmax. MASKED=False is
    the plain path: every pair of the block may attend and every row and key is in range.
    USE_TMA: K and V tiles come through the descriptors DescK/DescV (kernels/hopper.py), at
    (kv_b, kv_h, start_n); TMA reads rows past N and columns past D as 0, which is what the
    masked loads below give, so everything after the loads is the same on both paths."""
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
    # NOTE: scale folding (FOLD_SCALE, set where qk_scale > 0) — without a cap or a bias the
    # scores stay unscaled: the row maximum is taken on them and scaled once per row, and the
    # scale rides in the exponent's FMA, s·c - m (one instruction per score instead of a
    # multiply and a subtract, as Triton's fused-attention tutorial does). For c > 0, rounding
    # is monotone, so max(s)·c is bitwise max(s·c), and -inf·c stays -inf on excluded pairs.
    fold: tl.constexpr = FOLD_SCALE and not HAS_SOFTCAP and MASK_KIND != 2
    s = _scores(q, k, DOT_PRECISION, UPCAST_DOT)
    if not fold:
        s = s * qk_scale
    if HAS_SOFTCAP:
        # NOTE: soft-capping (module docstring): the logits, before the bias and the masks.
        s, _ = _softcap(s, softcap)
    if MASKED:
        allowed, bias = _allowed_pairs(
            offs_m, offs_n, n_q, n_k, diag, window_left, window_right,
            km_base, stride_kmn, am_base, stride_amm, stride_amn,
            HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT, HAS_KEY_MASK, MASK_KIND,
        )  # fmt: skip
        if MASK_KIND == 2:
            s = s + bias
        s = tl.where(allowed, s, float("-inf"))
        if GUARD:
            # NOTE: excluded values (module docstring).
            # Checked in fp32: the interpreter holds bf16 as raw bits.
            v32 = v.to(tl.float32)
            v_bad = (v32 != v32) | (tl.abs(v32) == float("inf"))
            col_bad = tl.max(v_bad.to(tl.int32), 1)
            row_bad = row_bad | tl.max((allowed & (col_bad[None, :] > 0)).to(tl.int32), 1)
            v = tl.where(v_bad, 0.0, v)
    elif MASK_KIND == 2:
        # NOTE: full tiles of an additive mask — every entry is finite... or +inf/NaN, which
        # is no exclusion (contract item 3) — so the bias is added without any selection.
        s = s + _bias_tile(am_base, offs_m, offs_n, stride_amm, stride_amn)
    if fold:
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
    else:
        m_new = tl.maximum(m_i, tl.max(s, 1))
    # NOTE: empty rows (module docstring).
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    if fold:
        p = tl.math.exp2(s * qk_scale - m_safe[:, None])
    else:
        p = tl.math.exp2(s - m_safe[:, None])
    alpha = tl.math.exp2(m_i - m_safe)
    l_i = l_i * alpha + tl.sum(p, 1)
    if HAS_DROPOUT:
        # NOTE: dropout — the sum keeps every p (the softmax is of all allowed keys); only
        # the product with V drops, and the output is scaled by 1 / (1 - p) at the end.
        p = tl.where(_kept(rng_seed, rng_base, rng_stride, offs_m, offs_n, dropout_p), p, 0.0)
    acc = acc * alpha[:, None]
    if UPCAST_DOT == 2:
        acc = tl.dot(p, v.to(tl.float32), acc, input_precision=DOT_PRECISION)
    else:
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)
    return acc, m_new, l_i, row_bad


@triton.jit
def _rng_width(seq_k):
    """Philox counters per query row: one per 4 keys (``_kept``)."""
    return (seq_k + 3) // 4


@triton.jit
def _kept(seed, base, stride, offs_m, offs_n, dropout_p):
    """Dropout's keep mask of the (offs_m, offs_n) tile. One Philox4x32 call
    (``tl.randint4x``) serves 4 consecutive keys of a row: counter ``base + m * stride +
    n // 4`` (``stride`` = ``_rng_width(Nk)``, ``base`` = (b * Hq + h) * Nq * stride of the
    (sequence, query head)), its four 32-bit outputs the draws of keys n // 4 * 4 .. + 3, a key
    kept where its draw is at least p * 2^32: the same bits in the forward and in both backward
    kernels, any tiling whose key blocks start at a multiple of 4 (all do).

    Why four at once: ``tl.rand`` keeps one of Philox's four outputs, and with it dropout made
    the forward 5.1x and the backward 3.2x slower than without (FeatureSpeedSuite, H100,
    164348c): the random bits, not the matrix products, bounded the kernels."""
    BLOCK_N: tl.constexpr = offs_n.shape[0]
    cols = tl.min(offs_n, axis=0) // 4 + tl.arange(0, BLOCK_N // 4)
    counters = base + offs_m[:, None].to(tl.int64) * stride + cols[None, :]
    r0, r1, r2, r3 = tl.randint4x(seed, counters)
    draws = tl.reshape(tl.join(tl.join(r0, r1), tl.join(r2, r3)), (offs_m.shape[0], BLOCK_N))
    threshold = (tl.full((1, 1), 4294967296.0, tl.float32) * dropout_p).to(tl.uint32)  # p * 2^32
    return draws >= threshold


@triton.jit
def _dropout_keep(Keep, Seed, dropout_p, heads, seq_q, seq_k, BLOCK: tl.constexpr):
    """Grid: (cdiv(Nq, BLOCK), B * Hq). Keep (B, Hq, Nq, Nk) uint8, contiguous: the mask
    ``_kept`` gives the kernels (for tests and the reference: passes.dropout_keep)."""
    pid_m, pid_bh = tl.program_id(0), tl.program_id(1)
    offs_m = pid_m * BLOCK + tl.arange(0, BLOCK)
    stride = _rng_width(seq_k)
    base = pid_bh.to(tl.int64) * seq_q * stride
    for start_n in range(0, seq_k, BLOCK):
        offs_n = start_n + tl.arange(0, BLOCK)
        kept = _kept(tl.load(Seed), base, stride, offs_m, offs_n, dropout_p)
        in_range = (offs_m < seq_q)[:, None] & (offs_n < seq_k)[None, :]
        tl.store(Keep + pid_bh.to(tl.int64) * seq_q * seq_k + offs_m[:, None] * seq_k
                 + offs_n[None, :], kept.to(tl.uint8),
                 mask=in_range)  # fmt: skip


@triton.jit
def _scores(a, b, DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr):
    """``a @ b^T`` in fp32: the logits before the scale (q k^T, or k q^T in dK/dV).

    UPCAST_DOT (interpreter only; 0 on a GPU): 1 for fp16/fp32 inputs, 2 for bf16 (whose
    other dots go through fp32 as well, DESIGN.md's interpreter pitfall). Under the
    interpreter the logits are taken in fp64 and rounded once: numpy's BLAS sums q k^T and
    k q^T in different orders (OpenBLAS 0.3.31, 2026-11-25: up to 0.03 apart at |s| ~ 2e5 in
    fp32), and with logits that large the backward's recomputed probabilities then miss the
    forward's LSE by ~0.3 % (the large_logits family failed its accuracy rule on CPU). The
    GPU kernels pass that family at GPU size (``pytest --gpu``)."""
    if UPCAST_DOT:
        a64 = a.to(tl.float64)
        b64 = b.to(tl.float64)
        return tl.dot(a64, tl.trans(b64), input_precision="ieee").to(tl.float32)
    return tl.dot(a, tl.trans(b), input_precision=DOT_PRECISION)


@triton.jit
def _tanh(x):
    """tanh in fp32 from exp2 alone (``tl.tanh``/libdevice differ between Triton versions
    and the interpreter). Exactly ±1 for ±inf and once e^{-2|x|} is below half an ulp of 1
    (|x| > ~9), NaN only for NaN: the exponential is e^{-2|x|} in (0, 1], never overflowing.
    Near 0, where ``1 - e^{-2|x|}`` loses digits, tanh's odd Taylor polynomial keeps the
    relative error at a few ulp (the first omitted term is below 1e-8 relative there)."""
    a = tl.abs(x)
    e = tl.math.exp2(a * (-2.0 * LOG2E))
    t = (1.0 - e) / (1.0 + e)
    # Evaluated on |x| clamped to the polynomial's range: no overflow in the unused branch.
    a_small = tl.minimum(a, 0.25)
    x2 = a_small * a_small
    poly = a_small * (
        1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0 + x2 * (62.0 / 2835.0))))
    )
    t = tl.where(a < 0.25, poly, t)
    return tl.where(x < 0.0, -t, t)


@triton.jit
def _softcap(s, softcap):
    """Soft-capping of log2-domain scores ``s = q·k · scale·log2(e)`` -> (capped scores in the
    log2 domain, ``tanh(q·k·scale / softcap)``; the backward's derivative is 1 - tanh²).

    The natural-domain cap ``softcap·tanh(x / softcap)`` of ``x = s / log2(e)``, times
    log2(e), is ``c·tanh(s / c)`` with ``c = softcap·log2(e)``: the same function applied in
    the log2 domain, so the scores never leave it.

    An infinite score (an Inf in a q or k row) comes out NaN, not ±c: tanh(±inf) = ±1 would
    turn an attended non-finite input into a finite logit, against contract item 3. The
    callers replace excluded pairs by -inf afterwards, so only attended pairs see the NaN."""
    c = softcap * LOG2E
    t = _tanh(s * (1.0 / c))
    capped = tl.where(tl.abs(s) == float("inf"), float("nan"), c * t)
    return capped, t


@triton.jit
def _bias_tile(am_base, offs_m, offs_n, stride_amm, stride_amn):
    """An additive mask's tile (log2 units), unmasked: only called on in-range tiles."""
    am = tl.load(am_base + offs_m[:, None] * stride_amm + offs_n[None, :] * stride_amn)
    return am.to(tl.float32) * LOG2E


@triton.jit
def _list_start(idx_ptr, t, SUB: tl.constexpr, SPARSE_BLOCK: tl.constexpr,
                BLOCK: tl.constexpr):  # fmt: skip
    """Start of the t-th kernel block when walking a tile list: tile t // SUB of the list,
    kernel block t % SUB inside it (SUB = SPARSE_BLOCK // BLOCK)."""
    tile = tl.load(idx_ptr + t // SUB)
    return tile * SPARSE_BLOCK + (t % SUB) * BLOCK


@triton.jit
def _tma_store(desc, b, h, row, tile):
    """Store a (rows, D) tile at row ``row`` of head (b, h) through a [1, 1, rows, D] tensor
    descriptor; TMA writes nothing out of bounds (rows past N, columns past D)."""
    desc.store([b, h, row, 0], tile.reshape(1, 1, tile.shape[0], tile.shape[1]))


@triton.jit
def _fwd_inner(
    acc, m_i, l_i, row_bad,
    q,
    k_base, v_base, km_base, am_base,
    DescK, DescV, kv_b, kv_h,
    start, end, idx_ptr,
    offs_m, offs_n0, offs_d,
    n_q,
    n_k,
    diag,
    window_left,
    window_right,
    qk_scale, softcap, head_dim,
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
    rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT: tl.constexpr,
    FOLD_SCALE: tl.constexpr,
):  # fmt: skip
    """Key blocks [start, end) step BLOCK_N, or (LISTED) the kernel blocks t in [start, end)
    of the tile list at ``idx_ptr`` (see ``_list_start``). USE_TMA: DescK/DescV and
    (kv_b, kv_h) pass through to ``_fwd_step``, which loads the tiles through them."""
    if LISTED:
        for t in tl.range(start, end):
            start_n = _list_start(idx_ptr, t, SPARSE_K // BLOCK_N, SPARSE_K, BLOCK_N)
            acc, m_i, l_i, row_bad = _fwd_step(
                acc, m_i, l_i, row_bad, q, k_base, v_base, km_base, am_base, DescK, DescV, kv_b,
                kv_h, start_n, offs_m, offs_n0, offs_d, n_q, n_k, diag, window_left,
                window_right, qk_scale, softcap, head_dim, stride_kn, stride_kd, stride_vn,
                stride_vd, stride_kmn, stride_amm, stride_amn, MASKED, GUARD, HAS_WINDOW_LEFT,
                HAS_WINDOW_RIGHT, HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP, EVEN_D, USE_TMA,
                DOT_PRECISION, UPCAST_DOT,
                rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT, FOLD_SCALE,
            )  # fmt: skip
    else:
        for start_n in tl.range(start, end, BLOCK_N):
            acc, m_i, l_i, row_bad = _fwd_step(
                acc, m_i, l_i, row_bad, q, k_base, v_base, km_base, am_base, DescK, DescV, kv_b,
                kv_h, start_n, offs_m, offs_n0, offs_d, n_q, n_k, diag, window_left,
                window_right, qk_scale, softcap, head_dim, stride_kn, stride_kd, stride_vn,
                stride_vd, stride_kmn, stride_amm, stride_amn, MASKED, GUARD, HAS_WINDOW_LEFT,
                HAS_WINDOW_RIGHT, HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP, EVEN_D, USE_TMA,
                DOT_PRECISION, UPCAST_DOT,
                rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT, FOLD_SCALE,
            )  # fmt: skip
    return acc, m_i, l_i, row_bad


@triton.jit
def _key_ranges(
    m_start,
    n_k,
    diag,
    window_left,
    window_right,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_WINDOW_LEFT: tl.constexpr,
    HAS_WINDOW_RIGHT: tl.constexpr,
):
    """Key-block boundaries for query rows [m_start, m_start + BLOCK_M) of a call without
    key_mask / attn_mask (those take the tile lists of ``safeattn.block_mask``):
    [lo, full_lo) masked, [full_lo, full_hi) fully allowed, [full_hi, hi) masked."""
    m_last = m_start + BLOCK_M - 1
    lo = 0
    hi = n_k
    if HAS_WINDOW_RIGHT:
        hi = tl.minimum(hi, tl.maximum(m_last + diag + window_right + 1, 0))
    if HAS_WINDOW_LEFT:
        lo = tl.maximum(m_start + diag - window_left, 0)
        lo = tl.minimum(lo, hi)
        lo = (lo // BLOCK_N) * BLOCK_N
    full_lo = lo
    full_hi = (n_k // BLOCK_N) * BLOCK_N
    if HAS_WINDOW_LEFT:
        first_full = tl.maximum(m_last + diag - window_left, 0)
        full_lo = tl.maximum(full_lo, ((first_full + BLOCK_N - 1) // BLOCK_N) * BLOCK_N)
    if HAS_WINDOW_RIGHT:
        last_full = tl.maximum(m_start + diag + window_right + 1, 0)
        full_hi = tl.minimum(full_hi, (last_full // BLOCK_N) * BLOCK_N)
    full_lo = tl.minimum(full_lo, hi)
    full_hi = tl.maximum(tl.minimum(full_hi, hi), full_lo)
    return lo, full_lo, full_hi, hi


@triton.jit
def _fwd_rows(
    q, k_base, v_base, km_base, am_base, DescK, DescV, kv_b, kv_h, FullNum, FullIdx, PartNum,
    PartIdx, m_start, b64, h,
    offs_m, offs_n0, offs_d, n_q, n_k, diag, window_left, window_right, qk_scale, softcap, head_dim,
    stride_kn, stride_kd, stride_vn, stride_vd, stride_kmn, stride_amm, stride_amn,
    stride_snb, stride_snh, stride_sib, stride_sih, stride_sir,
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
    rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT: tl.constexpr,
    FOLD_SCALE: tl.constexpr,
):  # fmt: skip
    """All key blocks of one program's rows: (acc, m_i, l_i, row_bad) of the online softmax.

    SPARSE: the row block's full key tiles (plain path), then its partial ones (masked);
    empty tiles are never visited. Otherwise: the analytic ranges of ``_key_ranges``."""
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    row_bad = tl.zeros([BLOCK_M], dtype=tl.int32)

    if SPARSE:
        tl.static_assert(SPARSE_Q % BLOCK_M == 0 and SPARSE_K % BLOCK_N == 0)
        SUB: tl.constexpr = SPARSE_K // BLOCK_N
        tile_m = m_start // SPARSE_Q
        num_off = b64 * stride_snb + h.to(tl.int64) * stride_snh + tile_m
        idx_off = b64 * stride_sib + h.to(tl.int64) * stride_sih + tile_m * stride_sir
        n_full = tl.load(FullNum + num_off) * SUB
        n_part = tl.load(PartNum + num_off) * SUB
        acc, m_i, l_i, row_bad = _fwd_inner(
            acc, m_i, l_i, row_bad, q, k_base, v_base, km_base, am_base, DescK, DescV, kv_b,
            kv_h, 0, n_full,
            FullIdx + idx_off, offs_m, offs_n0, offs_d, n_q, n_k, diag, window_left, window_right,
            qk_scale, softcap, head_dim, stride_kn, stride_kd, stride_vn, stride_vd, stride_kmn,
            stride_amm, stride_amn, False, GUARD, True, SPARSE_K, HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT,
            HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP, BLOCK_N, EVEN_D, USE_TMA, DOT_PRECISION,
            UPCAST_DOT,
            rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT, FOLD_SCALE,
        )  # fmt: skip
        acc, m_i, l_i, row_bad = _fwd_inner(
            acc, m_i, l_i, row_bad, q, k_base, v_base, km_base, am_base, DescK, DescV, kv_b,
            kv_h, 0, n_part,
            PartIdx + idx_off, offs_m, offs_n0, offs_d, n_q, n_k, diag, window_left, window_right,
            qk_scale, softcap, head_dim, stride_kn, stride_kd, stride_vn, stride_vd, stride_kmn,
            stride_amm, stride_amn, True, GUARD, True, SPARSE_K, HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT,
            HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP, BLOCK_N, False, USE_TMA, DOT_PRECISION,
            UPCAST_DOT,
            rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT, FOLD_SCALE,
        )  # fmt: skip
    else:
        lo, full_lo, full_hi, hi = _key_ranges(
            m_start, n_k, diag, window_left, window_right,
            BLOCK_M, BLOCK_N, HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT,
        )  # fmt: skip
        acc, m_i, l_i, row_bad = _fwd_inner(
            acc, m_i, l_i, row_bad, q, k_base, v_base, km_base, am_base, DescK, DescV, kv_b,
            kv_h, lo, full_lo, FullIdx,
            offs_m, offs_n0, offs_d, n_q, n_k, diag, window_left, window_right, qk_scale, softcap,
            head_dim, stride_kn, stride_kd, stride_vn, stride_vd, stride_kmn, stride_amm,
            stride_amn, True, GUARD, False, SPARSE_K, HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT,
            HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP, BLOCK_N, False, USE_TMA, DOT_PRECISION,
            UPCAST_DOT,
            rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT, FOLD_SCALE,
        )  # fmt: skip
        acc, m_i, l_i, row_bad = _fwd_inner(
            acc, m_i, l_i, row_bad, q, k_base, v_base, km_base, am_base, DescK, DescV, kv_b,
            kv_h, full_lo, full_hi, FullIdx,
            offs_m, offs_n0, offs_d, n_q, n_k, diag, window_left, window_right, qk_scale, softcap,
            head_dim, stride_kn, stride_kd, stride_vn, stride_vd, stride_kmn, stride_amm,
            stride_amn, False, GUARD, False, SPARSE_K, HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT,
            HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP, BLOCK_N, EVEN_D, USE_TMA, DOT_PRECISION,
            UPCAST_DOT,
            rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT, FOLD_SCALE,
        )  # fmt: skip
        acc, m_i, l_i, row_bad = _fwd_inner(
            acc, m_i, l_i, row_bad, q, k_base, v_base, km_base, am_base, DescK, DescV, kv_b,
            kv_h, full_hi, hi, FullIdx,
            offs_m, offs_n0, offs_d, n_q, n_k, diag, window_left, window_right, qk_scale, softcap,
            head_dim, stride_kn, stride_kd, stride_vn, stride_vd, stride_kmn, stride_amm,
            stride_amn, True, GUARD, False, SPARSE_K, HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT,
            HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP, BLOCK_N, False, USE_TMA, DOT_PRECISION,
            UPCAST_DOT,
            rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT, FOLD_SCALE,
        )  # fmt: skip

    return acc, m_i, l_i, row_bad


@triton.jit(do_not_specialize=["seq_q", "seq_k", "window_left", "window_right", "sched_chunk"])
def _attn_fwd(
    Q,
    K,
    V,
    Out,
    Lse2,
    KeyMask,
    AttnMask,
    CuSeqQ,
    CuSeqK,
    FullNum,
    FullIdx,
    PartNum,
    PartIdx,
    Leaked,  # int32 per program: its output needs the guarded redo (where a key can be excluded)
    Seed,  # HAS_DROPOUT: int64 (1,), the Philox seed; unused otherwise
    DescQ,  # USE_TMA: [1, 1, BLOCK_M, BLOCK_D] tensor descriptors of q, k, v, out
    DescK,  # ([1, 1, BLOCK_N, BLOCK_D] for k and v); None otherwise
    DescV,
    DescO,
    qk_scale,
    softcap,  # the cap of HAS_SOFTCAP (natural-log units); unused otherwise
    dropout_p,  # HAS_DROPOUT: the probability of dropping a pair
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_lb, stride_lh, stride_lm,
    stride_kmb, stride_kmn,
    stride_amb, stride_amh, stride_amm, stride_amn,
    stride_snb, stride_snh, stride_sib, stride_sih, stride_sir,
    heads_q,
    group,
    seq_q,
    seq_k,
    window_left,
    window_right,
    head_dim,
    sched_chunk,  # (b, h) pairs per chunk of the launch order (_program_ids, kernels/schedule.py)
    IS_VARLEN: tl.constexpr,
    BOTTOM_RIGHT: tl.constexpr,
    HAS_WINDOW_LEFT: tl.constexpr,
    HAS_WINDOW_RIGHT: tl.constexpr,
    HAS_KEY_MASK: tl.constexpr,
    MASK_KIND: tl.constexpr,  # 0 none, 1 bool (True = attend), 2 additive float
    HAS_SOFTCAP: tl.constexpr,  # scores capped as softcap·tanh(s / softcap)
    SPARSE: tl.constexpr,  # walk the tile lists of safeattn.block_mask (key_mask/attn_mask)
    SPARSE_Q: tl.constexpr,
    SPARSE_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    EVEN_D: tl.constexpr,  # head_dim == BLOCK_D: no masking along D
    USE_TMA: tl.constexpr,  # the Hopper path: tiles through DescQ/K/V/O (kernels/hopper.py)
    DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,  # interpreter only (0 on a GPU): see _scores
    GUARD: tl.constexpr = False,  # the second launch: redo the programs flagged in Leaked
    HAS_DROPOUT: tl.constexpr = False,  # drop pairs with probability dropout_p (_kept)
    FOLD_SCALE: tl.constexpr = True,  # only for qk_scale > 0 (_fwd_step): passes.forward sets it
):  # fmt: skip
    """Grid: (cdiv(max Nq, BLOCK_M), B * Hq). Writes Out rows and Lse2 (log2-domain LSE).

    Two launches where an in-range key can be excluded (causal, a window or a mask): the
    first (GUARD=False) writes, per program, whether its accumulator came out non-finite
    (``Leaked``); the second (GUARD=True) returns at once unless flagged, and redoes the
    flagged programs with the excluded-value guard, overwriting their Out and Lse2 rows.
    Why not a second pass inside one launch: it kept every tile of the first pass live
    across the branch, and the kernel spilled (H100, causal D=128 M128-N128-w8: a 1,568-byte
    stack frame with it, none without; docs/perf/spill_check_h100_2026-11-27.log)."""
    MAY_EXCLUDE: tl.constexpr = (
        HAS_WINDOW_LEFT or HAS_WINDOW_RIGHT or HAS_KEY_MASK or MASK_KIND != 0
    )
    if GUARD:
        # The redo's grid is (cdiv(blocks, span), B * Hq) (redo_grid, the same span): a program
        # reads the flags of its span of query blocks at once and redoes only the flagged ones.
        # A grid as large as the first launch's took 11-12 us to find nothing flagged: one
        # program per SM at a time, each waiting for its flag (docs/perf/session_d256_2026-12-02).
        n_m = tl.cdiv(seq_q, BLOCK_M)
        pid_bh = tl.program_id(1)
        first, span, flags = _redo_span(Leaked + pid_bh * n_m, n_m)
        if tl.max(flags, 0) != 0:
            for i in tl.range(0, span, num_stages=1):  # the body pipelines its own loops
                pid_m = first + i
                if _redo_flag(flags, i) != 0:
                    leak_at = Leaked + pid_bh * n_m + pid_m
                    _fwd_program(
                        pid_m, pid_bh, leak_at, MAY_EXCLUDE, Q, K, V, Out, Lse2, KeyMask, AttnMask,
                        CuSeqQ, CuSeqK, FullNum, FullIdx, PartNum, PartIdx, Seed, DescQ, DescK,
                        DescV, DescO, qk_scale, softcap, dropout_p, stride_qb, stride_qh,
                        stride_qm, stride_qd, stride_kb, stride_kh, stride_kn, stride_kd,
                        stride_vb, stride_vh, stride_vn, stride_vd, stride_ob, stride_oh,
                        stride_om, stride_od, stride_lb, stride_lh, stride_lm, stride_kmb,
                        stride_kmn, stride_amb, stride_amh, stride_amm, stride_amn, stride_snb,
                        stride_snh, stride_sib, stride_sih, stride_sir, heads_q, group, seq_q,
                        seq_k, window_left, window_right, head_dim, IS_VARLEN, BOTTOM_RIGHT,
                        HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT, HAS_KEY_MASK, MASK_KIND, HAS_SOFTCAP,
                        SPARSE, SPARSE_Q, SPARSE_K, BLOCK_M, BLOCK_N, BLOCK_D, EVEN_D, USE_TMA,
                        DOT_PRECISION, UPCAST_DOT, GUARD, HAS_DROPOUT, FOLD_SCALE,
                    )  # fmt: skip
    else:
        # Under causal, a key mask or a block mask the later rows see the most keys: the last
        # query blocks start first, so the last wave is light. The Hopper path also takes the
        # (b, h) pairs in chunks (_program_ids); the portable kernels keep one pair after
        # another, as the remapped ids cost them registers (_program_ids' note).
        if USE_TMA:
            pid_m, pid_bh = _program_ids(sched_chunk, True)
        else:
            pid_m = tl.num_programs(0) - 1 - tl.program_id(0)
            pid_bh = tl.program_id(1)
        leak_at = Leaked + pid_bh * tl.num_programs(0) + pid_m
        _fwd_program(
            pid_m, pid_bh, leak_at, MAY_EXCLUDE, Q, K, V, Out, Lse2, KeyMask, AttnMask, CuSeqQ,
            CuSeqK, FullNum, FullIdx, PartNum, PartIdx, Seed, DescQ, DescK, DescV, DescO, qk_scale,
            softcap, dropout_p, stride_qb, stride_qh, stride_qm, stride_qd, stride_kb, stride_kh,
            stride_kn, stride_kd, stride_vb, stride_vh, stride_vn, stride_vd, stride_ob, stride_oh,
            stride_om, stride_od, stride_lb, stride_lh, stride_lm, stride_kmb, stride_kmn,
            stride_amb, stride_amh, stride_amm, stride_amn, stride_snb, stride_snh, stride_sib,
            stride_sih, stride_sir, heads_q, group, seq_q, seq_k, window_left, window_right,
            head_dim, IS_VARLEN, BOTTOM_RIGHT, HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT, HAS_KEY_MASK,
            MASK_KIND, HAS_SOFTCAP, SPARSE, SPARSE_Q, SPARSE_K, BLOCK_M, BLOCK_N, BLOCK_D, EVEN_D,
            USE_TMA, DOT_PRECISION, UPCAST_DOT, GUARD, HAS_DROPOUT, FOLD_SCALE,
        )  # fmt: skip


@triton.jit
def _fwd_program(
    pid_m, pid_bh, leak_at, MAY_EXCLUDE: tl.constexpr, Q, K, V, Out, Lse2, KeyMask, AttnMask,
    CuSeqQ, CuSeqK, FullNum, FullIdx, PartNum, PartIdx, Seed, DescQ, DescK, DescV, DescO, qk_scale,
    softcap, dropout_p, stride_qb, stride_qh, stride_qm, stride_qd, stride_kb, stride_kh,
    stride_kn, stride_kd, stride_vb, stride_vh, stride_vn, stride_vd, stride_ob, stride_oh,
    stride_om, stride_od, stride_lb, stride_lh, stride_lm, stride_kmb, stride_kmn, stride_amb,
    stride_amh, stride_amm, stride_amn, stride_snb, stride_snh, stride_sib, stride_sih, stride_sir,
    heads_q, group, seq_q, seq_k, window_left, window_right, head_dim, IS_VARLEN: tl.constexpr,
    BOTTOM_RIGHT: tl.constexpr, HAS_WINDOW_LEFT: tl.constexpr, HAS_WINDOW_RIGHT: tl.constexpr,
    HAS_KEY_MASK: tl.constexpr, MASK_KIND: tl.constexpr, HAS_SOFTCAP: tl.constexpr, SPARSE:
    tl.constexpr, SPARSE_Q: tl.constexpr, SPARSE_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N:
    tl.constexpr, BLOCK_D: tl.constexpr, EVEN_D: tl.constexpr, USE_TMA: tl.constexpr,
    DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr, GUARD: tl.constexpr, HAS_DROPOUT:
    tl.constexpr, FOLD_SCALE: tl.constexpr,
):  # fmt: skip
    """One program of ``_attn_fwd``: query block ``pid_m`` of the (b, h) pair ``pid_bh``,
    its flag at ``leak_at``; the other arguments are the kernel's."""
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
        offs_m = m_start + tl.arange(0, BLOCK_M)
        offs_n0 = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_D)
        mask_m = offs_m < n_q
        mask_d = offs_d < head_dim

        if USE_TMA:  # never varlen (q_start = 0): rows past Nq read as 0, as the masked load
            q = _tma_tile(DescQ, b, h, m_start)
        else:
            q_base = Q + b64 * stride_qb + h.to(tl.int64) * stride_qh
            q_base += q_start.to(tl.int64) * stride_qm
            q = tl.load(
                q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=mask_m[:, None] & mask_d[None, :],
                other=0.0,
            )
        k_base = K + b64 * stride_kb + h_kv.to(tl.int64) * stride_kh
        k_base += k_start.to(tl.int64) * stride_kn
        v_base = V + b64 * stride_vb + h_kv.to(tl.int64) * stride_vh
        v_base += k_start.to(tl.int64) * stride_vn
        km_base = KeyMask + b64 * stride_kmb
        am_base = AttnMask + b64 * stride_amb + h.to(tl.int64) * stride_amh
        rng_seed, rng_stride = 0, _rng_width(seq_k)
        rng_base = (b64 * heads_q + h) * seq_q * rng_stride
        if HAS_DROPOUT:
            rng_seed = tl.load(Seed)

        acc, m_i, l_i, row_bad = _fwd_rows(
            q, k_base, v_base, km_base, am_base, DescK, DescV, b, h_kv, FullNum, FullIdx, PartNum,
            PartIdx, m_start, b64, h, offs_m, offs_n0, offs_d, n_q, n_k, diag, window_left,
            window_right, qk_scale, softcap, head_dim, stride_kn, stride_kd, stride_vn, stride_vd,
            stride_kmn, stride_amm, stride_amn, stride_snb, stride_snh, stride_sib, stride_sih,
            stride_sir, GUARD, HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT, HAS_KEY_MASK, MASK_KIND,
            HAS_SOFTCAP, SPARSE, SPARSE_Q, SPARSE_K, BLOCK_M, BLOCK_N, BLOCK_D, EVEN_D, USE_TMA,
            DOT_PRECISION, UPCAST_DOT, rng_seed, rng_base, rng_stride, dropout_p, HAS_DROPOUT,
            FOLD_SCALE,
        )  # fmt: skip
        # NOTE: excluded values — a non-finite accumulator means NaN/Inf in V reached the
        # product, whether from an allowed key (the guard marks the row) or an excluded one (the
        # guard keeps it out): the second launch redoes these programs with the guard.
        # Only causal, a window or a mask can exclude an in-range key: without them nothing can
        # leak, and there is no second launch.
        if MAY_EXCLUDE and not GUARD:
            acc_bad = tl.max(((acc != acc) | (tl.abs(acc) == float("inf"))).to(tl.int32))
            tl.store(leak_at, acc_bad)

        # NOTE: empty rows — l_i == 0 exactly when no key was allowed.
        empty = l_i == 0.0
        out = acc / tl.where(empty, 1.0, l_i)[:, None]
        if HAS_DROPOUT:
            out = out * (1.0 / (1.0 - dropout_p))
        out = tl.where((row_bad > 0)[:, None], float("nan"), out)
        lse2 = tl.where(empty, float("-inf"), m_i + tl.math.log2(tl.where(empty, 1.0, l_i)))

        if USE_TMA:
            _tma_store(DescO, b, h, m_start, out.to(Out.dtype.element_ty))
        else:
            o_base = Out + b64 * stride_ob + h.to(tl.int64) * stride_oh
            o_base += q_start.to(tl.int64) * stride_om
            tl.store(
                o_base + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
                out.to(Out.dtype.element_ty),
                mask=mask_m[:, None] & mask_d[None, :],
            )
        l_base = Lse2 + b64 * stride_lb + h.to(tl.int64) * stride_lh
        l_base += q_start.to(tl.int64) * stride_lm
        tl.store(l_base + offs_m * stride_lm, lse2, mask=mask_m)
