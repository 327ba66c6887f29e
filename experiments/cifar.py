r"""CIFAR-10 with graphs between pixels: a ResNet with or without the GLoMo
transfer (`glomo_jax.images.cifar.run_cifar`).

  python -m experiments.cifar --config=experiments/configs/cifar.py:cpu \
      --config.train.location=../shared/data/cifar10/cifar10_train20k_from_jpeg.npz \
      --workdir=runs/cifar_baseline [--config.variant=glomo \
      --config.predictor_export=runs/images_cpu/export] [--config.seed=1]

Writes <workdir>/results.json (best validation accuracy, test accuracy of
those variables when there is a test split, the curve, times). Rerunning
the same command resumes the run.
"""
from __future__ import annotations

import json

from absl import flags
from ml_collections import config_flags

from experiments import cli

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "CIFAR config file (experiments/configs/cifar.py[:cpu|:tiny]).",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory of the run.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  from glomo_jax.images.cifar import CifarConfig, run_cifar  # noqa: PLC0415
  results = run_cifar(CifarConfig.from_dict(_CONFIG.value.to_dict()), _WORKDIR.value,
                      compilation_cache_dir=cli.compilation_cache_dir(_WORKDIR.value))
  print(json.dumps({k: v for k, v in results.items() if k not in ("curves", "config")},
                   default=str, indent=1))


if __name__ == "__main__":
  cli.run(main)
