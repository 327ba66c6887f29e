"""Pretraining GLoMo as tasks of the training loop, on one config base
(`PretrainConfigBase`: optimiser, loop, evaluation, seed, export).

* Text: `PretrainConfig`, `GLoMoObjective`, the `PretrainingTask` and
  `train_and_evaluate(config, workdir)`.
* `restore_checkpoint(workdir, step)`: a text run's config, tokenizer and
  variables at a checkpoint.
* Pixels (pixels.py): `ImagePretrainConfig`, `PixelPretrainingTask` and
  `pretrain_images(config, workdir)`; the images come from
  `glomo_jax.images.data`.
"""
from glomo_jax.pretraining.config import PretrainConfig, PretrainConfigBase
from glomo_jax.pretraining.objective import GLoMoObjective
from glomo_jax.pretraining.restore import restore_checkpoint
from glomo_jax.pretraining.pixels import ImagePretrainConfig, PixelPretrainingTask, pretrain_images
from glomo_jax.pretraining.task import (CONFIG_FILE, TOKENIZER_FILE, PretrainingTask,
                                        prepare_tokenizer, train_and_evaluate)

__all__ = ["CONFIG_FILE", "GLoMoObjective", "ImagePretrainConfig", "PixelPretrainingTask",
           "PretrainConfig", "PretrainConfigBase", "PretrainingTask", "TOKENIZER_FILE",
           "pretrain_images", "prepare_tokenizer", "restore_checkpoint", "train_and_evaluate"]
