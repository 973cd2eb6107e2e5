"""benchmarks/_gpu_measure.py's CUDA-event sampler, on a CPU machine: torch.cuda replaced by
a recorder of what would be enqueued, so the order of the queue (flush, lead, start event,
the call, end event) and the lead's length are checked without a GPU."""

from __future__ import annotations

import importlib

import pytest
import torch

gpu_measure = importlib.import_module("benchmarks._gpu_measure")


def test_lead_covers_the_host_issue_time_with_a_floor_and_a_cap():
    assert gpu_measure.lead_ms([]) == gpu_measure.LEAD_FLOOR_MS
    # The median of the warm-up calls: a first call that compiled (900 ms) does not count.
    assert gpu_measure.lead_ms([900.0, 1.0, 1.2]) == pytest.approx(2 * 1.2 + 0.25)
    assert gpu_measure.lead_ms([1.0, 1.1, 0.9]) > 2 * 1.0
    assert gpu_measure.lead_ms([400.0] * 3) == gpu_measure.LEAD_CAP_MS


class _Queue:
    """What the sampler would enqueue on the CUDA stream, in order."""

    def __init__(self):
        self.ops: list[tuple] = []
        self.clock = 0.0


@pytest.fixture
def queue(monkeypatch):
    q = _Queue()

    class Event:
        def __init__(self, enable_timing=False):
            self.at = None

        def record(self):
            q.ops.append(("record", self))
            self.at = q.clock

        def elapsed_time(self, other):
            return other.at - self.at

    class Flush:
        def zero_(self):
            q.ops.append(("flush",))

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: q.ops.append(("sync",)))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: q.ops.append(("sleep", cycles)))
    monkeypatch.setattr(torch, "empty", lambda *a, **k: Flush())
    monkeypatch.setattr(gpu_measure, "_CYCLES_PER_MS", {0: 1000.0})  # 1000 cycles per ms
    return q


def test_every_timed_call_is_queued_behind_a_sleep_that_covers_its_issue_time(queue, monkeypatch):
    grads = [torch.zeros(1, requires_grad=True) for _ in range(2)]
    issue = iter([0.5, 0.004, 0.003])  # perf_counter pairs: warm-up issue times 500, 4, 3 ms
    clock = {"t": 0.0}

    def fake_counter():
        return clock["t"]

    monkeypatch.setattr("time.perf_counter", fake_counter)

    def fn():
        queue.ops.append(("fn",))
        queue.clock += 2.0  # the call's GPU time between its events
        clock["t"] += next(issue, 0.001)

    times = gpu_measure.cuda_event_samples(fn, samples=4, grad_to_none=grads, warmup=3)
    assert times == [2.0] * 4
    timed = queue.ops[queue.ops.index(("sync",), 6) + 1 :]  # after the warm-ups' syncs
    lead_cycles = int(gpu_measure.lead_ms([500.0, 4.0, 3.0]) * 1000.0)
    assert lead_cycles == int((2 * 4.0 + 0.25) * 1000)
    for i in range(4):
        flush, sleep, start, call, end = timed[5 * i : 5 * i + 5]
        assert flush == ("flush",) and sleep == ("sleep", lead_cycles)
        assert start[0] == "record" and call == ("fn",) and end[0] == "record"
    assert timed[20:] == [("sync",)]
    # Each warm-up call started on an idle queue (its issue time is the host's alone).
    warm = queue.ops[: queue.ops.index(("sync",), 6) + 1]
    assert warm == [("sync",), ("fn",)] * 3 + [("sync",)]
