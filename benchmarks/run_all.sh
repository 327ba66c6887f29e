#!/usr/bin/env bash
# Every measurement of benchmarks/RESULTS.md, in one go (about 50 minutes on
# 2 cores; run it on a quiet machine). Results: benchmarks/results/ (markdown,
# PNG, pretrain_step.jsonl). Usage: benchmarks/run_all.sh [PYTHON] PEER
# PEER: the file of the PyTorch peer (benchmarks/README.md, "The peer"), by
# default $GLOMO_TORCH_PEER; relative paths start at the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
PEER=${2:-${GLOMO_TORCH_PEER:-}}
if [ -z "$PEER" ]; then
  echo "usage: benchmarks/run_all.sh [PYTHON] PEER (the PyTorch peer's file, or GLOMO_TORCH_PEER set)" >&2
  exit 2
fi
[ -f "$PEER" ] || { echo "no peer at $PEER" >&2; exit 2; }
B="$PY benchmarks/pretrain_step.py"
export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}
set -x
# 1-2. against the peer: `small` (6 rounds: 3-round ratios move ±5 % with the
#      load on a shared machine), and the paper model at batch 8
$B --config small --peer "$PEER" --rounds 6 --steps 12 --warmup 3
$B --config paper --bsz 8 --peer "$PEER" --rounds 2 --steps 6 --warmup 4
# 3. decoding every position (the paper's objective), both programs
$B --config small --sample_positions 0 --peer "$PEER" --rounds 2 --steps 6 --warmup 3
#    and against the sampled step, paired in one process (the ≤ 2× target)
$B --config small --every_position_ratio --rounds 3 --steps 12 --warmup 3
# 4. mixed precision: speed, and float32 vs bfloat16 loss curves from one init
$B --config small --dtype bfloat16 --rounds 2 --steps 12 --warmup 3
$B --config small --loss_curve 60 --loss_curve_pool 4
# 5. growth with window length and batch size, both programs (table + PNG)
$B --config small --sweep T --peer "$PEER" --rounds 1 --steps 4 --warmup 2
$B --config small --sweep B --peer "$PEER" --rounds 1 --steps 4 --warmup 2
# 6. input pipeline on one core
$B --config small --pipeline --pipeline_docs 0
# 7. what the library's default (untuned) CPU path costs: tuned and untuned
#    glomo_jax workers alternating
$B --config small --tuning_ratio --rounds 3 --steps 12 --warmup 3
