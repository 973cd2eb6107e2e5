"""safeattn.kernels.interpreter_compat: triton 3.6's interpreter under NumPy 2.x.

The CI's Triton does not need the patch; these tests give it an interpreter function with
the old conversion (a stand-in for triton 3.6's ``_patch_lang_tensor``) and check what
``apply`` does with it. The real thing was checked by running tests/test_kernels.py under
triton 3.6.0 (docs/perf/triton36_interpreter_2026-11-25.log).
"""

from __future__ import annotations

import inspect
import operator

import numpy as np
import pytest

from safeattn.kernels import interpreter_compat

interpreter = pytest.importorskip("triton.runtime.interpreter")


class _Scope:
    def set_attr(self, obj, name, value):
        setattr(obj, name, value)


class _Handle:
    def __init__(self, data):
        self.data = data


class _Tensor:
    """What the interpreter's scalars look like: a one-element 1-D array."""

    def __init__(self, value):
        self.handle = _Handle(np.array([value], dtype=np.int32))


def _old_patch_lang_tensor(tensor, scope):
    scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data))


@pytest.fixture
def old_interpreter(monkeypatch):
    monkeypatch.setattr(interpreter, "_patch_lang_tensor", _old_patch_lang_tensor)
    return interpreter


def _numpy_refuses() -> bool:
    try:
        int(np.array([1]))
    except TypeError:
        return True
    return False


@pytest.mark.skipif(not _numpy_refuses(), reason="this NumPy converts 1-element arrays")
def test_old_interpreter_is_patched_once(old_interpreter):
    tensor = type("T", (_Tensor,), {})
    _old_patch_lang_tensor(tensor, _Scope())
    with pytest.raises(TypeError, match="0-dimensional"):
        operator.index(tensor(7))  # the failure, as triton 3.6 hits it in tl.range
    assert interpreter_compat.needed()
    assert interpreter_compat.apply()
    old_interpreter._patch_lang_tensor(tensor, _Scope())
    assert operator.index(tensor(7)) == 7
    assert list(range(tensor(2), tensor(5))) == [2, 3, 4]
    assert not interpreter_compat.needed() and not interpreter_compat.apply(), "patched twice"


def test_current_interpreter_is_left_alone():
    """The installed Triton's own interpreter: patched only if it has the old conversion."""
    before = interpreter._patch_lang_tensor
    has_old = "int(self.handle.data))" in inspect.getsource(before)
    if getattr(before, "safeattn_squeezes", False):
        assert not interpreter_compat.needed()  # TRITON_INTERPRET=1 applied it at import
    else:
        assert interpreter_compat.needed() == (has_old and _numpy_refuses())


# --------------------------------------------------------------------------- frame room


def test_on_fresh_chunk_returns_and_raises_as_the_call_does():
    assert interpreter_compat.on_fresh_chunk(lambda: 42) == 42
    with pytest.raises(ZeroDivisionError):
        interpreter_compat.on_fresh_chunk(lambda: 1 // 0)


def test_on_fresh_chunk_runs_the_call_under_a_frame_of_the_room_size():
    """The room is a caller frame of ROOM_SLOTS local slots: the frame chunk it maps leaves
    the call as much space again, so no boundary sits in an interpreted launch's loop."""
    seen = []

    def call():
        caller = inspect.currentframe().f_back
        seen.append(caller.f_code.co_nlocals)

    interpreter_compat.on_fresh_chunk(call)
    assert seen == [interpreter_compat.ROOM_SLOTS + 1]  # the slots and the call argument


def test_every_interpreted_launch_of_a_call_runs_in_the_room(monkeypatch):
    """Forward and backward under the interpreter: each kernel launch (first, guarded redo,
    preprocess) goes through on_fresh_chunk."""
    import torch

    import safeattn
    from safeattn.kernels import launch

    if not launch.INTERPRET:
        pytest.skip("the room is for interpreted launches (TRITON_INTERPRET=1)")
    calls = []
    real = interpreter_compat.on_fresh_chunk
    monkeypatch.setattr(interpreter_compat, "on_fresh_chunk", lambda c: calls.append(1) or real(c))
    launched = []
    real_getitem = type(launch._bwd_preprocess).__getitem__

    def getitem(self, grid):
        launched.append(self.fn.__name__ if hasattr(self, "fn") else str(self))
        return real_getitem(self, grid)

    monkeypatch.setattr(type(launch._bwd_preprocess), "__getitem__", getitem)
    q, k, v = (torch.randn(1, 1, 20, 16, requires_grad=True) for _ in range(3))
    safeattn.attention(q, k, v, causal=True).sum().backward()
    assert len(launched) >= 4 and len(calls) == len(launched), (calls, launched)


def test_a_helper_patches_the_language_once_per_launch_with_the_same_results(monkeypatch):
    """one_patch_per_launch: forward and backward under the interpreter give bitwise the
    results of Triton's own helper calls, with far fewer language patches (each helper
    once per launch, not at every call), and Triton's helper call is back afterwards."""
    import torch

    import safeattn
    from safeattn.kernels import launch

    if not launch.INTERPRET:
        pytest.skip("a patch of the interpreter (TRITON_INTERPRET=1)")
    assert interpreter_compat._helper_call_is_known(), "this Triton's helper call changed"
    patches = []
    real_patch = interpreter._patch_lang
    monkeypatch.setattr(interpreter, "_patch_lang", lambda fn: patches.append(fn) or real_patch(fn))
    original_call = interpreter.InterpretedFunction.__call__

    def run():
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(2, 2, 40, 16, generator=g).requires_grad_() for _ in range(3))
        k.data[0, 0, 5] = float("nan")  # an excluded key: the guarded redo launches too
        mask = torch.arange(40)[None, :] >= torch.tensor([0, 6])[:, None]
        out = safeattn.attention(q, k, v, causal=True, key_mask=mask)
        out.backward(torch.ones_like(out))
        return [t.detach().clone() for t in (out, q.grad, k.grad, v.grad)]

    once = run()
    patched_once = len(patches)
    patches.clear()
    monkeypatch.setattr(interpreter_compat, "_helper_call_is_known", lambda: False)
    every_call = run()
    patched_every_call = len(patches)
    for a, b in zip(once, every_call, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    assert patched_once * 5 < patched_every_call, (patched_once, patched_every_call)
    assert interpreter.InterpretedFunction.__call__ is original_call
