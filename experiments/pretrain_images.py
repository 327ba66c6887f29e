r"""Pretrain GLoMo over pixels: images → pixel graph predictor, checkpoints.

  python -m experiments.pretrain_images \
      --config=experiments/configs/images_pretrain.py:cpu \
      --config.images.location=../shared/data/tiny_imagenet32/tiny_imagenet_train32_25k.npz \
      --workdir=runs/images_cpu

Rerunning the same command with the same workdir resumes from the newest
checkpoint; SIGTERM saves one and stops.

Flags, --distributed and the printed summary: `experiments.entry`.
"""
from experiments import entry

if __name__ == "__main__":
  entry.run_kind("pretrain_images")
