"""Kernel launches with their config choice, and the record of what was chosen and launched.

:mod:`safeattn.kernels.passes` lays out each kernel's arguments and grid and hands it to
:func:`_launch` (the preprocess kernel to :func:`launch_preprocess`); ``ops.py`` wraps the
passes as PyTorch operators. Everything receives an already-validated
:class:`safeattn._inputs.AttnProblem`.

Config choice (:func:`_launch`), once per process and tune key: the committed tuning table
of this GPU, else the user's tuning cache, else the tuner, whose choice is then persisted
(``tuning.py`` says why and where); single-config mode and the interpreter skip all three.
:func:`config_sources` says which one each choice came from.

CUDA graphs: a launch is capturable once its kernel is compiled and its config chosen; neither
can happen in a capture (tuning synchronises, compiling loads a module). A missing tune key or
specialisation (new strides) in a capture raises a RuntimeError asking for an eager warm-up
call; a fallback config would compile inside the capture and differ from the eager results.

Why one file over ~400 lines: the config choice and the tune key it is made under (``Meta``'s
flags, and the builds a call takes: ``Meta.no_tail``, the GQA loop) change together, and the
CUDA-graph errors here are that choice's own failure modes.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
import triton

from .._inputs import capturing
from ..gpu_limits import arch_name
from . import configs, interpreter_compat, tuning
from .backward import _bwd_preprocess
from .configs import KernelConfig

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
if INTERPRET:
    interpreter_compat.apply()  # triton 3.6's interpreter with NumPy 2.x


@dataclass(frozen=True)
class KernelResources:
    """What one compiled kernel, as last launched, uses (GPU only)."""

    name: str
    config: str
    shared_bytes: int
    registers: int
    spills: int  # local-memory bytes per thread (Triton reports 4-byte words; converted)
    source: str = ""  # where the config came from: one of SOURCES


# Where a launched config came from: the committed table, the user's tuning cache, the tuner
# (this process), single-config mode (first fitting candidate). The interpreter's fixed
# config is recorded nowhere (nothing is compiled).
SOURCES: tuple[str, ...] = ("table", "cache", "tuned", "single")

_LAUNCHED: dict[str, KernelResources] = {}  # by kernel name
# By (*configs.tune_key(...), GPU slug):
_CHOSEN: dict[tuple, KernelConfig] = {}
_SOURCES: dict[tuple, str] = {}
_TIMINGS: dict[tuple, list[tuple[str, float]]] = {}  # tuner evidence: key -> [(config, ms)]


def launched_kernels() -> dict[str, KernelResources]:
    """Resources of the most recent launch of each kernel (``forward``, ``bwd_dq``, ...).

    Empty on CPU / under the interpreter, where nothing is compiled.
    """
    return dict(_LAUNCHED)


def chosen_configs() -> dict[tuple, KernelConfig]:
    """The configs chosen so far in this process, keyed by ``(*configs.tune_key(...), gpu)``
    (``gpu``: the device's slug, e.g. ``nvidia-h200``)."""
    return dict(_CHOSEN)


def config_sources() -> dict[tuple, str]:
    """Where each of :func:`chosen_configs` came from (one of :data:`SOURCES`), same keys."""
    return dict(_SOURCES)


def tuning_timings() -> dict[tuple, list[tuple[str, float]]]:
    """What the tuner measured in this process for each key it tuned (same keys):
    ``[(config, median ms), ...]``; a key read from the table or the cache has none."""
    return dict(_TIMINGS)


def clear_choices() -> None:
    """Forget this process's choices, launches and read tables, as a new process starts
    (tests and tools; the persisted cache stays)."""
    for memo in (_LAUNCHED, _CHOSEN, _SOURCES, _TIMINGS):
        memo.clear()
    tuning.clear()


@dataclass(frozen=True)
class Meta:
    """The scalar part of a problem (hashable; travels through autograd's ctx)."""

    varlen: bool
    batch: int
    heads_q: int
    heads_kv: int
    seq_q: int
    seq_k: int
    head_dim: int
    bottom_right: bool
    window_left: int
    window_right: int
    has_key_mask: bool
    mask_kind: int  # 0 none, 1 bool, 2 additive float
    scale: float
    deterministic: bool
    sparse_q: int = 0  # tile of the block-mask summary (0: no summary, analytic ranges)
    sparse_k: int = 0
    softcap: float = 0.0  # 0.0: off (no HAS_SOFTCAP specialisation)
    tma: bool = False  # the forward's Hopper path (kernels/hopper.py; passes.forward sets it)
    dbias: bool = False  # the backward also writes dBias (passes.backward sets it)
    dropout_p: float = 0.0  # 0.0: off (no HAS_DROPOUT specialisation)

    @property
    def sparse(self) -> bool:
        return self.sparse_q > 0

    @property
    def may_have_empty_rows(self) -> bool:
        """Causal, a window or a mask: some query row may attend to no key. The same test
        as the dK/dV kernel's ``MAY_EMPTY`` on the constexprs :func:`_constexprs` passes."""
        return (self.window_left >= 0 or self.window_right >= 0 or self.has_key_mask
                or self.mask_kind != 0)  # fmt: skip

    def no_tail(self, largest_block: int, kernel: str) -> bool:
        """Does ``kernel`` (``bwd_dkdv`` or ``bwd_dq``) take its NO_TAIL build: no mask, block
        mask or varlen, both lengths multiples of ``largest_block`` (``configs.largest_block``:
        no config has a partial tile), and no window on the side that bounds its trailing
        masked range: the left for dK/dV (query blocks after its keys' full ones), the right
        for dQ (key blocks after its rows' full ones; causal is a right window). That range is
        then empty in every program and is not compiled (``backward._dkdv_head``'s note)."""
        whole = self.seq_q % largest_block == 0 and self.seq_k % largest_block == 0
        masked = self.varlen or self.sparse or self.has_key_mask or self.mask_kind != 0
        edge = {"bwd_dkdv": self.window_left, "bwd_dq": self.window_right}[kernel]
        return whole and not masked and edge < 0

    @property
    def flags(self) -> tuple[tuple[str, int], ...]:
        """What a config choice depends on besides kernel, dtype and sizes: the kernels'
        feature specialisations, and ``deterministic`` (single-config mode). Named, so that
        a tuning table's keys read without this file (``tuning.key_text``). The last four
        only when on: the other keys stay as the tables were swept."""
        flags = (
            ("varlen", int(self.varlen)), ("bottom_right", int(self.bottom_right)),
            ("window_left", int(self.window_left >= 0)),
            ("window_right", int(self.window_right >= 0)),
            ("key_mask", int(self.has_key_mask)),
            ("mask_kind", int(self.mask_kind)),
            ("sparse", int(self.sparse)),
            ("deterministic", int(self.deterministic)),
        )  # fmt: skip
        on = (("softcap", self.softcap > 0), ("tma", self.tma), ("dbias", self.dbias),
              ("dropout", self.dropout_p > 0))  # fmt: skip
        return flags + tuple((name, 1) for name, is_on in on if is_on)


def _constexprs(meta: Meta, dtype: torch.dtype, cfg: KernelConfig) -> dict:
    bd = configs.block_d(meta.head_dim)
    return dict(
        IS_VARLEN=meta.varlen,
        BOTTOM_RIGHT=meta.bottom_right,
        HAS_WINDOW_LEFT=meta.window_left >= 0,
        HAS_WINDOW_RIGHT=meta.window_right >= 0,
        HAS_KEY_MASK=meta.has_key_mask,
        MASK_KIND=meta.mask_kind,
        HAS_SOFTCAP=meta.softcap > 0,
        SPARSE=meta.sparse,
        SPARSE_Q=max(meta.sparse_q, cfg.block_m),  # unused unless SPARSE
        SPARSE_K=max(meta.sparse_k, cfg.block_n),
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        BLOCK_D=bd,
        EVEN_D=bd == meta.head_dim,
        DOT_PRECISION="ieee" if dtype == torch.float32 else "tf32",
        # Interpreter bug (triton-lang/triton#11584): tl.dot multiplies raw bf16 bit patterns.
        UPCAST_DOT=(2 if dtype == torch.bfloat16 else 1) if INTERPRET else 0,  # forward._scores
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )


def _kwargs(meta: Meta, dtype: torch.dtype, cfg: KernelConfig, extra: dict) -> dict:
    """The constexprs of one launch with ``cfg``: the problem's, then ``extra``'s, where a
    value that is a function (of the config: ``hopper.pair_stats``) is called with ``cfg``."""
    own = {name: value(cfg) if callable(value) else value for name, value in extra.items()}
    return {**_constexprs(meta, dtype, cfg), **own}


def _record(name: str, cfg: KernelConfig, compiled, source: str) -> None:
    """Remember what the launch of ``name`` with ``cfg`` uses (:func:`launched_kernels`)."""
    _LAUNCHED[name] = KernelResources(
        name=name,
        config=str(cfg),
        shared_bytes=int(compiled.metadata.shared),
        registers=int(getattr(compiled, "n_regs", -1)),
        spills=_spill_bytes(compiled),
        source=source,
    )


def _spill_bytes(compiled) -> int:
    """Local memory per thread in bytes (Triton's ``n_spills``: LOCAL_SIZE_BYTES / 4, loaded
    here for a ``warmup`` kernel, as Triton reads it only when it loads the binary)."""
    if getattr(compiled, "n_spills", None) is None and hasattr(compiled, "_init_handles"):
        compiled._init_handles()
    words = getattr(compiled, "n_spills", None)
    return -1 if words is None else int(words) * 4


def _smem_limit(device: torch.device) -> int:
    props = torch.cuda.get_device_properties(device)
    limit = getattr(props, "shared_memory_per_block_optin", None)
    if limit:
        return int(limit)
    driver = triton.runtime.driver.active
    return int(driver.utils.get_device_properties(device.index or 0)["max_shared_mem"])


@functools.cache
def _gpu_names(index: int) -> tuple[str, str]:
    """(slug of the device name, architecture) of one CUDA device: the tables' file names."""
    slug = tuning.gpu_slug(torch.cuda.get_device_name(index))
    return slug, arch_name(torch.cuda.get_device_capability(index))


def launch_key(name: str, dtype, meta: Meta, seq_q: int, seq_k: int, extra: dict) -> tuple:
    """The tune key of one launch of kernel ``name`` (``configs.tune_key`` with the problem's
    flags and this kernel's own), as the tables and the cache store it."""
    # A GQA dK/dV program loops over its query-head group, and NO_TAIL compiles another kernel
    # (one whose spills differ): both keyed apart, named only when on. "full": the dense
    # build it first was (no masked range at all), the name the tables' keys carry.
    own = tuple((flag, 1) for flag, const in (("gqa", "GQA"), ("full", "NO_TAIL"))
                if extra.get(const))  # fmt: skip
    return configs.tune_key(name, dtype, meta.head_dim, seq_q, seq_k, meta.flags + own)


def per_config(args: Callable[[KernelConfig], tuple]) -> Callable[[KernelConfig], tuple]:
    """``args`` (a kernel's arguments as a function of its config) computed once per config
    for the call it belongs to: the first launch and its guarded redo (:func:`launch_guarded_redo`),
    or the tuner's warm-up and timing of one candidate, share one tuple. Why: the host's issue
    time, which eager callers pay per call (on an H200, 2026-12-02, 1.2 ms for a backward
    against cuDNN's 0.12): the Hopper path's arguments hold a tensor descriptor per tensor,
    built anew for each launch before."""
    memo: dict[KernelConfig, tuple] = {}

    def of(cfg: KernelConfig) -> tuple:
        got = memo.get(cfg)
        if got is None:
            got = memo[cfg] = args(cfg)
        return got

    return of


def _launch(name, fn, grid, args, meta, dtype, device, seq_q, seq_k, extra=None):
    """Choose a config for ``fn`` (see the module docstring) and launch it; returns it.
    ``args``: the arguments, or a function of the config returning them (the Hopper path's
    descriptors carry the tile shape). ``extra``: constexprs of this kernel alone (GQA), or
    functions of the config that give them (:func:`_kwargs`)."""
    extra = extra or {}
    args_of = args if callable(args) else lambda c: args
    if INTERPRET or device.type != "cuda":
        cfg = configs.interpreter_config(name)
        _run(name, device, fn, grid(cfg), args_of(cfg), _kwargs(meta, dtype, cfg, extra))
        return cfg
    key = launch_key(name, dtype, meta, seq_q, seq_k, extra)
    gpu_names = _gpu_names(
        device.index if device.index is not None else torch.cuda.current_device()
    )
    memo = (*key, gpu_names[0])
    cfg = _CHOSEN.get(memo)
    if cfg is None:
        if capturing(device):  # asked on a miss only: the eager hot path pays nothing
            raise _untuned_in_capture(name, dtype, meta)
        cfg, source, timings = _choose(
            name, fn, grid, args_of, meta, dtype, device, key, gpu_names, extra
        )
        _CHOSEN[memo], _SOURCES[memo] = cfg, source
        if source == "tuned":
            _TIMINGS[memo] = timings
    kwargs = _kwargs(meta, dtype, cfg, extra)
    compiled = _run(name, device, fn, grid(cfg), args_of(cfg), kwargs)
    _record(name, cfg, compiled, _SOURCES[memo])
    return cfg


def _run(name: str, device: torch.device, fn, grid, args, kwargs: dict):
    """``fn[grid](*args, **kwargs)``; a failure caused by a CUDA graph capture is re-raised
    as :func:`_launch_error_in_capture` names it. Returns the compiled kernel."""
    try:
        if INTERPRET:
            with interpreter_compat.one_patch_per_launch():
                return interpreter_compat.on_fresh_chunk(lambda: fn[grid](*args, **kwargs))
        return fn[grid](*args, **kwargs)
    except Exception as exc:
        if _failed_in_capture(device, exc):
            raise _launch_error_in_capture(name, exc) from exc
        raise


def _describe_problem(dtype, meta: Meta) -> str:
    return (
        f"dtype={dtype}, head_dim={meta.head_dim}, Nq={meta.seq_q}, Nk={meta.seq_k}, "
        f"varlen={meta.varlen}, window=({meta.window_left}, {meta.window_right}), "
        f"key_mask={meta.has_key_mask}, mask_kind={meta.mask_kind}, softcap={meta.softcap}, "
        f"deterministic={meta.deterministic}"
    )


_WARM_UP_HINT = (
    "HINT: run the captured code once eagerly before capturing (PyTorch's CUDA-graph recipe "
    "warms up on a side stream), with the same shapes, dtypes, masks, memory layouts and "
    "deterministic flag: that compiles and tunes every kernel, and the capture reuses them."
)


def _untuned_in_capture(name: str, dtype, meta: Meta) -> RuntimeError:
    """The error for a config choice needed during CUDA graph capture (module docstring)."""
    return RuntimeError(
        f"safeattn: the {name} kernel has no config chosen yet for this problem, and the call "
        "is being captured into a CUDA graph, where candidates can be neither compiled nor "
        f"timed.\n  problem: {_describe_problem(dtype, meta)}\n{_WARM_UP_HINT}"
    )


def _failed_in_capture(device: torch.device, exc: Exception) -> bool:
    """Did a launch fail because a CUDA graph was being captured? Asked after a failure only.
    The message test covers a capture the failure has already invalidated."""
    if "capturing" in str(exc):  # CUDA: "operation not permitted when stream is capturing"
        return True
    try:
        return capturing(device)
    except Exception:  # a CUDA error state must not hide the original failure
        return False


def _launch_error_in_capture(name: str, exc: Exception) -> RuntimeError:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
    return RuntimeError(
        f"safeattn: launching the {name} kernel failed during CUDA graph capture "
        f"({type(exc).__name__}: {first}). Most likely Triton had to compile or load it "
        "for the first time there (a new shape, dtype, mask kind or memory layout), which "
        f"a capture does not permit.\n{_WARM_UP_HINT}"
    )


def _choose(name, fn, grid, args_of, meta, dtype, device, key, gpu_names, extra):
    """(config, source, tuner timings) for one tune key on one GPU.

    Single-config mode: the first shipped candidate that fits. Otherwise the table's entry,
    else the cache's, if it is a shipped candidate that fits (else logged, and ignored);
    else the fitting candidates (spill-free where :func:`tuning.spill_free_first` asks) are
    timed, :func:`configs.pick` chooses, and the choice is persisted. Fitting: pruned against
    the opt-in shared memory with the known needs, then with the compiled kernel's figure."""
    limit, bd = _smem_limit(device), configs.block_d(meta.head_dim)
    shipped = configs.candidates(name, bd, dtype, limit, meta.sparse, meta.tma, meta.dropout_p > 0)

    def misfit(cfg: KernelConfig) -> str | None:
        """Why ``cfg`` cannot run here (a compile failure, too much shared memory), or None."""
        try:
            kwargs = _kwargs(meta, dtype, cfg, extra)
            compiled = fn.warmup(*args_of(cfg), grid=grid(cfg), **kwargs)
        except Exception as exc:  # a compiler crash on one candidate must not fail the call
            return str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        if not configs.fits(shared := int(compiled.metadata.shared), limit):
            return f"needs {shared} bytes of shared memory, the GPU has {limit}"
        spills[cfg] = _spill_bytes(compiled)  # loads it: a misfit would raise OutOfResources
        return None

    spills: dict[KernelConfig, int] = {}
    single = meta.deterministic or not configs.autotune_enabled()
    text = tuning.key_text(key)
    if not single:
        for source, lookup in (
            ("table", lambda: tuning.table_entry(gpu_names, text)),
            ("cache", lambda: tuning.cache_entry(gpu_names[0], text)),
        ):
            found = lookup()
            if found is None:
                continue
            stored, path = found
            cfg = next((c for c in shipped if str(c) == stored), None)
            why = "not a shipped candidate that fits this GPU" if cfg is None else misfit(cfg)
            if why is None:
                tuning.log.debug("%s: %s from %s", text, stored, path)
                return cfg, source, []
            tuning.log.warning(
                "%s names %s for %s on %s, which cannot be used (%s): choosing again",
                path, stored, text, gpu_names[0], why,
            )  # fmt: skip

    fitting = []
    failed = []
    for cfg in shipped:
        why = misfit(cfg)
        if why is None:
            fitting.append(cfg)
            if single:  # first fitting candidate wins; compile no more than needed
                break
        else:
            failed.append(f"{cfg}: {why}")
    if not fitting:
        raise RuntimeError(
            f"safeattn: no shipped {name} config fits this GPU's {limit} bytes of shared memory "
            f"(head_dim={meta.head_dim}, dtype={dtype}; misfits: {failed}). "
            "This is a bug: please report it."
        )
    if single:
        return fitting[0], "single", []
    fitting = tuning.spill_free_first(fitting, spills, dtype, bd)
    timed = fitting if len(fitting) > 1 else []  # one fitting candidate is launched untimed
    times = [_time(fn, grid, args_of(cfg), meta, dtype, cfg, extra) for cfg in timed]
    best = fitting[configs.pick(times)] if times else fitting[0]  # near-ties: earlier wins
    # One fitting candidate is launched untimed: no timings to zip.
    timings = [(str(c), t) for c, t in zip(fitting, times, strict=True)] if times else []
    where = tuning.persist(gpu_names[0], text, str(best), timings)
    tuning.log.info(
        "tuned %s on %s: %s -> %s; persisted to %s", text, gpu_names[0],
        ", ".join(f"{c} {t:.4f} ms" for c, t in timings) or "one candidate fits",
        best, where or f"nowhere (${tuning.CACHE_ENV} is off or unwritable)",
    )  # fmt: skip
    return best, "tuned", timings


def _time(fn, grid, args, meta, dtype, cfg: KernelConfig, extra: dict) -> float:
    """Median ms of one launch with ``cfg``."""
    kw = _kwargs(meta, dtype, cfg, extra)
    # The median: one slow outlier must not decide.
    return triton.testing.do_bench(
        lambda: fn[grid(cfg)](*args, **kw), warmup=5, rep=20, return_mode="median"
    )


def launch_preprocess(args, grid, meta: Meta, dtype, device):
    """Launch the backward's preprocess kernel: its first candidate config (no choice to
    make), and fewer constexprs than the attention kernels."""
    if INTERPRET or device.type != "cuda":
        cfg = configs.interpreter_config("bwd_preprocess")
    else:
        cfg = configs.candidates("bwd_preprocess", configs.block_d(meta.head_dim), dtype)[0]
    kwargs = dict(
        IS_VARLEN=meta.varlen,
        BLOCK_M=cfg.block_m,
        BLOCK_D=configs.block_d(meta.head_dim),
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    compiled = _run("bwd_preprocess", device, _bwd_preprocess, grid(cfg), args, kwargs)
    if not INTERPRET and device.type == "cuda":
        _record("bwd_preprocess", cfg, compiled, "single")


def launch_guarded_redo(
    name: str, fn, grid, args, meta: Meta, dtype, device, cfg: KernelConfig, extra
):
    """Second launch of kernel ``name`` (``forward``, ``bwd_dkdv``, ``bwd_dq``), GUARD=True:
    the config the first launch chose, no tuning of its own, not recorded in
    :func:`launched_kernels`. Its programs return at once unless the first launch flagged
    them (see ``forward._attn_fwd``, ``backward._bwd_dkdv``, ``backward._bwd_dq``)."""
    kwargs = {**_kwargs(meta, dtype, cfg, extra), "GUARD": True}
    _run(f"{name} (guarded)", device, fn, grid, args(cfg) if callable(args) else args, kwargs)
