"""Broad per-kernel config timings of safeattn on MaskedSpeedSuite's four workloads (bf16,
D = $DIAG_D, default 128), FlexAttention beside, and a per-kernel breakdown of both
backwards (torch.profiler). A diagnostic, not a suite: docs/perf/dkdv_h100_2026-11-25.md.

    PYTHONPATH=$PWD python docs/perf/masked_config_sweep_vs_flex.py all   # on a GPU

Compiles every config in 16 processes first (single-config mode), then times each workload
in a fresh process with the tuner over the whole list (no table, no cache)."""

import concurrent.futures as cf
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("SAFEATTN_TUNING_TABLE", "0")
os.environ.setdefault("SAFEATTN_TUNING_CACHE", "0")
KINDS = ("key_padding_causal", "sliding_window", "varlen_docs", "bool_mask")
D = int(os.environ.get("DIAG_D", "128"))
DT = os.environ.get("DIAG_DT", "bfloat16")
OUT = os.environ.get("OUT", "/tmp")


def lists():
    from safeattn.kernels.configs import KernelConfig as C

    fwd = [
        (128, 64, 8, 3),
        (128, 64, 8, 4),
        (128, 64, 8, 2),
        (128, 128, 8, 2),
        (64, 64, 4, 3),
        (128, 64, 4, 3),
        (64, 128, 4, 2),
        (128, 32, 4, 3),
        (64, 32, 4, 3),
        (128, 128, 8, 3),
    ]
    dkdv = [
        (64, 128, 8, 1),
        (64, 128, 8, 2),
        (64, 128, 8, 3),
        (32, 128, 8, 2),
        (32, 128, 8, 3),
        (32, 64, 4, 3),
        (32, 64, 4, 4),
        (64, 64, 4, 2),
        (64, 64, 4, 3),
        (64, 64, 8, 2),
        (64, 64, 8, 3),
        (32, 128, 4, 3),
        (16, 128, 8, 3),
        (16, 64, 4, 3),
        (32, 64, 4, 2),
        (64, 64, 4, 1),
    ]
    dq = [
        (128, 64, 8, 3),
        (128, 64, 8, 2),
        (128, 32, 8, 3),
        (64, 64, 4, 2),
        (64, 64, 4, 3),
        (64, 32, 4, 3),
        (128, 64, 4, 3),
        (128, 128, 8, 2),
        (128, 32, 4, 3),
        (64, 128, 4, 2),
    ]
    if D == 64:
        fwd += [(128, 128, 8, 3), (64, 64, 4, 4), (128, 64, 4, 4)]
        dkdv += [(64, 128, 4, 3), (32, 128, 4, 4), (64, 128, 4, 2)]
        dq += [(128, 64, 4, 4), (128, 128, 4, 3)]
    return {
        k: [C(*c) for c in v] for k, v in (("forward", fwd), ("bwd_dkdv", dkdv), ("bwd_dq", dq))
    }


def patch(only=None):
    from safeattn.kernels import configs

    orig = configs.candidates
    L = lists()

    def cand(kernel, bd, dtype, *a, **kw):
        if kernel in L and bd == D:
            return [L[kernel][only % len(L[kernel])]] if only is not None else L[kernel]
        return orig(kernel, bd, dtype, *a, **kw)

    configs.candidates = cand


def fwd_bwd(case):
    q, k, v, g = case.inputs
    out = case.call(q, k, v)
    out.backward(g)
    return out


def cmd_compile(kind, idx):
    os.environ["SAFEATTN_AUTOTUNE"] = "0"
    patch(int(idx))
    import torch

    from benchmarks._masks import mask_case

    case = mask_case(kind, "safeattn", DT, D)
    fwd_bwd(case)
    torch.cuda.synchronize()


def cmd_flexwarm(kind):
    import torch

    from benchmarks._attention import compiled_flex
    from benchmarks._masks import mask_case

    case = mask_case(kind, "flex", DT, D, flex=compiled_flex())
    fwd_bwd(case)
    torch.cuda.synchronize()


def bench(fn, grads=()):
    import triton

    def run():
        for t in grads:
            t.grad = None
        fn()

    return triton.testing.do_bench(run, warmup=25, rep=200, return_mode="median")


