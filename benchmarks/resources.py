"""Resources: shared memory (bytes per block), registers (per thread) and spills (bytes of
local memory per thread) of safeattn's kernels.

``StaticAuditSuite`` (anywhere, no GPU needed)
    arch × kernel × dtype × head_dim from ``safeattn.audit.audit()``, which cross-compiles
    every shipped config and feature variant for each architecture. The value is the
    maximum over configs and variants: the worst case that must fit the architecture's
    limit (``safeattn.gpu_limits``). A config that does not compile is left out of the
    maximum and named on stderr; a slice where none compiles is NaN with the error. The
    audit runs once per asv run, in ``setup_cache``, through the audit cache
    (``safeattn/audit_cache.py``, this checkout's copy applied to the commit under test):
    slices whose key (kernel sources, config tables, architecture list, Triton version) is
    in the committed ``safeattn/audit_cache.json`` or the local store are read, not compiled.
``LiveResourcesSuite`` (GPU only; absent without a usable CUDA GPU)
    kernel × dtype × head_dim: what the kernels actually launched by one forward+backward
    (N = 4096, non-causal, MHA, shapes from DESIGN.md) use, from
    ``safeattn.kernels.launch.launched_kernels()`` (the autotuner's chosen config).
``LiveBuildResourcesSuite`` (GPU only)
    kernel × dtype × head_dim × build: the same for the other builds of those kernels that
    the speed suites run. Causal, GQA and each mask kind are compile-time switches (a mask
    adds the block-mask variant, packed documents take the portable varlen path), so each is
    a binary of its own, with its own registers and spills: SpeedSuite's causal and GQA
    shapes at N = 4096 and MaskedSpeedSuite's workloads, called exactly as those suites call
    them. A separate suite, so that LiveResourcesSuite's rows and history stay as they are.

Kernel names are fixed here rather than read from ``safeattn.kernels.configs.KERNELS``:
asv benchmarks old commits with this suite, and the grid must not depend on the commit
under test (a commit without a kernel reports NaN for it); tests/test_asv_suite.py checks
that these names match the package's.
"""

from __future__ import annotations

import itertools
import os
import sys
import time

from . import _masks, speed
from ._attention import attention_call, attention_inputs
from ._env import cuda_usable, quick, require_cuda
from ._grid import GRID_TIMEOUT_S, Missing, field_tracker, lookup, progress, reason_of
from ._launches import launch_note, record_launch, tuner_timings
from ._truth import audit_cache, gpu_limits

KERNELS = ["forward", "bwd_preprocess", "bwd_dkdv", "bwd_dq"]
# float16 shares bfloat16's configs and footprint. Quick mode (CI) audits one slice: enough
# to check the suite end to end on 2 cores; proving every config fits is the audit's own test.
AUDIT_ARCHS = ["sm90"] if quick() else list(gpu_limits.SUPPORTED_ARCHS)
AUDIT_DTYPES = ["bfloat16"] if quick() else ["bfloat16", "float32"]
AUDIT_HEAD_DIMS = [64] if quick() else [64, 128, 256]
LIVE_DTYPES = ["float16", "bfloat16"]
LIVE_HEAD_DIMS = [64, 128]
LIVE_SEQ_LEN = 4096


def _build_name(causal: bool, gqa: int) -> str:
    return "_".join([*(["causal"] if causal else []), *([f"gqa{gqa}"] if gqa > 1 else [])])


# LiveBuildResourcesSuite's builds: SpeedSuite's (causal, gqa) but the dense multi-head one
# (LiveResourcesSuite's), then MaskedSpeedSuite's mask kinds. Build name -> (causal, gqa).
SPEED_BUILDS: dict[str, tuple[bool, int]] = {
    _build_name(causal, gqa): (causal, gqa)
    for causal, gqa in itertools.product(speed.CAUSAL, speed.GQA)
    if causal or gqa > 1
}
LIVE_BUILDS: list[str] = [*SPEED_BUILDS, *speed.MASKS]
DENSE_BUILD = "dense"  # LiveResourcesSuite's: non-causal multi-head, N = 4096

FIELDS = ("shared_bytes", "registers", "spills")


