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
    # Inductor's on-disk caches key a compiled graph by its FX graph, which names our
    # operators but not their schemas: a graph compiled by another checkout (a branch whose
    # attn_bwd took one more argument) was served here and called attn_bwd wrongly. Tests
    # compile into a directory of their own, removed at the end.
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        config._safeattn_inductor_dir = tempfile.mkdtemp(prefix="safeattn-inductor-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = config._safeattn_inductor_dir


def pytest_unconfigure(config: pytest.Config) -> None:
    own = getattr(config, "_safeattn_inductor_dir", None)
    if own:
        shutil.rmtree(own, ignore_errors=True)
        del os.environ["TORCHINDUCTOR_CACHE_DIR"]


# Files whose few tests run real asv or `make demo` (minutes each on CI's two cores),
# longest first: `make test` runs them first (`--no-loadscope-reorder` keeps this order),
# so the other worker takes the many short files meanwhile. xdist's default order (most
# tests first) started them last, and one worker ran alone for minutes at the end.
LONG_FILES = ("test_gate_e2e.py", "test_demo.py", "test_dashboard_app.py", "test_results.py",
              "test_asv_suite.py")  # fmt: skip


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
