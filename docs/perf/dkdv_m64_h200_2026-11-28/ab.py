"""A/B of the dK/dV kernel between safeattn trees: ``python ab.py TREE MODE`` imports the
``safeattn`` under TREE. Modes:

- ``sweep``: the tuner's median ms per dK/dV config (spilling ones too) and the chosen
  build's spills (no table, no cache, autotuning on);
- ``e2e``: the whole backward's time with the committed table (``do_bench`` median) and the
  gradients' max error against an fp32 SDPA reference.

One JSON line per shape (bf16, D=128, B = 16384 / N, Hq = 16). Run by run.sh; lint-formatted
after the runs, same logic.
"""

import json
import os
import sys
import time

TREE, MODE = sys.argv[1], sys.argv[2]
sys.path.insert(0, TREE)
if MODE == "sweep":
    os.environ.update(
        {"SAFEATTN_TUNING_TABLE": "0", "SAFEATTN_TUNING_CACHE": "0", "SAFEATTN_AUTOTUNE": "1"}
    )
else:
    os.environ.update({"SAFEATTN_TUNING_CACHE": "0"})
import torch  # noqa: E402  (after the environment above)
import triton  # noqa: E402

import safeattn  # noqa: E402
from safeattn.kernels import configs, launch, tuning  # noqa: E402

assert safeattn.__file__.startswith(os.path.abspath(TREE)), safeattn.__file__
C = configs.KernelConfig
SWEEP = [C(32, 64, 4, 3), C(32, 64, 4, 4), C(32, 128, 8, 3), C(32, 128, 8, 4), C(64, 64, 4, 2)]
SHAPES = [(4096, False, 1), (4096, True, 1), (4096, False, 4), (4096, True, 4), (1024, True, 1)]

if MODE == "sweep":
    shipped = configs.candidates

    def cands(kernel, bd, dtype, smem_limit=None, masked=False, tma=False, dropout=False):
        listed = shipped(kernel, bd, dtype, smem_limit, masked, tma, dropout)
        return SWEEP if (kernel == "bwd_dkdv" and tma and bd == 128) else listed[:1]

    configs.candidates = cands
    tuning.spill_free_first = lambda fitting, spills, dtype, bd: fitting


def bench_backward(q, k, v, do, causal):
    """Median ms of the backward alone (graph retained), then fresh grads."""
    o = safeattn.attention(q, k, v, causal=causal)

    def bwd():
        q.grad = k.grad = v.grad = None
        o.backward(do, retain_graph=True)

    ms = triton.testing.do_bench(bwd, warmup=50, rep=300, return_mode="median")
    bwd()
    return ms


def errors(q, k, v, do, causal, gqa):
    """Max |grad - fp32 reference| / max |reference| of dQ, dK, dV."""
    grads = [q.grad.float(), k.grad.float(), v.grad.float()]
    qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
    of = torch.nn.functional.scaled_dot_product_attention(
        qf, kf, vf, is_causal=causal, enable_gqa=gqa > 1
    )
    of.backward(do.float())
    refs = (qf.grad, kf.grad, vf.grad)
    return {
        name: round(((a - r).abs().max() / r.abs().max()).item(), 5)
        for name, a, r in zip("qkv", grads, refs, strict=True)
    }


seen = set()
for n, causal, gqa in SHAPES:
    b, hq = 16384 // n, 16
    gen = torch.Generator(device="cuda").manual_seed(0)

    def rand(heads, gen=gen, b=b, n=n):
        return torch.randn(b, heads, n, 128, device="cuda", dtype=torch.bfloat16, generator=gen)

    q, k, v = (rand(h).requires_grad_() for h in (hq, hq // gqa, hq // gqa))
    do = rand(hq)
    t0 = time.time()
    safeattn.attention(q, k, v, causal=causal).backward(do)
    torch.cuda.synchronize()
    row = dict(tree=os.path.basename(TREE.rstrip("/")), n=n, causal=causal, gqa=gqa)
    row["first_s"] = round(time.time() - t0, 1)
    if MODE == "sweep":
        for key, timings in launch.tuning_timings().items():
            if key[0] == "bwd_dkdv" and key not in seen:
                seen.add(key)
                row["dkdv"] = {str(c): round(ms, 4) for c, ms in timings}
        res = launch.launched_kernels()
        row["res"] = {name: str(r) for name, r in res.items() if "dkdv" in name}
    else:
        res = launch.launched_kernels()
        row["cfg"] = {name: (r.config, r.registers, r.spills) for name, r in res.items()}
        row["bwd_ms"] = round(bench_backward(q, k, v, do, causal), 4)
        row["err"] = errors(q, k, v, do, causal, gqa)
    print(json.dumps(row), flush=True)
