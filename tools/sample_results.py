"""Real asv results from a tiny CPU-only benchmark project, for the dashboard's tests and demos.

The dashboard reads asv's ``results/`` directory. Tests must run it on files written by a
*real* asv run (never hand-written JSON), and CI has no GPU, so this module writes a
throwaway project into a directory: a small numpy "attention" package committed to git, and
three asv suites named like the real ones (``speed.SpeedSuite.track_forward_ms``,
``resources.ResourceSuite.track_shared_bytes``, ``numerics.NumericsSuite.track_nonfinite_rate``
...) so every dashboard page has something to show. It then runs
``asv run --python=same --set-commit-hash=<sha>`` for each commit on each machine name.

The second commit plants real regressions: its forward pass repeats the work
(:data:`SLOW_REPEATS` times, so it really is slower) and its "safe" implementation stops
zeroing fully masked rows (so its non-finite rate really rises above 0).

Usage::

    python -m tools.sample_results /tmp/sample   # -> /tmp/sample/results
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MACHINES: tuple[str, ...] = ("cpu-alpha", "cpu-beta")
# The regression commit runs the forward pass this many times: far beyond timing noise.
SLOW_REPEATS = 4
# Two of safeattn.families' adversarial families, imitated in numpy (checked against
# safeattn.families.FAMILIES when the sample is made).
FAMILIES: tuple[str, ...] = ("all_keys_masked", "leftpad_causal")

_ATTN_SOURCE = '''\
"""A tiny numpy attention: the project whose commits the sample asv runs measure."""
import numpy as np

REPEATS = {repeats}          # > 1 on the planted-regression commit: really slower
ZERO_EMPTY_ROWS = {zero_rows}  # False on the planted-regression commit: NaN on empty rows


def attention(q, k, v, key_mask, causal, safe):
    """q, k, v: (B, H, N, D); key_mask: (B, N) bool, True = attend -> (B, H, N, D)."""
    for _ in range(REPEATS):
        s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
        allowed = key_mask[:, None, None, :]
        if causal:
            n = q.shape[-2]
            allowed = allowed & np.tril(np.ones((n, n), dtype=bool))
        s = np.where(allowed, s, -np.inf)
        m = s.max(axis=-1, keepdims=True)
        if safe and ZERO_EMPTY_ROWS:
            m = np.where(np.isfinite(m), m, 0.0)
        p = np.exp(s - m)
        denom = p.sum(axis=-1, keepdims=True)
        if safe and ZERO_EMPTY_ROWS:
            denom = np.where(denom > 0, denom, 1.0)
        out = (p / denom) @ v
    return out


def shared_bytes(kernel, arch):
    """Shared memory of the tile config this toy project would pick (bytes)."""
    block_m, block_n = CONFIGS[kernel]
    stages = 3 if arch in ("sm80", "sm90") else 2  # the small-smem archs get fewer stages
    return (block_m + 2 * block_n) * 64 * 2 * stages  # head dim 64, 2-byte elements


CONFIGS = {{"fwd": (128, 64), "bwd_dkdv": (64, 64), "bwd_dq": (64, 128)}}
'''

_SPEED_SUITE = '''\
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np  # noqa: E402

from tinyproj import attn  # noqa: E402

BATCH, HEADS = 1, 2


class SpeedSuite:
    params = (["safeattn", "sdpa_math"], ["float32", "float64"], [16, 32], [48, 96],
              [False, True])
    param_names = ["impl", "dtype", "head_dim", "seq_len", "causal"]

    def setup(self, impl, dtype, head_dim, seq_len, causal):
        rng = np.random.default_rng(0)
        shape = (BATCH, HEADS, seq_len, head_dim)
        self.q, self.k, self.v = (rng.standard_normal(shape).astype(dtype) for _ in range(3))
        self.mask = np.ones((BATCH, seq_len), dtype=bool)

    def track_forward_ms(self, impl, dtype, head_dim, seq_len, causal):
        best = float("inf")
        for _ in range(20):  # the best of many: robust to a busy machine
            t0 = time.perf_counter()
            attn.attention(self.q, self.k, self.v, self.mask, causal, impl == "safeattn")
            best = min(best, time.perf_counter() - t0)
        return best * 1e3

    track_forward_ms.unit = "ms"
'''

_RESOURCE_SUITE = '''\
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tinyproj import attn  # noqa: E402


class ResourceSuite:
    params = (["fwd", "bwd_dkdv", "bwd_dq"], ["sm80", "sm86", "sm89", "sm90"])
    param_names = ["kernel", "arch"]

    def track_shared_bytes(self, kernel, arch):
        return attn.shared_bytes(kernel, arch)

    track_shared_bytes.unit = "bytes"

    def track_registers(self, kernel, arch):
        return 128 if kernel == "fwd" else 168

    track_registers.unit = "count"

    def track_spills(self, kernel, arch):
        return 0

    track_spills.unit = "bytes"
'''

_NUMERICS_SUITE = '''\
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np  # noqa: E402

from tinyproj import attn  # noqa: E402

TRIALS = 8


def _inputs(family, dtype, seed):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((2, 2, 8, 4)).astype(dtype) for _ in range(3))
    mask = np.ones((2, 8), dtype=bool)
    if family == "all_keys_masked":  # every key of batch element 1 masked
        mask[1] = False
        causal = False
    else:  # leftpad_causal: the first rows of batch 0 see only padding
        mask[0, :3] = False
        causal = True
    return q, k, v, mask, causal


class NumericsSuite:
    params = ({families}, ["float32", "float16"], ["safeattn", "sdpa_math"])
    param_names = ["family", "dtype", "impl"]

    def _rates(self, family, dtype, impl):
        nonfinite = wrong = 0
        for seed in range(TRIALS):
            q, k, v, mask, causal = _inputs(family, dtype, seed)
            with np.errstate(all="ignore"):
                out = attn.attention(q, k, v, mask, causal, impl == "safeattn")
            if not np.isfinite(out).all():
                nonfinite += 1
            elif family == "all_keys_masked" and np.abs(out[1]).max() != 0:
                wrong += 1
        return nonfinite / TRIALS, wrong / TRIALS

    def track_nonfinite_rate(self, family, dtype, impl):
        return self._rates(family, dtype, impl)[0]

    track_nonfinite_rate.unit = "fraction"

    def track_wrong_result_rate(self, family, dtype, impl):
        return self._rates(family, dtype, impl)[1]

    track_wrong_result_rate.unit = "fraction"
'''


def _git(project: Path, *args: str, date: str | None = None) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="sample", GIT_AUTHOR_EMAIL="sample@example.com",
               GIT_COMMITTER_NAME="sample", GIT_COMMITTER_EMAIL="sample@example.com")
    if date is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    done = subprocess.run(["git", *args], cwd=project, env=env, check=True,
                          capture_output=True, text=True)
    return done.stdout.strip()


def _write_project(project: Path) -> None:
    (project / "tinyproj").mkdir(parents=True)
    (project / "tinyproj" / "__init__.py").write_text("")
    (project / "benchmarks").mkdir()
    (project / "benchmarks" / "__init__.py").write_text("")
    (project / "benchmarks" / "speed.py").write_text(_SPEED_SUITE)
    (project / "benchmarks" / "resources.py").write_text(_RESOURCE_SUITE)
    (project / "benchmarks" / "numerics.py").write_text(
        _NUMERICS_SUITE.format(families=json.dumps(list(FAMILIES))))
    conf = {"version": 1, "project": "tinyproj", "project_url": "https://example.invalid/",
            "repo": ".", "branches": ["main"], "environment_type": "virtualenv",
            "benchmark_dir": "benchmarks", "results_dir": "results", "html_dir": "html",
            # As the real suite (asv.conf.json): one process per benchmark forked from a server
            # that imported the suite once, not a fresh interpreter each (~0.2 s apiece).
            "launch_method": "forkserver"}
    (project / "asv.conf.json").write_text(json.dumps(conf, indent=2))


def _asv(project: Path, home: Path, *args: str) -> None:
    # A private HOME keeps asv's ~/.asv-machine.json out of the user's real one.
    env = dict(os.environ, HOME=str(home))
    done = subprocess.run([sys.executable, "-m", "asv", *args], cwd=project, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"asv {' '.join(args)} failed ({done.returncode}):\n"
                           f"{done.stdout}\n{done.stderr}")


def make_sample_results(workdir: str | Path, machines: tuple[str, ...] = MACHINES) -> Path:
    """Run the tiny project's asv suites for real: 2 commits x ``machines``.

    Returns the asv ``results/`` directory (``<workdir>/project/results``). The first
    commit is healthy, the second (later commit date) is the planted regression.
    """
    from safeattn.families import FAMILIES as KNOWN

    unknown = set(FAMILIES) - set(KNOWN)
    if unknown:
        raise ValueError(f"sample families {sorted(unknown)} are not in safeattn.families")
    workdir = Path(workdir)
    project, home = workdir / "project", workdir / "home"
    if project.exists():
        shutil.rmtree(project)
    home.mkdir(parents=True, exist_ok=True)
    _write_project(project)
    _git(project, "init", "-q", "-b", "main")
    commits = []
    for i, (repeats, zero_rows) in enumerate(((1, True), (SLOW_REPEATS, False))):
        (project / "tinyproj" / "attn.py").write_text(
            _ATTN_SOURCE.format(repeats=repeats, zero_rows=zero_rows))
        _git(project, "add", "-A")
        message = "healthy" if i == 0 else "planted regression"
        _git(project, "commit", "-q", "-m", message, date=f"2026-01-0{i + 1}T12:00:00+00:00")
        commits.append(_git(project, "rev-parse", "HEAD"))
    for machine in machines:
        _asv(project, home, "machine", "--yes", "--machine", machine)
        for sha in commits:
            # --python=same measures the working tree: check the commit out first.
            _git(project, "checkout", "-q", sha)
            _asv(project, home, "run", "--python=same", f"--set-commit-hash={sha}",
                 "--machine", machine, "--show-stderr")
    return project / "results"


@functools.cache
def cached_sample_results() -> Path:
    """:func:`make_sample_results` once per process, in a temporary directory removed at
    exit: the test modules share one set of real runs (about a minute on 2 cores)."""
    workdir = tempfile.TemporaryDirectory(prefix="safeattn-asv-sample-")
    atexit.register(workdir.cleanup)
    return make_sample_results(workdir.name)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tools.sample_results WORKDIR")
    print(make_sample_results(sys.argv[1]))
