"""All GPUs of a host (``tools/run.py --gpus all|0,1,...``): one worker per GPU, each running
``tools/run.py`` for one commit at a time with ``CUDA_VISIBLE_DEVICES`` set to its GPU.

Scheduling is work stealing: the commits wait in one queue per GPU model, and a worker takes
the next commit when its last one ends, so one slow commit keeps one GPU busy while the others
drain the queue. GPUs of different models each measure every commit: a result belongs to
the model it ran on (the child names its machine after the GPU it sees), and the same commit
on two GPUs of one model would only be measured twice.

The children write into one results directory at once: ``results.publish`` takes a lock and
copies only what its own asv run changed, and each child writes the versions sidecars of its
own commits only, so no result is lost or overwritten by a stale copy. ``--skip-existing``
reaches every child, so a second call resumes where a first one stopped.
"""

from __future__ import annotations

import collections
import os
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tools.runner import REPO


@dataclass(frozen=True)
class Gpu:
    index: int  # nvidia-smi's index (PCI bus order)
    name: str  # its model, e.g. "NVIDIA H100 80GB HBM3"


@dataclass
class Job:
    gpu: Gpu
    commit: str
    seconds: float
    exit_status: int


def list_gpus() -> list[Gpu]:
    """Every NVIDIA GPU of this host, as ``nvidia-smi`` lists them (none without one)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.splitlines():
        index, _, name = line.partition(",")
        if index.strip().isdigit():
            gpus.append(Gpu(int(index), name.strip()))
    return gpus


def select(spec: str, available: Sequence[Gpu]) -> list[Gpu]:
    """The GPUs ``--gpus`` names: ``all``, or comma-separated indices of ``available``.
    Raises ValueError with a hint for a malformed spec, an unknown index or no GPU at all."""
    if not available:
        raise ValueError("--gpus: nvidia-smi lists no GPU on this machine")
    listed = ", ".join(f"{g.index} ({g.name})" for g in available)
    if spec.strip().lower() == "all":
        return list(available)
    by_index = {g.index: g for g in available}
    chosen: list[Gpu] = []
    for part in spec.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) not in by_index:
            raise ValueError(f"--gpus {spec!r}: {part!r} is not a GPU here; GPUs: {listed}")
        if by_index[int(part)] not in chosen:
            chosen.append(by_index[int(part)])
    return chosen


def run_all(
    gpus: Sequence[Gpu],
    commits: Sequence[str],
    command: Callable[[str], list[str]],
    say: Callable[[str], None] = print,
    deadline: float | None = None,
) -> list[Job]:
    """Measure every commit on each GPU model: one thread per GPU runs ``command(commit)``
    (``tools/run.py`` for that commit) with ``CUDA_VISIBLE_DEVICES`` set to its GPU,
    taking commits oldest first from its model's queue, echoing the child's lines prefixed
    with ``[gpuN]`` and a progress line per commit. ``deadline`` (``time.time()`` value):
    start no commit after it. Returns the jobs run, in the order they ended."""
    queues: dict[str, collections.deque[str]] = {}
    for gpu in gpus:
        queues.setdefault(gpu.name, collections.deque(commits))
    total = {name: len(commits) for name in queues}
    lock = threading.Lock()
    jobs: list[Job] = []

    def work(gpu: Gpu) -> None:
        tag = f"[gpu{gpu.index}]"
        while True:
            with lock:
                queue = queues[gpu.name]
                if not queue or (deadline is not None and time.time() >= deadline):
                    if queue:
                        say(f"{tag} budget used: {len(queue)} commit(s) of {gpu.name} not started")
                    return
                commit = queue.popleft()
                number = total[gpu.name] - len(queue)
            say(f"{tag} {gpu.name}: commit {number}/{total[gpu.name]} {commit[:8]} started")
            start = time.time()
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu.index))
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA's indices = nvidia-smi's
            proc = subprocess.Popen(
                command(commit), cwd=REPO, env=env, text=True,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            )  # fmt: skip
            for line in proc.stdout or ():
                say(f"{tag} {line.rstrip()}")
            code = proc.wait()
            job = Job(gpu, commit, time.time() - start, code)
            with lock:
                jobs.append(job)
                left = len(queues[gpu.name])
            status = "" if code == 0 else f", exit status {code}"
            say(f"{tag} {commit[:8]} done in {job.seconds:.0f} s{status}; "
                f"{left} left for {gpu.name}")  # fmt: skip

    threads = [threading.Thread(target=work, args=(g,), name=f"gpu{g.index}") for g in gpus]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return jobs
