"""Warm the on-disk compile caches for the GPU suites, in parallel worker processes.

    python -m tools.prewarm [--workers N] [--suite SUITE ...]   # from the repository root

Why: on a fresh GPU machine most of a commit's GPU suites is compiling, one kernel at a
time in one process: safeattn's Triton kernels (every autotuning candidate of every
specialisation) and FlexAttention's Inductor graphs. Both compilers keep what they build on
disk (Triton's cache, Inductor's FX-graph and kernel caches), keyed by the source and the
compile options, not by the process. This module runs, in N processes at once, exactly the
calls that compile (one untimed forward+backward per speed-grid shape and per masked-speed
combination; one trial per numerics case; one attention forward+backward per model-step
combination, on inputs laid out as the model's) for safeattn and FlexAttention, so that the
suites' own single processes then find their kernels compiled. The SDPA peers compile
nothing and are left out.

What it does not do: time anything or record anything. Its tuning runs on a shared GPU, so
its choices are noise; they stay in its processes (its workers run with
``SAFEATTN_TUNING_CACHE=0``: safeattn persists no run-time choice, see
``safeattn/kernels/tuning.py``) and every suite tunes again what the committed tuning table
lacks, alone on the GPU, outside its timed region. Keys the table has compile only the
table's config here, as in the suites.

It imports safeattn from the current directory's package: the caches it fills serve every
commit whose kernels are the same source (a commit with other kernels compiles its own in
the suite, as without a prewarm). A task that fails is reported and skipped: the suite meets
the same error and records it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import multiprocessing
import os
import sys
import time

# Parallel processes rather than Inductor's compile workers: each process compiles its
# kernels itself (a pool per process would oversubscribe the cores). compile_threads is not
# part of Inductor's cache key (torch/_inductor/config.py, _cache_config_ignore_prefix).
# Tuning choices made on a shared GPU must not be persisted for the suites to read.
_WORKER_ENV = {"TORCHINDUCTOR_COMPILE_THREADS": "1", "SAFEATTN_TUNING_CACHE": "0"}

COMPILING_IMPLS = ("safeattn", "flex")

# The task kinds whose compiles each GPU suite reuses (tools/runner/suites.py names the
# suites). MemorySuite runs SpeedSuite's grid; LiveResourcesSuite compiles a few safeattn
# kernels of its own in seconds, which no task kind here covers; LiveBuildResourcesSuite
# runs safeattn's builds of SpeedSuite's and MaskedSpeedSuite's grids (28 of them, minutes
# of compiles when cold).
KINDS_OF_SUITE: dict[str, tuple[str, ...]] = {
    "LiveResourcesSuite": (),
    "LiveBuildResourcesSuite": ("speed", "masked"),
    "SpeedSuite": ("speed",),
    "MemorySuite": ("speed",),
    "NumericsSuite": ("numerics",),
    "ModelStepSuite": ("model",),
    "MaskedSpeedSuite": ("masked",),
    "FeatureSpeedSuite": (),  # 6 FlexAttention compiles, done in the suite itself
}


def kinds_for(suites: list[str]) -> tuple[str, ...] | None:
    """The task kinds to warm for these suite or group names (``--suite`` of tools/run.py);
    None (every kind) when no suite is named. Suites that compile nothing here (the CPU
    ones, LiveResourcesSuite) add no kind."""
    if not suites:
        return None
    from tools.runner.suites import GROUPS, SUITES, expand_suites

    unknown = [name for name in suites if name not in SUITES and name not in GROUPS]
    if unknown:
        raise ValueError(f"unknown suite {unknown[0]!r}: one of {', '.join([*SUITES, *GROUPS])}")
    chosen: list[str] = []
    for suite in expand_suites(suites, gpu=True):
        chosen += [k for k in KINDS_OF_SUITE.get(suite, ()) if k not in chosen]
    return tuple(chosen)


def tasks() -> list[tuple]:
    """("speed", impl, dtype, head_dim, seq_len, causal, gqa), ("masked", impl, dtype,
    head_dim, mask), ("model", impl, seq_len, padding) and ("numerics", family, impl, dtype)
    tuples, FlexAttention first (its compiles are the longest)."""
    from benchmarks import numerics, speed
    from benchmarks._grid import pruned_reason

    todo = [
        ("speed", *combo)
        for combo in itertools.product(
            speed.GPU_IMPLS,
            speed.GPU_DTYPES,
            speed.GPU_HEAD_DIMS,
            speed.GPU_SEQ_LENS,
            speed.CAUSAL,
            speed.GQA,
        )
        if combo[0] in COMPILING_IMPLS and pruned_reason(combo[0], combo[2]) is None
    ]
    todo += [
        ("masked", *combo)
        for combo in itertools.product(
            speed.MASKED_IMPLS, speed.GPU_DTYPES, speed.GPU_HEAD_DIMS, speed.MASKS
        )
        if combo[0] in COMPILING_IMPLS
    ]
    todo += [
        ("model", *combo)
        for combo in itertools.product(speed.MODEL_IMPLS, speed.MODEL_SEQ_LENS, speed.PADDINGS)
        if combo[0] in COMPILING_IMPLS
    ]
    todo += [
        ("numerics", family, impl, dtype)
        for family, impl, dtype in itertools.product(
            numerics.FAMILIES, numerics.GPU_IMPLS, numerics.DTYPES
        )
        if impl in COMPILING_IMPLS
    ]
    return sorted(todo, key=lambda t: t[2 if t[0] == "numerics" else 1] != "flex")


def _init_worker() -> None:
    os.environ.update(_WORKER_ENV)


def warm(task: tuple) -> tuple[tuple, float, str]:
    """Run one task's compiling call; returns (task, seconds, error or "")."""
    start = time.perf_counter()
    try:
        import torch

        from benchmarks import numerics
        from benchmarks._attention import attention_call, attention_inputs, dtype_of, impl_context

        if task[0] == "speed":
            impl, dtype, head_dim, seq_len, causal, gqa = task[1:]
            fn = attention_call(impl, causal, seq_len, gqa)
            q, k, v, grad_out = attention_inputs(impl, dtype, seq_len, head_dim, gqa)
            with impl_context(impl):
                fn(q, k, v).backward(grad_out)
        elif task[0] == "masked":
            from benchmarks import _masks

            impl, dtype, head_dim, mask = task[1:]
            case = _masks.mask_case(mask, impl, dtype, head_dim)
            q, k, v, grad_out = case.inputs
            case.call(q, k, v).backward(grad_out)
        elif task[0] == "model":
            # The model's attention calls only, not its training step: the step needs
            # several GB, and a dozen of these processes share one GPU.
            from benchmarks import _llama
            from benchmarks._truth import workloads

            impl, seq_len, padding = task[1:]
            pads = workloads.model_padding(padding, seq_len)
            batch = _llama.make_batch(workloads.MODEL, pads, seq_len, "cuda")
            attend = _llama.attention_for(impl, batch.keep, seq_len, "cuda")
            q, k, v, grad_out = _llama.qkv_like_model(
                workloads.MODEL, workloads.MODEL_BATCH, seq_len, "bfloat16", "cuda"
            )
            attend(q, k, v).backward(grad_out)
        else:
            from safeattn import contract

            family, impl, dtype = task[1:]
            with impl_context(impl):
                contract.rates(family, numerics._impl(impl), dtype_of(dtype), "cuda", 1, "gpu")
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        return task, time.perf_counter() - start, ""
    except Exception as exc:  # the suite meets and records the same error
        return (
            task,
            time.perf_counter() - start,
            f"{type(exc).__name__}: {exc}".splitlines()[0][:200],
        )


