r"""Pretrain GLoMo over pixels: images → pixel graph predictor, checkpoints.

  python -m experiments.pretrain_images \
      --config=experiments/configs/images_pretrain.py:cpu \
      --config.images.location=../shared/data/tiny_imagenet32/tiny_imagenet_train32_25k.npz \
      --workdir=runs/images_cpu

Rerunning the same command with the same workdir resumes from the newest
checkpoint; SIGTERM saves one and stops.
"""
from __future__ import annotations

import json

from absl import flags, logging
from ml_collections import config_flags

from experiments import cli

_CONFIG = config_flags.DEFINE_config_file("config", None, "Image pretraining config file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints and logs.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  from glomo_jax.images.pretraining import (ImagePretrainConfig,  # noqa: PLC0415
                                            pretrain_images)
  config = ImagePretrainConfig.from_dict(_CONFIG.value.to_dict())
  summary = pretrain_images(config, _WORKDIR.value,
                            compilation_cache_dir=cli.compilation_cache_dir(_WORKDIR.value))
  logging.info("summary: %s", json.dumps({k: v for k, v in summary.items() if k != "history"},
                                          default=str))
  print(json.dumps({"step": summary["step"], "train_loss": summary["train"].get("loss"),
                    "eval": summary["eval"].get("heldout"), "best": summary.get("best"),
                    "preempted": summary["preempted"]}, default=str, indent=1))


if __name__ == "__main__":
  cli.run(main)
