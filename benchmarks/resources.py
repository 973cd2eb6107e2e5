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

from ._attention import attention_inputs
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

FIELDS = ("shared_bytes", "registers", "spills")


class StaticAuditSuite:
    """Worst-case resources of every shipped config, cross-compiled per architecture."""

    params = (AUDIT_ARCHS, KERNELS, AUDIT_DTYPES, AUDIT_HEAD_DIMS)
    param_names = ("arch", "kernel", "dtype", "head_dim")
    timeout = GRID_TIMEOUT_S
    version = "audit-1"  # bump when what it measures changes (see _grid)

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
        import torch

        import safeattn

        measured: dict = {}
        for dtype, head_dim in itertools.product(LIVE_DTYPES, LIVE_HEAD_DIMS):
            start = time.perf_counter()
            chosen = ""
            try:
                from safeattn.kernels import launch

                before = tuner_timings()
                q, k, v, grad_out = attention_inputs("safeattn", dtype, LIVE_SEQ_LEN, head_dim, 1)
                safeattn.attention(q, k, v).backward(grad_out)
                torch.cuda.synchronize()
                launched = launch.launched_kernels()
                for kernel in KERNELS:
                    res = launched.get(kernel)
                    measured[(kernel, dtype, head_dim)] = (
                        {f: int(getattr(res, f)) for f in FIELDS}
                        if res is not None
                        else Missing(f"kernel {kernel!r} was not launched by this commit")
                    )
                    record_launch(
                        "resources.LiveResourcesSuite",
                        LiveResourcesSuite.param_names,
                        (kernel, dtype, head_dim),
                    )
            except Exception as exc:
                for kernel in KERNELS:
                    measured[(kernel, dtype, head_dim)] = Missing(reason_of(exc))
            else:
                chosen = ": " + launch_note(before)
            seconds = time.perf_counter() - start
            progress(f"[resources] {dtype} D={head_dim} done ({seconds:.1f} s){chosen}")
        return measured

    track_shared_bytes = field_tracker("shared_bytes")
    track_registers = field_tracker("registers")
    track_spills = field_tracker("spills")


if not cuda_usable():
    del LiveResourcesSuite  # pruned: no usable CUDA GPU here
