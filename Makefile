# Two entry points (see README): `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test lint demo

$(STAMP): pyproject.toml
	@echo "[setup] creating $(VENV)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	@echo "[setup] installing torch 2.13.0 (CPU wheel unless torch is already importable with CUDA)"
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[service,test,bench,dashboard]'
	touch $(STAMP)

# The main job: serve the dashboard over results/ (the GPU history) at once, and benchmark
# this machine (the full suite on a GPU, the CPU-capable part otherwise) beside it; its
# progress and then its results show on the dashboard. Ctrl-C stops both (tools/demo.py).
demo: $(STAMP)
	@$(BIN)/python -m tools.demo

lint: $(STAMP)
	$(BIN)/ruff check .

# Kernels run under Triton's interpreter on a CPU-only machine; two pytest-xdist workers
# (CI has two cores), each test file whole in one worker (its module fixtures built once),
# in collection order: tests/conftest.py puts the longest files first.
test: $(STAMP)
	$(BIN)/ruff check .
	TRITON_INTERPRET=1 $(BIN)/pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=25