def cmd_time(kind):
    os.environ["SAFEATTN_AUTOTUNE"] = "1"
    patch(None)
    import torch

    from benchmarks._attention import compiled_flex
    from benchmarks._masks import mask_case
    from safeattn.kernels import launch

    res = {"kind": kind, "D": D, "dtype": DT}
    case = mask_case(kind, "safeattn", DT, D)
    t0 = time.time()
    fwd_bwd(case)
    torch.cuda.synchronize()
    res["tune_s"] = time.time() - t0
    res["tuning"] = {k[0]: v for k, v in launch.tuning_timings().items()}
    res["chosen"] = {k[0]: str(v) for k, v in launch.chosen_configs().items()}
    q, k, v, g = case.inputs
    res["sa_fwd"] = bench(lambda: case.call(q, k, v))
    out = case.call(q, k, v)
    res["sa_bwd"] = bench(lambda: out.backward(g, retain_graph=True), (q, k, v))
    fcase = mask_case(kind, "flex", DT, D, flex=compiled_flex())
    fq, fk, fv, fg = fcase.inputs
    fwd_bwd(fcase)
    res["flex_fwd"] = bench(lambda: fcase.call(fq, fk, fv))
    fout = fcase.call(fq, fk, fv)
    res["flex_bwd"] = bench(lambda: fout.backward(fg, retain_graph=True), (fq, fk, fv))
    # per-kernel breakdown of both backward passes
    from torch.profiler import ProfilerActivity, profile

    for name, o, ins, gg in (("sa", out, (q, k, v), g), ("flex", fout, (fq, fk, fv), fg)):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                for t in ins:
                    t.grad = None
                o.backward(gg, retain_graph=True)
            torch.cuda.synchronize()
        kern = {}
        for e in prof.key_averages():
            if e.device_type.name == "CUDA" or getattr(e, "device_time_total", 0):
                kern[e.key[:60]] = round(getattr(e, "device_time_total", 0) / 10, 1)
        res[name + "_bwd_kernels_us"] = kern
    print(json.dumps(res))


def cmd_all():
    py = sys.executable
    n = max(len(v) for v in lists().values())
    tasks = [[py, __file__, "flexwarm", k] for k in KINDS]
    tasks += [[py, __file__, "compile", k, str(i)] for i in range(n) for k in KINDS]
    t0 = time.time()
    env = dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS="1")

    def go(cmd):
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        return cmd, r.returncode, r.stderr[-600:]

    with cf.ThreadPoolExecutor(16) as ex:
        for cmd, rc, err in ex.map(go, tasks):
            if rc:
                print("FAILED", cmd[2:], err, flush=True)
    print(f"[diag] compile phase {time.time() - t0:.0f} s", flush=True)
    results = []
    for kind in KINDS:
        t1 = time.time()
        r = subprocess.run([py, __file__, "time", kind], capture_output=True, text=True, env=env)
        if r.returncode:
            print("FAILED time", kind, r.stderr[-1500:], flush=True)
            continue
        res = json.loads(r.stdout.strip().splitlines()[-1])
        results.append(res)
        print(f"[diag] {kind} {time.time() - t1:.0f} s", flush=True)
    with open(os.path.join(OUT, f"diag1_d{D}_{DT}.json"), "w") as f:
        json.dump(results, f, indent=1)
    for res in results:
        fwd_ratio = res["flex_fwd"] / res["sa_fwd"]
        bwd_ratio = res["flex_bwd"] / res["sa_bwd"]
        print(
            f"== {res['kind']} D={D} {DT}: safeattn fwd {res['sa_fwd']:.3f} "
            f"bwd {res['sa_bwd']:.3f} | flex fwd {res['flex_fwd']:.3f} "
            f"bwd {res['flex_bwd']:.3f} | ratio fwd {fwd_ratio:.2f} bwd {bwd_ratio:.2f}; "
            f"chosen {res['chosen']}"
        )
        for kern, tim in res["tuning"].items():
            best = sorted(tim, key=lambda x: x[1])[:4]
            print(f"   {kern:9s} " + "  ".join(f"{c} {t:.3f}" for c, t in best))
        print("   sa kernels  ", {k: v for k, v in res["sa_bwd_kernels_us"].items() if v > 5})
        print("   flex kernels", {k: v for k, v in res["flex_bwd_kernels_us"].items() if v > 5})


if __name__ == "__main__":
    globals()["cmd_" + sys.argv[1]](*sys.argv[2:])
