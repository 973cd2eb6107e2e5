"""Make Triton's interpreter (``TRITON_INTERPRET=1``) of older releases run our kernels.

Triton 3.6's interpreter holds every scalar as a one-element 1-D numpy array and converts
it with ``int(array)`` when a scalar tensor is used as a Python integer, as the loop bounds
of ``tl.range(start, end)`` are. NumPy 2.x refuses that ("only 0-dimensional arrays can be
converted to Python scalars"), so every kernel with a run-time loop bound failed under the
interpreter with triton 3.6 (the GPU machines' version) and a current NumPy; newer Triton
releases squeeze the array first. :func:`apply` adds that squeeze to the older interpreter.

It patches the interpreter only, never compiled kernels, and only where the interpreter in
use still has the failing conversion.
"""

from __future__ import annotations

import inspect

import numpy as np

_FAILING = "int(self.handle.data))"


def needed() -> bool:
    """Whether the loaded Triton interpreter has the conversion that NumPy 2.x refuses."""
    try:
        from triton.runtime import interpreter
    except ImportError:  # a Triton without an interpreter: nothing to patch
        return False
    patch = getattr(interpreter, "_patch_lang_tensor", None)
    if patch is None or getattr(patch, "safeattn_squeezes", False):
        return False
    try:
        int(np.array([1]))
    except TypeError:
        return _FAILING in inspect.getsource(patch)
    return False  # an older NumPy converts one-element arrays itself


def apply() -> bool:
    """Patch the interpreter if :func:`needed`; returns whether it did. Idempotent."""
    if not needed():
        return False
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    patch_lang_tensor.safeattn_squeezes = True  # type: ignore[attr-defined]
    # _patch_lang looks the function up as a module global on every kernel call.
    interpreter._patch_lang_tensor = patch_lang_tensor
    return True
