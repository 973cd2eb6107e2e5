"""Make Triton's interpreter (``TRITON_INTERPRET=1``) of older releases run our kernels.

Triton 3.6's interpreter holds every scalar as a one-element 1-D numpy array and converts
it with ``int(array)`` when a scalar tensor is used as a Python integer, as the loop bounds
of ``tl.range(start, end)`` are. NumPy 2.x refuses that ("only 0-dimensional arrays can be
converted to Python scalars"), so every kernel with a run-time loop bound failed under the
interpreter with triton 3.6 (the GPU machines' version) and a current NumPy; newer Triton
releases squeeze the array first. :func:`apply` adds that squeeze to the older interpreter.

It patches the interpreter only, never compiled kernels, and only where the interpreter in
use still has the failing conversion.

:func:`on_fresh_chunk` runs one interpreted launch where CPython's frame-chunk boundaries
cannot slow it down (its note), and :func:`one_patch_per_launch` without the interpreter
re-patching ``triton.language`` at every helper call (its note).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator

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


@functools.cache
def _deep_room(slots: int) -> Callable:
    """A function ``run(call)`` that returns ``call()`` from inside a frame of ``slots``
    local slots. CPython sizes a new frame chunk as the next power of two above the frame
    that needs it, so entering ``run`` maps a chunk of about twice its frame, and ``call``
    runs in the other half with no chunk boundary to cross."""
    names = ", ".join(f"_{i}" for i in range(slots))
    src = f"def run(call):\n    {names} = (None,) * {slots}\n    return call()\n"
    scope: dict = {}
    exec(compile(src, "<safeattn deep_room>", "exec"), scope)  # generated here, fixed text
    return scope["run"]


ROOM_SLOTS = 8192  # 64 KB of frame slots: a 128 KB chunk


def on_fresh_chunk(call: Callable):
    """``call()`` (one interpreted launch) on a frame chunk of its own; returns its result.

    Why: CPython 3.11+ keeps frames in chunks (16 KB at first), mapping one when a call
    crosses into it and unmapping it on the way back. A kernel whose interpreted hot loop
    sat across a chunk boundary mapped and unmapped one for every op: after the redo-span
    helpers (734aafa) test_partial_tiles_in_half_steps[float_mask] took 55-65 s instead of
    40-48 s, with 24x the page faults (perf: 1.52 M against 63 K, all in
    _PyThreadState_BumpFramePointerSlow); on the room, 64 K and base's CPU time again.
    Where the caller sits on the stack no longer matters."""
    return _deep_room(ROOM_SLOTS)(call)


# How Triton 3.6 to 3.9 patch the language for a launch (GridExecutor) and for a call of a
# @triton.jit helper from a kernel (InterpretedFunction.__call__): through the module global
# _patch_lang, which one_patch_per_launch replaces.
_HELPER_CALL = "_patch_lang(self.fn)"


@functools.cache
def _helper_call_is_known() -> bool:
    try:
        from triton.runtime import interpreter

        source = inspect.getsource(interpreter.InterpretedFunction.__call__)
    except (ImportError, AttributeError, OSError, TypeError):
        return False
    return _HELPER_CALL in source


@contextlib.contextmanager
def one_patch_per_launch() -> Iterator[None]:
    """Inside: each ``@triton.jit`` function of an interpreted launch (the kernel, each
    helper it calls) patches ``triton.language`` at its first call only. Outside, and where
    the interpreter's helper call is not the one known (:data:`_HELPER_CALL`), Triton's own
    behaviour.

    Why: Triton patches the language modules a helper sees at every call of it, through
    ``inspect.getmembers`` of four of them, and never undoes a helper's patch before the
    launch ends; a second call of the same helper sets the same patches again. In
    test_partial_tiles_in_half_steps[float_mask] that was 115,741 patches for one test
    (cProfile: 52 of 220 s). Only our own launches (``launch._run``) enter this, so other
    code's interpreted kernels keep Triton's behaviour."""
    if not _helper_call_is_known():
        yield
        return
    from triton.runtime import interpreter

    original = interpreter._patch_lang
    scopes: dict[int, object] = {}  # per function patched in this launch, the scope it made

    def patch_lang(fn):
        if id(fn) not in scopes:
            scopes[id(fn)] = original(fn)
        return scopes[id(fn)]  # the launch restores its own scope; helpers drop theirs

    interpreter._patch_lang = patch_lang
    try:
        yield
    finally:
        interpreter._patch_lang = original
