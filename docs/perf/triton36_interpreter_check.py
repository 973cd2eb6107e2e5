"""safeattn under Triton's interpreter with and without safeattn.kernels.interpreter_compat
(a diagnostic, not a test): run it with triton 3.6 on the path and NumPy 2.x installed.

    pip install --no-deps --target /tmp/t36 triton==3.6.0
    PYTHONPATH=/tmp/t36 python docs/perf/triton36_interpreter_check.py
"""

import importlib.util
import os

os.environ["TRITON_INTERPRET"] = "1"

import numpy
import torch
import triton

# The module on its own, before safeattn's import applies it.
spec = importlib.util.spec_from_file_location("ic", "safeattn/kernels/interpreter_compat.py")
ic = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ic)
print("numpy", numpy.__version__, "triton", triton.__version__, "patch needed:", ic.needed())

from triton.runtime import interpreter  # noqa: E402

import safeattn  # noqa: E402


def run() -> float:
    """Causal + window forward and backward; max |out - reference|."""
    q = torch.randn(1, 2, 40, 16, requires_grad=True)
    o = safeattn.attention(q, q, q, causal=True, window=(8, 0))
    o.sum().backward()
    qd = q.detach()
    r = safeattn.reference.attention(qd, qd, qd, causal=True, window=(8, 0))
    return float((o.detach() - r).abs().max())


print("patched: max |out - reference| =", run())
# Undo the patch: the wrapper's closure holds the interpreter's own function.
interpreter._patch_lang_tensor = interpreter._patch_lang_tensor.__closure__[0].cell_contents
try:
    print("unpatched:", run())
except Exception as exc:
    print("unpatched fails:", type(exc).__name__, str(exc)[:160])
