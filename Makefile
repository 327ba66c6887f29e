# glomo_jax developer commands. `make demo` and `make test` are README's two
# commands; `make test` is what CI runs (.ci/run).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install install-test test demo equivalence bench bench-all bench-gpu bench-gpu-kernels clean

# The project's packages go in with uv, which installs the test extras
# (TensorFlow, libtpu) in half pip's time; where uv cannot (it is missing, or
# only pip's own configuration names the package index), pip installs them.
# Both compile the bytecode at install, as every process would otherwise
# compile JAX's and TensorFlow's sources again where PYTHONDONTWRITEBYTECODE
# is set.
$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q uv || echo "no uv: pip installs the packages"

INSTALL = $(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python $(1) 2>/dev/null \
	  || $(BIN)/pip install -q $(1)

install: $(BIN)/python
	$(call INSTALL,-e .)

install-test: $(BIN)/python
	$(call INSTALL,-e '.[test]')

# 8 fake CPU devices for the sharding tests; 2 workers (CI has 2 cores), each
# given a contiguous half of the tests (a file's tests share their programs)
# and stealing from the other's end once done.
test: install-test
	JAX_PLATFORMS=cpu XLA_FLAGS=--xla_force_host_platform_device_count=8 \
	  $(BIN)/python -m pytest -q -n 2 --dist worksteal --durations=15 tests

demo: install
	$(BIN)/python -m experiments.demo --workdir=runs/demo

# The targets that run the PyTorch peer (a PyTorch implementation of the GLoMo
# pretraining model; benchmarks/README.md, "The peer") need its file:
# make bench PEER=path/to/peer.py, or GLOMO_TORCH_PEER in the environment.
PEER ?= $(GLOMO_TORCH_PEER)
PEER_TARGETS := equivalence bench bench-all bench-gpu bench-gpu-kernels
PEER_GOAL := $(firstword $(filter $(PEER_TARGETS),$(MAKECMDGOALS)))
ifneq ($(PEER_GOAL),)
ifeq ($(PEER),)
$(error make $(PEER_GOAL) needs the PyTorch peer: make $(PEER_GOAL) PEER=path/to/peer.py (benchmarks/README.md, "The peer"))
endif
ifeq ($(wildcard $(PEER)),)
$(error no peer at PEER=$(PEER))
endif
endif

equivalence: install-test
	$(BIN)/pip install -q 'torch==2.13.0'
	JAX_PLATFORMS=cpu $(BIN)/python benchmarks/torch_equivalence.py --peer $(PEER)

# glomo_jax vs the PyTorch peer on the `small` config (alternating fresh
# processes; torch's CPU wheel if torch is missing); results in
# benchmarks/results/ (git-ignored). Extra flags:
# make bench PEER=path/to/peer.py BENCH_ARGS="--rounds 3 --steps 12"
# torch for the peer only (never a product dependency): the CPU wheel from
# PyTorch's index where it is reachable, else torch 2.13.0 from pip's index.
TORCH_CPU = $(BIN)/pip install -q 'torch==2.13.0' --index-url https://download.pytorch.org/whl/cpu \
	  2>/dev/null || $(BIN)/pip install -q 'torch==2.13.0'
BENCH_ARGS ?=
bench: install
	$(BIN)/python -c "import torch" 2>/dev/null || $(TORCH_CPU)
	$(BIN)/python benchmarks/pretrain_step.py --config small --peer $(PEER) --rounds 2 $(BENCH_ARGS)

# Every measurement of benchmarks/RESULTS.md (about 45 minutes; quiet machine).
bench-all: install
	$(BIN)/python -c "import torch" 2>/dev/null || $(TORCH_CPU)
	benchmarks/run_all.sh $(BIN)/python $(PEER)

# The GPU measurements of benchmarks/RESULTS.md: glomo_jax and the peer on one
# CUDA GPU (needs jax with CUDA and torch with CUDA in $(BIN)/python; about
# 20 minutes). Stages: see benchmarks/gpu_run.sh.
GPU_STAGES ?= env equivalence xlaflags small paper tf32 positions profile
bench-gpu:
	PYTHON=$(BIN)/python benchmarks/gpu_run.sh $(PEER) benchmarks/results/gpu $(GPU_STAGES)

# The fused Pallas kernels on a GPU (issue 48): each kernel against its
# reference op, the step at B 32 (with the peer) and at the largest batch
# (WORKSPACE.md has the lent-GPU recipe; DEADLINE_S=N starts no stage
# after N seconds).
# More stages: cmdbuf, pipeline (benchmarks/gpu_run.sh).
GPU_KERNEL_STAGES ?= env kernels fused32 maxbatch
bench-gpu-kernels:
	PYTHON=$(BIN)/python benchmarks/gpu_run.sh $(PEER) benchmarks/results/gpu $(GPU_KERNEL_STAGES)

clean:
	rm -rf $(VENV) build *.egg-info
