"""CIFAR-10 with graphs between pixels (paper §4, Table 3) as a loop task.

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
import optax

from glomo_jax.config import DictConfig, from_dict
from glomo_jax.images.data import ImageSet, ImageSource, carve_validation, read_images
from glomo_jax.images.pixel_transfer import VARIANTS, GLoMoResNet
from glomo_jax.io import write_json
from glomo_jax.tasks.batching import ExampleBatches, batch_order, host_rows
from glomo_jax.tasks.transfer_config import (OptimOptions, loop_values, make_optimizer,
                                             record_run_config)
from glomo_jax.train import loop
from glomo_jax.train.config import LoopConfig
from glomo_jax.train.task import RunContext, RunEval, Task
from glomo_jax.train.workdir import holding_workdir

logger = logging.getLogger("glomo_jax.train")

VALIDATION, TEST = "validation", "test"
RESULTS_FILE = "results.json"


@dataclasses.dataclass(frozen=True)
class CifarConfig(DictConfig):
  """One CIFAR-10 run.

  Attributes:
    variant: 'baseline', 'uniform' or 'glomo'.
    train: the training images (validation is carved from them).
    test: the test images, or None (a local train-only file).
    validation_images: images carved (seeded by data_seed) from train.
    max_train_images: a seeded subset of the rest for training (None: all).
    predictor_export: the pixel predictor's export ('glomo').
    graph_downsample: graphs between the pixels of the images downsampled by
      this factor (1: the paper; 2: a 16×16 predictor on 32×32 images).
    graph_chunk: images whose graphs are computed at once (memory bound).
    depth, width: the ResNet (18 / 34; width 64 = the published models).
    num_mixtures, conditioned, transfer_features: the graph transfer's.
    optim: optimiser, length, evaluations (`OptimOptions`).
    seed: parameters and flips; data_seed: the validation carve.
    mesh_data, compile_fast: see `LoopConfig`.
  """
  variant: str = "baseline"
  train: ImageSource = ImageSource("tfds", "cifar10", "train")
  test: ImageSource | None = ImageSource("tfds", "cifar10", "test")
  validation_images: int = 8000
  max_train_images: int | None = None
  predictor_export: str | None = None
  graph_downsample: int = 1
  graph_chunk: int | None = 16
  depth: int = 18
  width: int = 64
  num_mixtures: int = 2
  conditioned: bool = True
  transfer_features: int | None = None
  optim: OptimOptions = OptimOptions(optimizer="sgd", learning_rate=0.1, batch_size=128,
                                     eval_batch_size=500, epochs=200, weight_decay=5e-4,
                                     schedule="cosine")
  seed: int = 0
  data_seed: int = 0
  mesh_data: int = -1
  compile_fast: bool = False

  def __post_init__(self):
    for name, kind in (("train", ImageSource), ("test", ImageSource), ("optim", OptimOptions)):
      if isinstance(getattr(self, name), Mapping):
        object.__setattr__(self, name, from_dict(kind, getattr(self, name),
                                                 f"CifarConfig.{name}"))
    if self.variant not in VARIANTS:
      raise ValueError(f"unknown variant {self.variant!r}: one of {list(VARIANTS)}")
    if self.variant == "glomo" and not self.predictor_export:
      raise ValueError("variant 'glomo' needs predictor_export: the export of a pixel "
                       "pretraining run (experiments/pretrain_images.py writes "
                       "<workdir>/export)")


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


class CifarTask(Task):
  """The module docstring's task: `GLoMoResNet` on image sets."""
  rng_streams = ("augment",)
  log_metrics = ("loss", "accuracy")

  def __init__(self, config: CifarConfig, splits: Mapping[str, ImageSet], predictor=None):
    self.config, self.splits, self.predictor = config, dict(splits), predictor
    self.eval_splits = (VALIDATION,)     # test: once, with the best variables (on_end)
    self.image_shape = self.splits["train"].shape
    layers = predictor.config.num_graph_layers if predictor is not None else 3
    self.model = GLoMoResNet(config.variant, config.depth, config.width, 10, layers,
                             config.num_mixtures, config.conditioned,
                             config.transfer_features, config.graph_downsample,
                             config.graph_chunk)
    o = config.optim
    self.batch_size, self.eval_batch_size = o.batch_size, o.eval_batch_size or o.batch_size
    self.process = (jax.process_index(), jax.process_count())
    self.batches = ExampleBatches(self.splits["train"], self.batch_size,
                                  lambda idx: self._batch("train", idx, self.batch_size),
                                  seed=config.seed)
    self.loop_values = loop_values(o, self.batches.batches_per_epoch, f"{VALIDATION}/accuracy")

  def loop_config(self, **changes) -> LoopConfig:
    return LoopConfig(**{**self.loop_values, "seed": self.config.seed,
                         "mesh_data": self.config.mesh_data,
                         "compile_fast": self.config.compile_fast, **changes})

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
    if self.predictor is None or self.config.variant != "glomo":
      return None
    return lambda images: self.predictor.predict(self.predictor.variables, images)

  # ---- model ------------------------------------------------------------------
  def init_variables(self, rng):
    images = jnp.zeros((1, *self.image_shape, 3), jnp.uint8)
    return self.model.init(rng, images, train=False, graph_fn=self._graph_fn())

  def optimizer(self):
    return make_optimizer(self.config.optim, self.loop_values["num_steps"])

  def _scores(self, variables, batch, train: bool, rngs=None):
    images = batch["images"]
    if train:                                     # horizontal flips, half the images
      flip = jax.random.bernoulli(rngs["augment"], 0.5, (images.shape[0],))
      images = jnp.where(flip[:, None, None, None], images[:, :, ::-1], images)
    out = self.model.apply(variables, images, train=train, graph_fn=self._graph_fn(),
                           mutable=["batch_stats"] if train else False)
    logits, updates = out if train else (out, None)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"])
    correct = (jnp.argmax(logits, -1) == batch["label"]).astype(jnp.float32)
    w = batch["weight"]
    return jnp.sum(losses * w), jnp.sum(correct * w), jnp.sum(w), updates

  def loss(self, variables, batch, rngs):
    loss_sum, correct, count, updates = self._scores(variables, batch, True, rngs)
    count = jnp.maximum(count, 1.0)
    return (loss_sum / count, {"loss": loss_sum / count, "accuracy": correct / count},
            updates["batch_stats"])

  # ---- data and evaluation ----------------------------------------------------
  def train_batches(self):
    return self.batches

  def batch_spec(self):
    b = self.batch_size
    return {"images": jax.ShapeDtypeStruct((b, *self.image_shape, 3), jnp.uint8),
            "label": jax.ShapeDtypeStruct((b,), jnp.int32),
            "weight": jax.ShapeDtypeStruct((b,), jnp.float32)}

  def eval_step(self, variables, batch):
    loss_sum, correct, count, _ = self._scores(variables, batch, False)
    return {"loss_sum": loss_sum, "correct": correct, "count": count}

  def evaluate(self, split: str, run_eval: RunEval) -> dict[str, float]:
    """Accuracy (a fraction, as the text tasks) and mean loss over every
    image of `split`."""
    sums = {"loss_sum": 0.0, "correct": 0.0, "count": 0.0}
    for indices in batch_order(self.splits[split], self.eval_batch_size):
      out = run_eval(self._batch(split, indices, self.eval_batch_size))
      for k in sums:
        sums[k] += float(out[k])
    n = max(sums["count"], 1.0)
    return {"accuracy": sums["correct"] / n, "loss": sums["loss_sum"] / n,
            "images": sums["count"]}

  def on_start(self, ctx: RunContext) -> None:
    record_run_config(ctx, self.config.to_dict())

  def on_end(self, ctx: RunContext) -> dict:
    results = {VALIDATION: ctx.best.get("value", float("nan"))}
    if TEST in self.splits:
      results[TEST] = ctx.evaluate(TEST, ctx.best_variables())["accuracy"]
    return {"results": results}


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
  if config.variant == "glomo":
    from glomo_jax.export import load_graph_predictor  # noqa: PLC0415
    predictor = load_graph_predictor(config.predictor_export)
    if predictor.manifest.get("units") != "pixels":
      raise ValueError(f"{config.predictor_export} is a text predictor; CIFAR needs a "
                       "pixel one (experiments/pretrain_images.py)")
  logger.info("CIFAR-10 %s: %s", config.variant,
              ", ".join(f"{k} {len(v)}" for k, v in splits.items()))
  task = CifarTask(config, splits, predictor)
  summary = loop.run(task, task.loop_config(compilation_cache_dir=compilation_cache_dir),
                     workdir, devices=devices)
  if summary["preempted"]:
    return {"preempted": True, "step": summary["step"]}
  scores = summary["results"]
  results = {
      "variant": config.variant, "seed": config.seed,
      "validation_accuracy": scores[VALIDATION], TEST: scores.get(TEST),
      "best_step": summary["best"].get("step"), "steps": summary["step"],
      "images": {k: len(v) for k, v in splits.items()},
      "curves": [{"step": e["step"], "train_loss": e["train"].get("loss"),
                  "validation_accuracy": e[VALIDATION]["accuracy"]}
                 for e in summary["history"]],
      "train_time_s": summary["train_seconds"], "wall_time_s": time.time() - start,
      "predictor": predictor.directory if predictor is not None else None,
      "config": config.to_dict()}
  if jax.process_index() == 0:
    write_json(os.path.join(workdir, RESULTS_FILE), results)
  return results