class StaticAuditSuite:
    """Worst-case resources of every shipped config, cross-compiled per architecture."""

    params = (AUDIT_ARCHS, KERNELS, AUDIT_DTYPES, AUDIT_HEAD_DIMS)
    param_names = ("arch", "kernel", "dtype", "head_dim")
    timeout = GRID_TIMEOUT_S
    # bump when what it measures changes (see _grid). audit-2: fp32 dK/dV rows are the build
    # without the GQA loop, the one fp32 runs since passes._per_query_head (audit-1 showed the
    # loop's build, which fp32 GQA ran, and not the one every fp32 multi-head call ran).
    version = "audit-2"

    def setup(self, cache, *combo):
        lookup(cache, combo)  # not measured: skipped (NaN) here, not failed (_grid)

    def setup_cache(self) -> dict:
        start = time.perf_counter()
        try:
            rows, source = _audit_rows()
        except Exception as exc:  # e.g. a commit that predates the audit or a kernel
            reason = Missing(reason_of(exc))
            return {combo: reason for combo in itertools.product(*self.params)}
        seconds = time.perf_counter() - start
        progress(f"[audit] {len(rows)} config rows in {seconds:.0f} s: {source}")
        worst: dict = {}
        errors: dict = {}
        for row in rows:
            key = (row["arch"], row["kernel"], row["dtype"], row["head_dim"])
            if row.get("error"):  # a config that did not compile: no figures
                errors.setdefault(key, f"{row.get('variant', '')} {row['config']}: {row['error']}")
                continue
            old = worst.get(key, dict.fromkeys(FIELDS, 0))
            worst[key] = {f: max(old[f], int(row[f])) for f in FIELDS}
        for key, error in errors.items():
            print(f"[audit] {key}: a config did not compile ({error})", file=sys.stderr)
            worst.setdefault(key, Missing(f"no config compiled, e.g. {error}"))
        return worst

    track_shared_bytes = field_tracker("shared_bytes")
    track_registers = field_tracker("registers")
    track_spills = field_tracker("spills")


def _audit_rows() -> tuple[list[dict], str]:
    """The static audit's rows (dicts) for the suite's grid, of the safeattn importable here
    (the commit under test), read from the audit cache where its key has them; the rest
    compiled in parallel on every core. Returns the rows and where they came from."""
    from dataclasses import asdict
    from pathlib import Path

    import torch

    import safeattn
    from safeattn.audit import audit

    def compile_slices(archs, kernels, dtypes, head_dims) -> list[dict]:
        rows = audit(
            archs=archs,
            kernels=kernels,
            dtypes=[getattr(torch, d) for d in dtypes],
            head_dims=head_dims,
            workers=_cores(),
            progress=progress,  # minutes of compiles on a CPU: show them going
        )
        return [asdict(r) for r in rows]

    return audit_cache.cached_audit(
        compile_slices,
        Path(safeattn.__file__).resolve().parent,
        AUDIT_ARCHS,
        KERNELS,
        AUDIT_DTYPES,
        AUDIT_HEAD_DIMS,
        report=progress,
    )


def _cores() -> int:
    # = safeattn.audit.cpu_count, which the older commits this suite measures do not have.
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:
        return os.cpu_count() or 1


def _live_figures(make) -> tuple[dict, str]:
    """One forward+backward of ``make()`` -> (fn, (q, k, v, grad_out)) on the GPU, and
    ({kernel: figures or Missing}, a progress note naming the configs launched).

    A kernel counts as launched by this call when its ``launch.launched_kernels()`` entry
    was replaced during it (each launch records a new object), so a kernel that an earlier
    call in the process launched and this one did not is Missing, not the earlier figures.
    """
    import torch

    from safeattn.kernels import launch

    before, timings = launch.launched_kernels(), tuner_timings()
    fn, (q, k, v, grad_out) = make()
    fn(q, k, v).backward(grad_out)
    torch.cuda.synchronize()
    after = launch.launched_kernels()
    figures = {
        kernel: (
            {f: int(getattr(after[kernel], f)) for f in FIELDS}
            if kernel in after and after[kernel] is not before.get(kernel)
            else Missing(f"kernel {kernel!r} was not launched by this commit")
        )
        for kernel in KERNELS
    }
    return figures, ": " + launch_note(timings)


