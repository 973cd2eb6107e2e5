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

lint: $(STAMP)
	$(BIN)/ruff check .

# Kernels run under Triton's interpreter on a CPU-only machine.
test: $(STAMP)
	$(BIN)/ruff check .
	TRITON_INTERPRET=1 $(BIN)/pytest -q
