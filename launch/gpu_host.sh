#!/usr/bin/env bash
# Runs an entry point on one GPU host; all its GPUs form the data axis of the mesh.
#   bash launch/gpu_host.sh [--dry-run] [--entry=NAME] CONFIG WORKDIR [FLAGS...]
# CONFIG is a file of experiments/configs with an optional preset (wiki_cpu,
# images_pretrain:cpu, cifar:cpu); the entry point is the run kind the file
# states (RUN_KIND: pretrain, pretrain_images, classify, squad, cifar, picking, lstm_lm;
# experiments/kinds.py) unless --entry= names one; FLAGS go to the entry point:
#   bash launch/gpu_host.sh wiki_cpu runs/wiki --config.corpus.pattern='data/*.jsonl.xz'
# --dry-run prints the commands instead of running them.
# For several hosts (any run kind: pretrain, pretrain_images, classify, squad,
# cifar, picking, lstm_lm), run on each with --distributed --coordinator_address=HOST:PORT
# --num_processes=N --process_id=I.
# The first compile of the training step takes minutes on a GPU (XLA autotunes
# its Triton GEMMs); compiled steps are kept in WORKDIR/compile_cache, so a
# resumed run starts in seconds. For short runs,
# XLA_FLAGS=--xla_gpu_enable_triton_gemm=false compiles much faster at some
# cost in step time (benchmarks/RESULTS.md).
set -euo pipefail
source "$(dirname "$0")/common.sh"
parse_common_args "$@"
set -- "${REST[@]}"
resolve_config "${1:-}"
WORKDIR=${2:?"usage: launch/gpu_host.sh [--dry-run] [--entry=NAME] CONFIG WORKDIR [FLAGS...]"}
shift 2
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}  # an existing environment is used as it is
if [ ! -x "$VENV/bin/python" ]; then
  run python3 -m venv "$VENV"
  run "$VENV/bin/pip" install -q --upgrade pip
  # jax[cuda12] runs on NVIDIA drivers >= 525; JAX_CUDA=cuda13 for drivers >= 580
  # (what the H100 of benchmarks/RESULTS.md ran: jax 0.11.2 with the CUDA 13 plugin)
  run "$VENV/bin/pip" install -q -e '.[tf]' "jax[${JAX_CUDA:-cuda12}]"
fi
run export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}"
run "$VENV/bin/python" -m "experiments.$ENTRY" "$CONFIG_FLAG" --workdir="$WORKDIR" "$@"
