# glomo_jax developer commands. `make test` is README's second command and CI's.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export XLA_FLAGS ?= --xla_force_host_platform_device_count=8
export JAX_PLATFORMS ?= cpu

.PHONY: install test demo bench equivalence clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'

test: install
	$(BIN)/python -m pytest -q -n 2 tests

equivalence: install
	$(BIN)/pip install -q 'torch==2.13.0'
	$(BIN)/python benchmarks/torch_equivalence.py

clean:
	rm -rf $(VENV) build *.egg-info
