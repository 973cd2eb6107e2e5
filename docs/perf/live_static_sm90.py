"""A live build's kernels cross-compiled for sm90 exactly as a GPU call specialises them, on a
CPU-only machine: registers, spill bytes and shared memory per launched kernel.

Why: the static audit (``safeattn.audit``) compiles each kernel from a representative
signature, and a live build can specialise differently (strides that are 0 or 1, the
launch's own constexprs); on 2026-12-01 the block-mask dK/dV compiled without a spill there
and spilled 24 B live on the H200 (docs/perf/session_masked_dkdv_2026-12-01). Here the
benchmark's own call (SpeedSuite's or MaskedSpeedSuite's inputs and call, as
``benchmarks.resources.live_build`` makes them, built on the CPU) runs through safeattn's
passes with the Hopper path forced on (``SAFEATTN_TMA=1``; the packed-documents build stays
portable, as on the GPU), and every kernel launch is compiled by Triton's own binder for sm90
instead of being run. The config of each kernel comes from ``--config KERNEL=M,N,W,S`` (what
the GPU's table chose; the suites' logs name it), the rest from the interpreter's list.
Nothing is executed, so no result is checked: checked: the figures are the compiler's.

    TRITON_PTXAS_PATH=<CUDA 13.0 ptxas> python docs/perf/live_static_sm90.py bool_mask \\
        --head-dim 128 --config bwd_dkdv=64,64,4,2 --config bwd_dq=64,64,4,2
    ... live_static_sm90.py bool_mask --head-dim 128 --table nvidia-h200 --kernel _bwd_dkdv
    ... live_static_sm90.py family:trainable_bias --dtype float32 --ir /tmp/ir

``--table GPU`` takes every launch's config from that GPU's shipped tuning table, keyed as
the GPU keys it (a key the table lacks is named, and the interpreter's config used);
``family:NAME`` compiles a ``safeattn.families`` case (seed 0, the GPU tests' size);
``--ir DIR`` keeps each kernel's TTGIR and PTX.

One JSON line per compiled kernel (guarded second launches included, ``guard``: true), with
``sass``, a hash of its instructions (cuobjdump's SASS, which carries no source lines): equal
hashes across two trees mean the same machine code.
The GPUs' triton (3.6) and CUDA 13.0's ptxas (torch 2.11+cu130's, or the nvidia-cuda-nvcc
13.0.88 wheel) are what the live figures come from; other versions compile differently.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _sass_hash(cubin: bytes) -> str:
    import subprocess
    import tempfile

    from safeattn import audit

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([audit._triton_bin("cuobjdump"), "-sass", f.name],
                              capture_output=True, text=True, check=True).stdout  # fmt: skip
    body = [line for line in sass.splitlines() if line.strip().startswith("/*")]
    return hashlib.sha256("\n".join(body).encode()).hexdigest()[:12]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build", help="a LiveBuildResourcesSuite build, 'dense', or family:NAME "
                    "(safeattn.families' case NAME, seed 0, at the GPU tests' size)")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--config", action="append", default=[], metavar="KERNEL=M,N,W,S")
    ap.add_argument("--kernel", action="append", default=[], help="only these kernels")
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("--table", metavar="GPU",
                    help="configs from this GPU's shipped tuning table (e.g. nvidia-h200), as "
                    "its launches read them; --config overrides, a key it lacks is named")
    ap.add_argument("--ir", type=Path, help="write each kernel's TTGIR and PTX here")
    a = ap.parse_args()
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise SystemExit("unset TRITON_INTERPRET: this compiles, it does not interpret")
    os.environ.setdefault("SAFEATTN_TMA", "1")
    sys.path.insert(0, str(REPO))

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime import jit

    from safeattn import audit
    from safeattn.kernels import configs, hopper

    # The host's sm90-only choices, as a GPU of --arch makes them (this runs on the CPU).
    hopper.pair_stats = lambda device, cfg: hopper.pairs(a.arch, cfg)
    chosen = {}
    for item in a.config:
        name, tile = item.split("=")
        chosen[name] = configs.KernelConfig(*map(int, tile.split(",")))
    base_config = configs.interpreter_config
    configs.interpreter_config = lambda name: chosen.get(name) or base_config(name)
    # The GPU's NO_TAIL test: lengths against the largest tile of any shipped config.
    base_largest = configs.largest_block
    configs.largest_block = lambda interpreted: base_largest(False)

    if a.table:
        from safeattn.kernels import launch, tuning

        def from_table(name, fn, grid, args, meta, dtype, device, seq_q, seq_k, extra=None):
            # launch._launch's GPU branch up to the table lookup, with its key.
            extra = extra or {}
            key = launch.launch_key(name, dtype, meta, seq_q, seq_k, extra)
            found = tuning.table_entry((a.table, f"sm{a.arch}"), tuning.key_text(key))
            cfg = chosen.get(name)
            if cfg is None and found is not None:
                m, n, w, st = (int(x[1:]) for x in found[0].split("-"))
                cfg = configs.KernelConfig(m, n, w, st)
            if cfg is None:
                print(f"# not in {a.table}'s table: {tuning.key_text(key)}", flush=True)
                cfg = base_config(name)
            args_of = args if callable(args) else lambda c: args
            fn[grid(cfg)](*args_of(cfg), **launch._constexprs(meta, dtype, cfg), **extra)
            return cfg

        launch._launch = from_table

    target = GPUTarget("cuda", a.arch, 32)
    backend = make_backend(target)

    def compile_only(self, *args, grid, warmup, **kwargs):
        # JITFunction.run's binder and argument packing, with the target fixed to sm90.
        binder = jit.create_function_from_signature(self.signature, self.params, backend)
        bound, specialization, options = binder(*args, **kwargs)
        options, signature, constexprs, attrs = self._pack_args(
            backend, kwargs, bound, specialization, options
        )
        name = self.fn.__name__
        guard = bool(kwargs.get("GUARD", False))
        if a.kernel and name not in a.kernel:
            return None
        compiled = triton.compile(
            ASTSource(self, signature, constexprs, attrs), target=target,
            options=options.__dict__,
        )  # fmt: skip
        regs, stack = audit._regs_and_stack(compiled.asm["cubin"])
        if a.ir:
            a.ir.mkdir(parents=True, exist_ok=True)
            stem = a.ir / f"{a.build}_{a.dtype}_d{a.head_dim}_{name}{'_guard' if guard else ''}"
            stem.with_suffix(".ttgir").write_text(compiled.asm["ttgir"])
            stem.with_suffix(".ptx").write_text(compiled.asm["ptx"])
        cfg = f"M{kwargs.get('BLOCK_M')}-N{kwargs.get('BLOCK_N')}"
        cfg += f"-w{options.num_warps}-s{options.num_stages}"
        row = dict(build=a.build, dtype=a.dtype, hd=a.head_dim, kernel=name, guard=guard,
                   config=cfg, regs=regs, spills=stack, shared=compiled.metadata.shared,
                   part=kwargs.get("PART", 0), tma=bool(kwargs.get("USE_TMA", False)),
                   sass=_sass_hash(compiled.asm["cubin"]))  # fmt: skip
        print(json.dumps(row), flush=True)
        return None

    jit.JITFunction.run = compile_only
    from safeattn import api

    api._use_kernels = lambda p: True  # the kernels' path for CPU tensors (compiled, not run)

    from benchmarks import _masks, resources
    from benchmarks._attention import attention_call, attention_inputs

    if a.build.startswith("family:"):
        import torch

        from safeattn import families

        dtype = getattr(torch, a.dtype)
        case = families.make_case(a.build.split(":", 1)[1], 0, dtype, "cpu", "gpu")
        out = case.call(api.attention if not case.varlen else api.varlen_attention,
                        case.q, case.k, case.v)  # fmt: skip
        out.backward(case.do)
        return
    if a.build in resources.SPEED_BUILDS or a.build == resources.DENSE_BUILD:
        causal, gqa = resources.SPEED_BUILDS.get(a.build, (False, 1))
        call = attention_call("safeattn", causal, resources.LIVE_SEQ_LEN, gqa)
        inputs = attention_inputs("safeattn", a.dtype, resources.LIVE_SEQ_LEN, a.head_dim, gqa,
                                  device="cpu")  # fmt: skip
    else:
        case = _masks.mask_case(a.build, "safeattn", a.dtype, a.head_dim, device="cpu")
        call, inputs = case.call, case.inputs
    q, k, v, grad_out = inputs
    # The forward's outputs are never written (nothing runs): the backward reads them as they
    # are, which changes no specialisation.
    call(q, k, v).backward(grad_out)

if __name__ == "__main__":
    main()
