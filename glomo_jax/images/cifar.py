"""CIFAR-10 with graphs between pixels (paper §3.5, Table 3) as a loop task.

Data: TFDS ``cifar10`` (train / test) or local .npz files; a seeded
validation subset is carved from train (paper: 8,000 of 50,000; local file:
4,000 of 20,000) and selects the best step; the test split, when there is
one, is scored with the best variables. Training: random horizontal flips
only (drawn in the step from the 'augment' rng, so a resumed run draws the
same ones), SGD with Nesterov momentum, L2 weight decay and a cosine
schedule (the common CIFAR ResNet recipe; the paper gives none).

Graphs ('glomo'): the frozen pixel predictor (`predictor_export`, loaded
with `glomo_jax.export.load_graph_predictor`) runs inside the jitted step on
each (flipped) batch, at the images' resolution divided by
`graph_downsample`, `graph_chunk` images at a time; nothing is cached (a
32×32 image has 24·1024² graph entries at L = 3, K = 4).

`run_cifar(config, workdir)` is the whole run; it writes results.json.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from glomo_jax.config import from_dict
from glomo_jax.downstream.config import DownstreamConfig
from glomo_jax.downstream.options import DOWNSTREAM_MOVED_FIELDS, OptimOptions
from glomo_jax.downstream.run import load_predictor, train_and_report
from glomo_jax.downstream.scores import classification_sums, mean_loss, summed_accuracy
from glomo_jax.downstream.task import VALIDATION, DownstreamTask
from glomo_jax.images.data import ImageSet, ImageSource, carve_validation, read_images
from glomo_jax.images.pixel_transfer import GLoMoResNet
from glomo_jax.train.batches import batch_order, host_rows
from glomo_jax.train.config import DOWNSTREAM_LOOP, LoopOptions
from glomo_jax.train.task import RunEval
from glomo_jax.train.workdir import holding_workdir
from glomo_jax.transfer.options import PIXEL_VARIANTS, TRANSFER_MOVED_FIELDS, TransferOptions

logger = logging.getLogger("glomo_jax.train")

TEST = "test"


@dataclasses.dataclass(frozen=True)
class CifarConfig(DownstreamConfig):
  """One CIFAR-10 run; and `DownstreamConfig`'s fields (variant:
  'baseline', 'uniform' or 'glomo'; predictor_export: the pixel predictor's
  export; optim; loop (here 200 epochs); seed: parameters and flips;
  data_seed: the validation carve).

  Attributes:
    train: the training images (validation is carved from them).
    test: the test images, or None (a local train-only file).
    validation_images: images carved (seeded by data_seed) from train.
    max_train_images: a seeded subset of the rest for training (None: all).
    graph_downsample: graphs between the pixels of the images downsampled by
      this factor (1: the paper; 2: a 16×16 predictor on 32×32 images).
    graph_chunk: images whose graphs are computed at once (memory bound).
    depth, width: the ResNet (18 / 34; width 64 = the published models).
    transfer: the graph transfer's options (num_mixtures, conditioned,
      features; num_layers: the predictor's).
  """
  VARIANTS = PIXEL_VARIANTS

  optim: OptimOptions = OptimOptions(optimizer="sgd", learning_rate=0.1, batch_size=128,
                                     eval_batch_size=500, weight_decay=5e-4,
                                     schedule="cosine")
  loop: LoopOptions = dataclasses.replace(DOWNSTREAM_LOOP, epochs=200)
  train: ImageSource = ImageSource("tfds", "cifar10", "train")
  test: ImageSource | None = ImageSource("tfds", "cifar10", "test")
  validation_images: int = 8000
  max_train_images: int | None = None
  graph_downsample: int = 1
  graph_chunk: int | None = 16
  depth: int = 18
  width: int = 64
  transfer: TransferOptions = TransferOptions()
  MOVED_FIELDS = {**DOWNSTREAM_MOVED_FIELDS, **TRANSFER_MOVED_FIELDS}

  def __post_init__(self):
    for name, kind in (("train", ImageSource), ("test", ImageSource), ("optim", OptimOptions),
                       ("loop", LoopOptions), ("transfer", TransferOptions)):
      if isinstance(getattr(self, name), Mapping):
        default = self.__dataclass_fields__[name].default
        object.__setattr__(self, name, from_dict(
            kind, getattr(self, name), f"CifarConfig.{name}",
            default if isinstance(default, kind) else None))
    self.check()

  def check(self) -> None:
    super().check()
    self.transfer.check()
    self.check_predictor("experiments/pretrain_images.py, which writes <workdir>/export")


def load_cifar(config: CifarConfig) -> dict[str, ImageSet]:
  """{'train', 'validation'(, 'test')} image sets with labels."""
  data = read_images(config.train)
  if data.labels is None:
    raise ValueError(f"{config.train.describe()} has no labels")
  train, val = carve_validation(len(data), config.validation_images, config.data_seed)
  if config.max_train_images is not None and config.max_train_images < len(train):
    rng = np.random.default_rng([config.data_seed, 1])
    train = np.sort(rng.permutation(train)[:config.max_train_images])
  splits = {"train": data.subset(train), VALIDATION: data.subset(val)}
  if config.test is not None:
    test = read_images(config.test)
    if test.labels is None or test.shape != data.shape:
      raise ValueError(f"the test images {config.test.describe()} must be labelled "
                       f"{data.shape[0]}×{data.shape[1]} images like the training ones "
                       f"(got {test.shape[0]}×{test.shape[1]}, "
                       f"{'no ' if test.labels is None else ''}labels)")
    splits[TEST] = test
  if len(splits["train"]) < config.optim.batch_size:
    raise ValueError(f"{len(splits['train'])} training images make no batch of "
                     f"{config.optim.batch_size}")
  return splits


class CifarTask(DownstreamTask):
  """The module docstring's task: `GLoMoResNet` on image sets."""
  rng_streams = ("augment",)
  log_metrics = ("loss", "accuracy")

  def __init__(self, config: CifarConfig, splits: Mapping[str, ImageSet], predictor=None):
    self.splits, self.predictor = dict(splits), predictor
    self.held_out = (TEST,) if TEST in self.splits else ()
    self.image_shape = self.splits["train"].shape
    layers = predictor.config.num_graph_layers if predictor is not None else None
    self.model = GLoMoResNet(config.variant, config.depth, config.width, 10,
                             config.transfer.for_predictor(layers), config.graph_downsample,
                             config.graph_chunk)
    o = config.optim
    super().__init__(config, self.splits["train"],
                     lambda idx: self._batch("train", idx, o.batch_size),
                     eval_batch_size=o.batch_size)

  def _batch(self, split: str, indices, size: int) -> dict:
    """Rows `indices` of a split, padded to `size` (weight 0), host rows."""
    data, idx = self.splits[split], np.asarray(indices, np.int64)
    pad = size - len(idx)
    images = np.concatenate([data.images[idx], np.zeros((pad,) + data.images.shape[1:],
                                                        np.uint8)])
    labels = np.concatenate([data.labels[idx], np.zeros(pad, np.int32)])
    weight = np.concatenate([np.ones(len(idx), np.float32), np.zeros(pad, np.float32)])
    return host_rows({"images": images, "label": labels, "weight": weight}, *self.process)

  def _graph_fn(self):
    """The frozen predictor on uint8 images ('glomo'), else None."""
    if self.predictor is None or not self.config.reads_graphs:
      return None
    return lambda images: self.predictor.predict(self.predictor.variables, images)

  # ---- model ------------------------------------------------------------------
  def init_variables(self, rng):
    images = jnp.zeros((1, *self.image_shape, 3), jnp.uint8)
    return self.model.init(rng, images, train=False, graph_fn=self._graph_fn())

  def _sums(self, variables, batch, train: bool, rngs=None):
    images = batch["images"]
    if train:                                     # horizontal flips, half the images
      flip = jax.random.bernoulli(rngs["augment"], 0.5, (images.shape[0],))
      images = jnp.where(flip[:, None, None, None], images[:, :, ::-1], images)
    out = self.model.apply(variables, images, train=train, graph_fn=self._graph_fn(),
                           mutable=["batch_stats"] if train else False)
    logits, updates = out if train else (out, None)
    return classification_sums(logits, batch["label"], batch["weight"]), updates

  def loss(self, variables, batch, rngs):
    sums, updates = self._sums(variables, batch, True, rngs)
    loss, metrics = mean_loss(sums)
    return loss, metrics, updates["batch_stats"]

  # ---- data and evaluation ----------------------------------------------------
  def batch_spec(self):
    b = self.batch_size
    return {"images": jax.ShapeDtypeStruct((b, *self.image_shape, 3), jnp.uint8),
            "label": jax.ShapeDtypeStruct((b,), jnp.int32),
            "weight": jax.ShapeDtypeStruct((b,), jnp.float32)}

  def eval_step(self, variables, batch):
    return self._sums(variables, batch, False)[0]

  def evaluate(self, split: str, run_eval: RunEval) -> dict[str, float]:
    """Accuracy (a fraction, as the text tasks), mean loss and the number of
    images of `split`."""
    return summed_accuracy((self._batch(split, indices, self.eval_batch_size)
                            for indices in batch_order(self.splits[split],
                                                       self.eval_batch_size)), run_eval)


@holding_workdir
def run_cifar(config: CifarConfig, workdir: str, *, devices=None,
              compilation_cache_dir: str | None = None) -> dict[str, Any]:
  """One CIFAR-10 run (module docstring); returns and writes results.json:
  best validation accuracy and its step, 'test' accuracy with those variables
  (None without a test split), the validation curve and times (accuracies
  are fractions, as the text tasks')."""
  start = time.time()
  os.makedirs(workdir, exist_ok=True)
  splits = load_cifar(config)
  predictor = None
  if config.reads_graphs:
    predictor = load_predictor(config.predictor_export, units="pixels")
  logger.info("CIFAR-10 %s: %s", config.variant,
              ", ".join(f"{k} {len(v)}" for k, v in splits.items()))
  return train_and_report(
      CifarTask(config, splits, predictor), workdir,
      lambda summary: {"validation_accuracy": summary["results"][VALIDATION],
                       TEST: summary["results"].get(TEST),
                       "images": {k: len(v) for k, v in splits.items()}},
      start=start, predictor=predictor, devices=devices,
      compilation_cache_dir=compilation_cache_dir)
