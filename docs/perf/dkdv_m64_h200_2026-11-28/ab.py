"""A/B of the dK/dV kernel between two safeattn trees (sys.path[0] = TREE). Modes:
sweep: the tuner's median ms per dK/dV config (spilling ones too) + compiled spills;
e2e: the backward's time with the committed table, and errors against an fp32 reference."""
import json, os, sys, time
TREE, MODE = sys.argv[1], sys.argv[2]
sys.path.insert(0, TREE)
if MODE == "sweep":
    os.environ.update({"SAFEATTN_TUNING_TABLE": "0", "SAFEATTN_TUNING_CACHE": "0", "SAFEATTN_AUTOTUNE": "1"})
else:
    os.environ.update({"SAFEATTN_TUNING_CACHE": "0"})
import torch, triton
import safeattn
from safeattn.kernels import configs, launch, tuning
assert safeattn.__file__.startswith(os.path.abspath(TREE)), safeattn.__file__
C = configs.KernelConfig
SWEEP = [C(32, 64, 4, 3), C(32, 64, 4, 4), C(32, 128, 8, 3), C(32, 128, 8, 4), C(64, 64, 4, 2)]
if MODE == "sweep":
    shipped = configs.candidates
    def cands(kernel, bd, dtype, smem_limit=None, masked=False, tma=False, dropout=False):
        listed = shipped(kernel, bd, dtype, smem_limit, masked, tma, dropout)
        return SWEEP if (kernel == "bwd_dkdv" and tma and bd == 128) else listed[:1]
    configs.candidates = cands
    tuning.spill_free_first = lambda fitting, spills, dtype, bd: fitting
SHAPES = [(4096, False, 1), (4096, True, 1), (4096, False, 4), (4096, True, 4), (1024, True, 1)]
out = []
seen = set()
for n, causal, gqa in SHAPES:
    b, hq = 16384 // n, 16
    g = torch.Generator(device="cuda").manual_seed(0)
    mk = lambda h: torch.randn(b, h, n, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    q, k, v = mk(hq).requires_grad_(), mk(hq // gqa).requires_grad_(), mk(hq // gqa).requires_grad_()
    do = mk(hq)
    t0 = time.time()
    o = safeattn.attention(q, k, v, causal=causal)
    o.backward(do)
    torch.cuda.synchronize()
    row = dict(tree=os.path.basename(TREE.rstrip("/")), n=n, causal=causal, gqa=gqa, first_s=round(time.time() - t0, 1))
    if MODE == "sweep":
        for key, timings in launch.tuning_timings().items():
            if key[0] == "bwd_dkdv" and key not in seen:
                seen.add(key)
                row["dkdv"] = {str(c): round(ms, 4) for c, ms in timings}
        row["res"] = {k2: str(r) for k2, r in launch.launched_kernels().items() if "dkdv" in k2}
    else:
        res = launch.launched_kernels()
        row["cfg"] = {k2: (r.config, r.registers, r.spills) for k2, r in res.items()}
        def bwd():
            q.grad = k.grad = v.grad = None
            o.backward(do, retain_graph=True)
        o = safeattn.attention(q, k, v, causal=causal)
        ms = triton.testing.do_bench(bwd, warmup=50, rep=300, return_mode="median")
        row["bwd_ms"] = round(ms, 4)
        q.grad = k.grad = v.grad = None
        o.backward(do, retain_graph=True)
        grads = [q.grad.float(), k.grad.float(), v.grad.float()]
        qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
        of = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal, enable_gqa=gqa > 1)
        of.backward(do.float())
        row["err"] = {nm: round(((a - r).abs().max() / r.abs().max()).item(), 5) for nm, a, r in zip("qkv", grads, (qf.grad, kf.grad, vf.grad))}
    print(json.dumps(row), flush=True)
    out.append(row)
