"""Test options shared by every test file.

By default the tests run on the CPU with the Triton kernels under the interpreter
(``TRITON_INTERPRET=1`` is set here before anything imports Triton) at small shapes.
``pytest --gpu`` runs the same files on a CUDA device at realistic shapes, plus the tests
marked ``gpu``. Tests marked ``slow`` run with ``--runslow`` and on CI (``CI=true``, set by
``.ci/run``); a plain local ``pytest`` skips them.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from asv_helpers import SHARED_DIR_ENV


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--gpu", action="store_true", help="run on CUDA at realistic sizes")
    parser.addoption("--runslow", action="store_true", help="also run tests marked slow")


def pytest_configure(config: pytest.Config) -> None:
    # Runs before test modules (and so safeattn/triton) are imported.
    if not config.getoption("--gpu"):
        os.environ.setdefault("TRITON_INTERPRET", "1")
    # Tuning choices made by tests (on a GPU shared by xdist workers: noise) must not reach
    # the user's tuning cache, which the next benchmark run on this machine would read.
    os.environ.setdefault("SAFEATTN_TUNING_CACHE", "0")
    # One directory for the whole session, workers included (they inherit the environment):
    # asv_helpers.asv_cpu_run keeps its one real asv run there.
    if not hasattr(config, "workerinput") and SHARED_DIR_ENV not in os.environ:
        config._safeattn_shared_dir = tempfile.mkdtemp(prefix="safeattn-tests-")
        os.environ[SHARED_DIR_ENV] = config._safeattn_shared_dir
    # Inductor's on-disk caches key a compiled graph by its FX graph, which names our
    # operators but not their schemas: a graph compiled by another checkout (a branch whose
    # attn_bwd took one more argument) was served here and called attn_bwd wrongly. Tests
    # compile into a directory of their own, removed at the end.
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        config._safeattn_inductor_dir = tempfile.mkdtemp(prefix="safeattn-inductor-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = config._safeattn_inductor_dir


def pytest_unconfigure(config: pytest.Config) -> None:
    shared = getattr(config, "_safeattn_shared_dir", None)
    if shared:
        shutil.rmtree(shared, ignore_errors=True)
        del os.environ[SHARED_DIR_ENV]
    own = getattr(config, "_safeattn_inductor_dir", None)
    if own:
        shutil.rmtree(own, ignore_errors=True)
        del os.environ["TORCHINDUCTOR_CACHE_DIR"]


# The longest files first: `make test` hands them out in this order (`--no-loadscope-reorder`
# keeps it), so the short files fill both workers' ends. xdist's default order (most tests
# first) started the asv/`make demo` files last, and one worker ran alone for minutes at
# the end; so would the interpreter-heavy test_hopper and test_kernels started late. The
# seconds: `.ci/run` at 4fa6f7d (2 cores, 2026-12-03; the files' test times from its JUnit
# report: 1,881 s in all, 962 s of pytest).
LONG_FILES = (
    "test_hopper.py",  # 301
    "test_demo.py",  # 262 (make demo: its venv, then the CPU suites --quick)
    "test_kernels.py",  # 188
    "test_dashboard_browser.py",  # 177
    "test_gate_e2e.py",  # 133 (asv on 4 commits)
    "test_dropout.py",  # 94
    "test_blockmask.py",  # 84
    "test_dbias.py",  # 80
    "test_families.py",  # 76
    "test_dashboard_app.py",  # 72
    # One real asv run (asv_helpers.asv_cpu_run, ~70 s) for both files, the first to ask runs
    # it: far apart here, so that the other finds it done rather than waits for it.
    "test_results.py",  # 83 with the run
    "test_compile.py",  # 76
    "test_aa.py",  # 54
    "test_compiled_step.py",  # 31
    "test_asv_suite.py",  # 29 without the run
    "test_compose.py",  # 27
    "test_multi_gpu.py",  # 24
    "test_masked_benchmarks.py",  # 19
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return LONG_FILES.index(name) if name in LONG_FILES else len(LONG_FILES)

    items.sort(key=rank)  # stable: each file's own order, and every other file's, is kept
    gpu = config.getoption("--gpu")
    slow = config.getoption("--runslow") or os.environ.get("CI") == "true"
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(pytest.mark.skip(reason="needs --gpu (a CUDA device)"))
        if "slow" in item.keywords and not slow:
            item.add_marker(pytest.mark.skip(reason="slow; pass --runslow (CI=true runs it)"))


@pytest.fixture(scope="session")
def on_gpu(pytestconfig: pytest.Config) -> bool:
    return bool(pytestconfig.getoption("--gpu"))


@pytest.fixture(scope="session")
def device(on_gpu: bool) -> str:
    if on_gpu:
        import torch

        if not torch.cuda.is_available():
            pytest.exit("--gpu given but torch sees no CUDA device", returncode=2)
        return "cuda"
    return "cpu"
