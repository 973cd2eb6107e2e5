"""usage: python static.py TREE KERNEL M,N,W,S VARIANT(dense|causal) [CONST=val...]"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
os.environ.setdefault("TRITON_PTXAS_PATH", "/usr/local/cuda-13.0/bin/ptxas")
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from safeattn import audit
from safeattn.gpu_limits import ARCHS
from safeattn.kernels.configs import KernelConfig as C
kernel = sys.argv[2]; m, n, w, st = map(int, sys.argv[3].split(",")); variant = sys.argv[4]
hd = 128
extra = {}
for kv in sys.argv[5:]:
    k, v = kv.split("=")
    if k == "HD": hd = int(v); continue
    extra[k] = int(v) if v.isdigit() else v
cfg = C(m, n, w, st)
fn = audit._kernel_fn(kernel)
cx = audit._constexprs(kernel, cfg, torch.bfloat16, hd, "causal")
if variant == "dense":
    cx["HAS_WINDOW_RIGHT"] = False
cx.update(extra)
sig, consts, attrs = audit._signature(fn, torch.bfloat16, "causal", cx, hd)
t = time.time()
c = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
                   target=GPUTarget("cuda", 90, 32), options={"num_warps": w, "num_stages": st})
regs, stack = audit._regs_and_stack(c.asm["cubin"])
print(json.dumps(dict(tree=sys.argv[1][-8:], kernel=kernel, cfg=str(cfg), variant=variant, hd=hd, extra=extra,
                      shared=c.metadata.shared, regs=regs, spills=stack, secs=round(time.time()-t, 1))), flush=True)
