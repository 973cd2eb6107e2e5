"""Where the live kernels' local memory comes from (issue 13: "no spills at D <= 128").

``launch.launched_kernels()`` reports local memory for some tuned kernels on Hopper while the
static audit of the same configs reports none. Per shape, this script launches safeattn's
forward + backward, keeps every compiled kernel it launched, and prints for each:
Triton's ``n_regs``/``n_spills``, ``cuobjdump -res-usage`` of the live cubin, and
``ptxas -v`` of the live PTX with Triton's bundled ptxas and with the system's (if any),
so a difference between the live compile, the audit and the assembler shows up.

    python docs/perf/spill_check.py [--out DIR]     # on a CUDA machine
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import safeattn
from safeattn.kernels import launch

# (label, dtype, B, Hq, Hkv, N, D, causal, left padding fraction or None)
SHAPES = [
    ("D128 N8192 causal", torch.bfloat16, 2, 16, 16, 8192, 128, True, None),
    ("D128 N2048 causal GQA 32:4 B8", torch.bfloat16, 8, 32, 4, 2048, 128, True, None),
    ("D128 N4096 leftpad+causal", torch.bfloat16, 4, 16, 16, 4096, 128, True, 0.25),
    ("D64 N4096", torch.bfloat16, 4, 32, 32, 4096, 64, False, None),
]


def ptxas_paths() -> dict[str, str]:
    """Triton's ptxas (as it resolves it, honouring TRITON_PTXAS_PATH) and the system's."""
    paths = {}
    try:
        from triton.backends.nvidia import compiler

        found = getattr(compiler, "get_ptxas", None) or compiler._path_to_binary
        got = found() if found.__name__ == "get_ptxas" else found("ptxas")
        paths["triton"] = got[0] if isinstance(got, tuple) else getattr(got, "path", str(got))
    except Exception as exc:  # report, do not stop
        print(f"triton's ptxas: not found ({exc!r})")
    system = shutil.which("ptxas")
    if system:
        paths["system"] = system
    return paths


def run(cmd: list[str]) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True)
    return (done.stdout + done.stderr).strip()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="spill_check")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    print(f"TRITON_PTXAS_PATH={os.environ.get('TRITON_PTXAS_PATH')}")
    ptxas = ptxas_paths()
    for name, path in ptxas.items():
        print(f"ptxas ({name}): {path}: {run([path, '--version']).splitlines()[-1]}")
    kept: dict[str, object] = {}
    record = launch._record

    def keep(name, cfg, compiled, source):
        kept[name] = compiled
        record(name, cfg, compiled, source)

    launch._record = keep
    for label, dtype, b, hq, hkv, n, d, causal, pad in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(b, hq, n, d, device="cuda", dtype=dtype, generator=gen)
        k = torch.randn(b, hkv, n, d, device="cuda", dtype=dtype, generator=gen)
        v = torch.randn(b, hkv, n, d, device="cuda", dtype=dtype, generator=gen)
        kw = {"causal": causal}
        if pad is not None:
            starts = (torch.arange(b, device="cuda") * int(pad * n)) // max(b - 1, 1)
            kw["key_mask"] = torch.arange(n, device="cuda")[None, :] >= starts[:, None]
        for t in (q, k, v):
            t.requires_grad_(True)
        for mode in ("0", "1"):
            os.environ["SAFEATTN_TMA"] = mode
            kept.clear()
            safeattn.attention(q, k, v, **kw).sum().backward()
            torch.cuda.synchronize()
            for name, compiled in sorted(kept.items()):
                r = launch.launched_kernels()[name]
                stem = f"{label.replace(' ', '_').replace(':', '-')}_tma{mode}_{name}"
                cubin = os.path.join(args.out, stem + ".cubin")
                ptx = os.path.join(args.out, stem + ".ptx")
                with open(cubin, "wb") as f:
                    f.write(compiled.asm["cubin"])
                with open(ptx, "w") as f:
                    f.write(compiled.asm["ptx"])
                print(f"\n== {label} tma={mode} {name} {r.config}: n_regs {r.registers}, "
                      f"local {r.spills} B (Triton)")  # fmt: skip
                usage = [ln for ln in run(["cuobjdump", "-res-usage", cubin]).splitlines()
                         if "REG" in ln]  # fmt: skip
                print("  cuobjdump:", *usage)
                arch = "sm_90a" if "sm_90a" in compiled.asm["ptx"] else "sm_90"
                for which, path in ptxas.items():
                    out = run([path, f"-arch={arch}", "-v", "-O3", ptx, "-o", os.devnull])
                    lines = [ln.strip() for ln in out.splitlines() if "bytes" in ln or "Used" in ln]
                    print(f"  ptxas -v ({which}):", " | ".join(lines))
    os.environ["SAFEATTN_TMA"] = "auto"
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
