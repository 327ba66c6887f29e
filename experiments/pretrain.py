r"""Pretrain GLoMo: corpus → graph predictor, checkpoints, export.

  python -m experiments.pretrain --config=experiments/configs/demo.py \
      --workdir=/tmp/glomo_demo [--config.loop.num_steps=100 ...]

Rerunning the same command with the same workdir resumes from the newest
checkpoint. SIGTERM saves a checkpoint and stops (preemption; on several
hosts every process saves the same step).

Flags, --distributed and the printed summary: `experiments.entry`.
"""
from experiments import entry

if __name__ == "__main__":
  entry.run_kind("pretrain")
