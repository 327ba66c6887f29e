r"""CIFAR-10 transfer configs (paper §4, Table 3).

Presets:
* '' (paper scale): TFDS cifar10, 42,000 / 8,000 train / validation, the
  test split; ResNet-18 (width 64), SGD 0.1 Nesterov 0.9, weight decay 5e-4,
  cosine over 200 epochs, batch 128; graphs at 32×32 (graph_downsample 1).
  Set --config.depth=34 for ResNet-34. A GPU / TPU run.
* 'cpu': an .npz of 32×32 images (location by flag; the shared file has
  20,000 train images and no test split: add held-out test images with
  `--config.test.source=npz --config.test.location=PATH`), 16,000 / 4,000; a narrow
  ResNet-18 (width 16) for 2 CPU cores, graphs from a 16×16 predictor
  (graph_downsample 2), 10 epochs.
* 'tiny': a seconds-long smoke run of the same pipeline.
The variant (baseline | uniform | glomo) is --config.variant; 'glomo' needs
--config.predictor_export (experiments/pretrain_images.py writes
<workdir>/export).
"""
import dataclasses

from experiments.configs.common import config_dict
from glomo_jax.downstream.options import OptimOptions
from glomo_jax.images.cifar import CifarConfig
from glomo_jax.images.data import ImageSource
from glomo_jax.train.config import DOWNSTREAM_LOOP

RUN_KIND = "cifar"   # experiments/kinds.py


def get_config(arg: str = ""):
  paper = CifarConfig()
  if arg == "":
    config = paper
  elif arg in ("cpu", "tiny"):
    config = paper.replace(
        train=ImageSource("npz", ""), test=None, validation_images=4000, width=16,
        graph_downsample=2,
        optim=OptimOptions(optimizer="sgd", learning_rate=0.1, batch_size=128,
                           eval_batch_size=500, weight_decay=5e-4, schedule="cosine"),
        loop=dataclasses.replace(DOWNSTREAM_LOOP, epochs=10, log_every=25))
    if arg == "tiny":
      config = config.replace(
          validation_images=32, max_train_images=64, width=4,
          optim=OptimOptions(optimizer="sgd", learning_rate=0.05, batch_size=16,
                             eval_batch_size=16, weight_decay=5e-4, schedule="cosine"),
          loop=dataclasses.replace(DOWNSTREAM_LOOP, num_steps=4, eval_every=2, log_every=1,
                                   compile_fast=True))
  else:
    raise ValueError(f"unknown cifar preset {arg!r}; use '', 'cpu' or 'tiny'")
  return config_dict(config)
