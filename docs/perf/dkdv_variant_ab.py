"""A/B of two safeattn packages on the masked workloads, a GQA padded-causal call and a dense
causal call (bf16, D = 128 and 64), FlexAttention beside. A diagnostic, not a suite:
docs/perf/dkdv_h100_2026-11-25.md.

    mkdir -p .dev/base && git archive HEAD safeattn | tar -x -C .dev/base
    PYTHONPATH=$PWD python docs/perf/dkdv_variant_ab.py all   # on a GPU: base vs the tree

Both packages get the same candidate lists (the shipped ones plus dK/dV M64-N128-w8-s3,
FlexAttention's Hopper tile), so a difference is the kernels' code, not the config choice."""

import concurrent.futures as cf
import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

VARIANTS = {"base": os.path.abspath(".dev/base"), "new": os.path.abspath(".")}
KINDS = (
    "key_padding_causal",
    "sliding_window",
    "varlen_docs",
    "bool_mask",
    "gqa_keypad",
    "dense_causal",
)
DS = tuple(int(x) for x in os.environ.get("DIAG_DS", "128,64").split(","))
DT = "bfloat16"
OUT = os.environ.get("OUT", "/tmp")
EXTRA = {"bwd_dkdv": [(64, 128, 8, 3)]}


def setup(variant, d, only=None, single=False):
    sys.path.insert(0, VARIANTS[variant])
    os.environ.update(
        SAFEATTN_TUNING_TABLE="0",
        SAFEATTN_TUNING_CACHE="0",
        SAFEATTN_AUTOTUNE="0" if single else "1",
    )
    from safeattn.kernels import configs
    from safeattn.kernels.configs import KernelConfig as C

    orig = configs.candidates

    def cand(kernel, bd, dtype, *a, **kw):
        lst = orig(kernel, bd, dtype, *a, **kw)
        lst = lst + [C(*c) for c in EXTRA.get(kernel, []) if C(*c) not in lst]
        if only is not None:
            return [lst[only % len(lst)]]
        return lst

    configs.candidates = cand


def case(kind, impl, d):
    import torch

    from benchmarks._attention import compiled_flex
    from benchmarks._masks import block_mask, keep_mask, mask_case, padded_causal_mod

    if kind == "dense_causal":
        b, h, n = 4, 2048 // d, 4096
        gen = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, g = (
            torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            for _ in range(4)
        )
        for t in (q, k, v):
            t.requires_grad_(True)
        if impl == "safeattn":
            import safeattn

            call = lambda q, k, v: safeattn.attention(q, k, v, causal=True)
        else:
            from benchmarks._masks import causal_mod

            flex = compiled_flex()
            bm = block_mask(causal_mod, None, n)
            call = lambda q, k, v: flex(q, k, v, block_mask=bm)

        return SimpleNamespace(call=call, inputs=(q, k, v, g))
    if kind != "gqa_keypad":
        return mask_case(kind, impl, DT, d, flex=compiled_flex() if impl == "flex" else None)
    b, hq, hkv, n = 4, 2048 // d, 512 // d, 4096
    gen = torch.Generator(device="cuda").manual_seed(0)
    mk = lambda h: torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    q, k, v, g = mk(hq), mk(hkv), mk(hkv), mk(hq)
    for t in (q, k, v):
        t.requires_grad_(True)
    keep = keep_mask((0, 683, 1365, 2048), n)
    if impl == "safeattn":
        import safeattn

        call = lambda q, k, v: safeattn.attention(q, k, v, causal=True, key_mask=keep)
    else:
        flex = compiled_flex()
        bm = block_mask(padded_causal_mod(keep), b, n)
        call = lambda q, k, v: flex(q, k, v, block_mask=bm, enable_gqa=True)

    return SimpleNamespace(call=call, inputs=(q, k, v, g))


def fwd_bwd(c):
    q, k, v, g = c.inputs
    out = c.call(q, k, v)
    out.backward(g)


def bench(fn, grads=()):
    import triton

    def run():
        for t in grads:
            t.grad = None
        fn()

    return triton.testing.do_bench(run, warmup=25, rep=150, return_mode="median")


def cmd_compile(variant, d, kind, idx):
    setup(variant, int(d), only=int(idx), single=True)
    import torch

    fwd_bwd(case(kind, "safeattn", int(d)))
    torch.cuda.synchronize()


def cmd_flexwarm(d, kind):
    sys.path.insert(0, VARIANTS["new"])
    import torch

    fwd_bwd(case(kind, "flex", int(d)))
    torch.cuda.synchronize()