def run(workers: int, kinds: tuple[str, ...] | None = None) -> int:
    """Warm the caches with ``workers`` processes; returns the number of failed tasks.
    ``kinds``: only these task kinds ("speed", "masked", "model", "numerics")."""
    from benchmarks._env import cuda_usable

    if not cuda_usable():
        print("[prewarm] no usable CUDA GPU here: nothing to warm", flush=True)
        return 0
    todo = [t for t in tasks() if kinds is None or t[0] in kinds]
    print(f"[prewarm] {len(todo)} compiling calls in {workers} processes", flush=True)
    start = time.perf_counter()
    failed = 0
    context = multiprocessing.get_context("spawn")  # CUDA cannot be forked after init
    with concurrent.futures.ProcessPoolExecutor(
        workers, mp_context=context, initializer=_init_worker
    ) as pool:
        futures = [pool.submit(warm, task) for task in todo]
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            task, seconds, error = future.result()
            failed += bool(error)
            outcome = f"failed ({error})" if error else "ok"
            print(
                f"[prewarm] {done}/{len(todo)} {' '.join(map(str, task))}: {outcome} "
                f"({seconds:.1f} s)",
                flush=True,
            )
    print(
        f"[prewarm] {len(todo)} calls in {time.perf_counter() - start:.0f} s, {failed} failed",
        flush=True,
    )
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--workers",
        type=int,
        default=min(12, os.cpu_count() or 1),
        help="processes compiling at once (default: min(12, CPU count))",
    )
    parser.add_argument(
        "--suite",
        action="append",
        default=[],
        metavar="SUITE",
        help="warm only what this suite or group compiles (repeatable; tools/run.py's "
        "--suite names); default: every GPU suite",
    )
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    try:
        kinds = kinds_for(args.suite)
    except ValueError as exc:
        parser.error(str(exc))
    if kinds == ():
        print(f"[prewarm] {', '.join(args.suite)}: nothing to compile ahead", flush=True)
        return 0
    run(args.workers, kinds)
    return 0  # a cache warm-up never fails a run: the suites report real errors


if __name__ == "__main__":
    sys.exit(main())
