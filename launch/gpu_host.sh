#!/usr/bin/env bash
# Pretrain on one GPU host (all its GPUs form the data axis of the mesh):
#   bash launch/gpu_host.sh wiki_cpu runs/wiki --config.corpus.pattern='data/*.jsonl.xz'
# For several hosts, run on each with --distributed --coordinator_address=HOST:PORT
# --num_processes=N --process_id=I.
# The first compile of the training step takes minutes on a GPU (XLA autotunes
# its Triton GEMMs); compiled steps are kept in WORKDIR/compile_cache, so a
# resumed run starts in seconds. For short runs,
# XLA_FLAGS=--xla_gpu_enable_triton_gemm=false compiles much faster at some
# cost in step time (benchmarks/RESULTS.md).
set -euo pipefail
CONFIG=${1:?config name}
WORKDIR=${2:?workdir}
shift 2
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  # jax[cuda12] runs on NVIDIA drivers >= 525; JAX_CUDA=cuda13 for drivers >= 580
  # (what the H100 of benchmarks/RESULTS.md ran: jax 0.11.2 with the CUDA 13 plugin)
  .venv/bin/pip install -q -e '.[tf]' "jax[${JAX_CUDA:-cuda12}]"
fi
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}
exec .venv/bin/python -m experiments.pretrain --config="experiments/configs/${CONFIG}.py" \
  --workdir="$WORKDIR" "$@"
