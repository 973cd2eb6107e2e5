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
	$(BIN)/pip install -q -e '.[test,bench,dashboard]'
	touch $(STAMP)

# The main job: benchmark this machine (the full suite on a GPU, the CPU-capable part
# otherwise) into results/, beside the GPU history already there, then serve the dashboard.
demo: $(STAMP)
	@echo "[demo] benchmarking this machine's HEAD into results/ (progress below)"
	$(BIN)/python benchmarks/run.py
	@echo "[demo] dashboard on http://localhost:8501 (Ctrl-C stops it)"
	SAFEATTN_RESULTS=$(CURDIR)/results $(BIN)/python -m streamlit run dashboard/app.py \
	  --server.port=8501 --server.headless=true --browser.gatherUsageStats=false

lint: $(STAMP)
	$(BIN)/ruff check .

# Kernels run under Triton's interpreter on a CPU-only machine.
test: $(STAMP)
	$(BIN)/ruff check .
	TRITON_INTERPRET=1 $(BIN)/pytest -q
