"""Pretraining GLoMo as tasks of the training loop, on one config base
(`PretrainConfigBase`: optimiser, loop, evaluation, seed, export).

* Text: `PretrainConfig` (on `TextPretrainConfigBase`: corpus, tokenizer,
  windows), `GLoMoObjective`, the `PretrainingTask` and
  `train_and_evaluate(config, workdir)`; `text_data` and `TrainWindows`, the
  tokenizer, windows and training batches any model on the text windows reads.
* `restore_checkpoint(workdir, step)`: a text run's config, tokenizer and
  variables at a checkpoint.
* Pixels (pixels.py): `ImagePretrainConfig`, `PixelPretrainingTask` and
  `pretrain_images(config, workdir)`; the images come from
  `glomo_jax.images.data`.
"""
from glomo_jax.pretraining.config import PretrainConfig, PretrainConfigBase, TextPretrainConfigBase
from glomo_jax.pretraining.objective import GLoMoObjective
from glomo_jax.pretraining.restore import restore_checkpoint
from glomo_jax.pretraining.pixels import ImagePretrainConfig, PixelPretrainingTask, pretrain_images
from glomo_jax.pretraining.task import (CONFIG_FILE, TOKENIZER_FILE, PretrainingTask,
                                        TrainWindows, prepare_tokenizer, text_data,
                                        train_and_evaluate)

__all__ = ["CONFIG_FILE", "GLoMoObjective", "ImagePretrainConfig", "PixelPretrainingTask",
           "PretrainConfig", "PretrainConfigBase", "PretrainingTask", "TOKENIZER_FILE",
           "TextPretrainConfigBase", "TrainWindows", "pretrain_images", "prepare_tokenizer",
           "restore_checkpoint", "text_data", "train_and_evaluate"]