def keep_cubins(launch, tag):
    """Write the launched dK/dV kernel's cubin and PTX under $OUT/cubins (the launch's own
    specialisation, for sass_loop_stats.py: an offline compile can differ)."""
    record = launch._record
    where = os.path.join(OUT, "cubins")
    os.makedirs(where, exist_ok=True)

    def wrapped(name, cfg, compiled, source):
        record(name, cfg, compiled, source)
        if name == "bwd_dkdv":
            for ext in ("cubin", "ptx"):
                mode = "wb" if ext == "cubin" else "w"
                with open(os.path.join(where, f"{tag}_{cfg}.{ext}"), mode) as f:
                    f.write(compiled.asm[ext])

    launch._record = wrapped


def cmd_time(variant, d, kind, with_flex):
    d = int(d)
    setup(variant, d)
    import torch

    from safeattn.kernels import launch

    keep_cubins(launch, f"{variant}_D{d}_{kind}")
    res = {"variant": variant, "kind": kind, "D": d}
    c = case(kind, "safeattn", d)
    fwd_bwd(c)
    torch.cuda.synchronize()
    res["tuning"] = {k[0]: v for k, v in launch.tuning_timings().items()}
    res["chosen"] = {k[0]: str(v) for k, v in launch.chosen_configs().items()}
    res["spills"] = {k: (r.registers, r.spills) for k, r in launch.launched_kernels().items()}
    q, k, v, g = c.inputs
    res["fwd"] = bench(lambda: c.call(q, k, v))
    out = c.call(q, k, v)
    res["bwd"] = bench(lambda: out.backward(g, retain_graph=True), (q, k, v))
    if with_flex == "1":
        f = case(kind, "flex", d)
        fq, fk, fv, fg = f.inputs
        fwd_bwd(f)
        res["flex_fwd"] = bench(lambda: f.call(fq, fk, fv))
        fout = f.call(fq, fk, fv)
        res["flex_bwd"] = bench(lambda: fout.backward(fg, retain_graph=True), (fq, fk, fv))
    print(json.dumps(res))


def cmd_all():
    py = sys.executable
    env = dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS="1")
    tasks = [[py, __file__, "flexwarm", str(d), k] for d in DS for k in KINDS]
    tasks += [
        [py, __file__, "compile", var, str(d), k, str(i)]
        for i in range(5)
        for var in VARIANTS
        for d in DS
        for k in KINDS
    ]
    t0 = time.time()

    def go(cmd):
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        return cmd, r.returncode, r.stderr[-500:]

    with cf.ThreadPoolExecutor(16) as ex:
        for cmd, rc, err in ex.map(go, tasks):
            if rc:
                print("FAILED", cmd[2:], err.strip().splitlines()[-1:], flush=True)
    print(f"[diag2] compile phase {time.time() - t0:.0f} s", flush=True)
    results = []
    for d in DS:
        for kind in KINDS:
            for var in ("base", "new"):
                r = subprocess.run(
                    [py, __file__, "time", var, str(d), kind, "1" if var == "new" else "0"],
                    capture_output=True,
                    text=True,
                    env=env,
                )
                if r.returncode:
                    print("FAILED time", var, d, kind, r.stderr[-800:], flush=True)
                    continue
                results.append(json.loads(r.stdout.strip().splitlines()[-1]))
                print(f"[diag2] {var} D={d} {kind} {time.time() - t0:.0f} s", flush=True)
            with open(os.path.join(OUT, "diag2.json"), "w") as f:
                json.dump(results, f, indent=1)
    by = {(r["variant"], r["D"], r["kind"]): r for r in results}
    print(
        f"{'D':>3} {'kind':20} {'base f/b':>14} {'new f/b':>14} {'flex f/b':>14} "
        f"{'new/base b':>10} {'flex/new f':>10} {'flex/new b':>10}  new dkdv cfg, regs/spills"
    )
    for d in DS:
        for kind in KINDS:
            b, n = by.get(("base", d, kind)), by.get(("new", d, kind))
            if not (b and n):
                continue
            print(
                f"{d:>3} {kind:20} {b['fwd']:6.3f}/{b['bwd']:6.3f} {n['fwd']:6.3f}/{n['bwd']:6.3f} "
                f"{n['flex_fwd']:6.3f}/{n['flex_bwd']:6.3f} {n['bwd'] / b['bwd']:10.3f} "
                f"{n['flex_fwd'] / n['fwd']:10.3f} {n['flex_bwd'] / n['bwd']:10.3f}  "
                f"{n['chosen'].get('bwd_dkdv')} {n['spills'].get('bwd_dkdv')} base "
                f"{b['chosen'].get('bwd_dkdv')} {b['spills'].get('bwd_dkdv')}"
            )


if __name__ == "__main__":
    globals()["cmd_" + sys.argv[1]](*sys.argv[2:])