def _live_grid(suite: str, param_names: tuple, makers: dict) -> dict:
    """A live suite's setup_cache: ``makers`` maps (dtype, head_dim, *rest) to ``make`` of
    :func:`_live_figures`; the result maps (kernel, dtype, head_dim, *rest) to figures or
    Missing, every launch recorded (record_launch) and each call logged."""
    import torch

    measured: dict = {}
    for combo, make in makers.items():
        start = time.perf_counter()
        note = ""
        try:
            figures, note = _live_figures(make)
        except Exception as exc:
            figures = dict.fromkeys(KERNELS, Missing(reason_of(exc)))
        for kernel, value in figures.items():
            measured[(kernel, *combo)] = value
            if not isinstance(value, Missing):
                record_launch(suite, param_names, (kernel, *combo))
        torch.cuda.empty_cache()
        seconds = time.perf_counter() - start
        rest = "".join(f" {c}" for c in combo[2:])  # the build, where there is one
        progress(f"[resources] {combo[0]} D={combo[1]}{rest} done ({seconds:.1f} s){note}")
    return measured


class LiveResourcesSuite:
    """Resources of the kernels one GPU forward+backward actually launched."""

    params = (KERNELS, LIVE_DTYPES, LIVE_HEAD_DIMS)
    param_names = ("kernel", "dtype", "head_dim")
    timeout = GRID_TIMEOUT_S
    version = "live-resources-1"  # bump when what it measures changes (see _grid)

    def setup(self, cache, *combo):
        lookup(cache, combo)  # not measured: skipped (NaN) here, not failed (_grid)

    def setup_cache(self) -> dict:
        require_cuda()
        makers = {
            (dtype, head_dim): live_build(DENSE_BUILD, dtype, head_dim)
            for dtype, head_dim in itertools.product(LIVE_DTYPES, LIVE_HEAD_DIMS)
        }
        return _live_grid("resources.LiveResourcesSuite", self.param_names, makers)

    track_shared_bytes = field_tracker("shared_bytes")
    track_registers = field_tracker("registers")
    track_spills = field_tracker("spills")


def live_build(build: str, dtype: str, head_dim: int):
    """``make`` of :func:`_live_figures` for :data:`DENSE_BUILD` (LiveResourcesSuite's) or one
    of :data:`LIVE_BUILDS`: safeattn's call and inputs exactly as SpeedSuite (N = 4096) or
    MaskedSpeedSuite makes them, so the binaries measured here are the ones those suites time."""
    if build == DENSE_BUILD or build in SPEED_BUILDS:
        causal, gqa = SPEED_BUILDS.get(build, (False, 1))

        def make():
            fn = attention_call("safeattn", causal, LIVE_SEQ_LEN, gqa)
            return fn, attention_inputs("safeattn", dtype, LIVE_SEQ_LEN, head_dim, gqa)

        return make
    if build in speed.MASKS:

        def make_masked():
            case = _masks.mask_case(build, "safeattn", dtype, head_dim)
            return case.call, case.inputs

        return make_masked
    raise ValueError(f"benchmarks: unknown build {build!r}; known: {LIVE_BUILDS}")


class LiveBuildResourcesSuite:
    """Resources of the kernels launched by the causal, GQA and masked builds."""

    params = (KERNELS, LIVE_DTYPES, LIVE_HEAD_DIMS, LIVE_BUILDS)
    param_names = ("kernel", "dtype", "head_dim", "build")
    timeout = GRID_TIMEOUT_S
    version = "live-build-resources-1"  # bump when what it measures changes (see _grid)

    def setup(self, cache, *combo):
        lookup(cache, combo)  # not measured: skipped (NaN) here, not failed (_grid)

    def setup_cache(self) -> dict:
        require_cuda()
        makers = {
            (dtype, head_dim, build): live_build(build, dtype, head_dim)
            for dtype, head_dim, build in itertools.product(
                LIVE_DTYPES, LIVE_HEAD_DIMS, LIVE_BUILDS
            )
        }
        return _live_grid("resources.LiveBuildResourcesSuite", self.param_names, makers)

    track_shared_bytes = field_tracker("shared_bytes")
    track_registers = field_tracker("registers")
    track_spills = field_tracker("spills")


if not cuda_usable():
    del LiveResourcesSuite, LiveBuildResourcesSuite  # pruned: no usable CUDA GPU here
