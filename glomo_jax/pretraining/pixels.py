"""Pretraining GLoMo over pixels as a task of the training loop.

Images (`ImageSource`: TFDS ``imagenet_resized/32x32`` or an .npz file) →
optional box downsampling → a seeded held-out subset → `PixelGLoMo`'s window
loss; evaluation is the held-out window loss per predicted channel value (nats)
with every position decoded. `pretrain_images(config, workdir)` is the whole
run; it resumes exactly after a kill (the loop's checkpoints, the data
position of `ExampleBatches`) and refuses a workdir of another config. At
the end the frozen graph predictor is exported to <workdir>/export, which
`glomo_jax.export.load_graph_predictor` loads in one call.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from glomo_jax.config import ModelConfig, from_dict
from glomo_jax.images.data import ImageSource, carve_validation, downsample, read_images
from glomo_jax.models.pixel_glomo import PixelGLoMo
from glomo_jax.pretraining.config import PretrainConfigBase
from glomo_jax.train import loop
from glomo_jax.train.batches import ExampleBatches, batch_order, host_rows
from glomo_jax.train.run_config import check_run_config, record_run_config
from glomo_jax.train.task import RunContext, RunEval, Task

logger = logging.getLogger("glomo_jax.train")

HELDOUT = "heldout"
# what a resumed run may change: how long it trains, how often it reports or saves
RESUMABLE_CHANGES = ("loop.num_steps", "loop.log_every", "loop.checkpoint_every")


@dataclasses.dataclass(frozen=True)
class ImagePretrainConfig(PretrainConfigBase):
  """Settings of a pixel pretraining run.

  Attributes:
    model: the ModelConfig read by `PixelGLoMo` (vocab_size = levels per
      channel, 256 = every value).
    images: where the training images come from.
    downsample: box-average factor (2: 32×32 → 16×16, the CPU scale).
    max_images: use a seeded random subset of this many images (None: all).
    heldout_images: images held out (seeded) for the evaluation loss.
    batch_size: global images per step.
    optimizer, learning_rate, momentum, clip_norm, weight_decay, loop,
      eval_batches, seed, export: `PretrainConfigBase`'s (its AdamW defaults;
      the seed also draws the subset and the held-out carve; the export
      has units 'pixels').
  """
  model: ModelConfig = ModelConfig(vocab_size=256, dim=64, num_heads=4, head_dim=32,
                                   num_graph_layers=2, decoder_layers=1,
                                   sample_positions=64)
  images: ImageSource = ImageSource()
  downsample: int = 1
  max_images: int | None = None
  heldout_images: int = 1000
  batch_size: int = 32

  def __post_init__(self):
    for name, kind in (("model", ModelConfig), ("images", ImageSource)):
      if isinstance(getattr(self, name), Mapping):
        object.__setattr__(self, name, from_dict(kind, getattr(self, name)))
    self._loop_from_mapping()
    for name in ("batch_size", "downsample", "heldout_images"):
      if getattr(self, name) < 1:
        raise ValueError(f"ImagePretrainConfig.{name} must be >= 1, got "
                         f"{getattr(self, name)}")

  def loop_fields(self) -> dict:
    """What the run adds to `loop` in its LoopConfig (`LoopOptions.loop_config`):
    the seed, and the held-out loss that ranks evaluations."""
    return {"seed": self.seed, "select_metric": f"{HELDOUT}/loss", "select_mode": "min"}


def load_pretraining_images(config: ImagePretrainConfig):
  """(train, held-out) `ImageSet`s of the run: read, downsampled, subset."""
  data = read_images(config.images)
  if config.max_images is not None and config.max_images < len(data):
    data = data.subset(np.sort(np.random.default_rng(config.seed).permutation(
        len(data))[:config.max_images]))
  data = type(data)(downsample(data.images, config.downsample), data.labels)
  train, heldout = carve_validation(len(data), config.heldout_images, config.seed)
  return data.subset(train), data.subset(heldout)


class PixelPretrainingTask(Task):
  """`PixelGLoMo` on an image set (module docstring)."""
  rng_streams = ("sample", "dropout")
  eval_splits = (HELDOUT,)
  log_metrics = ("loss", "loss_fw", "loss_bw")
  batch_flag = "--config.batch_size"

  def __init__(self, config: ImagePretrainConfig):
    self.config = config
    self.train_set, self.heldout_set = load_pretraining_images(config)
    if len(self.train_set) < config.batch_size:
      raise ValueError(f"{len(self.train_set)} training images make no batch of "
                       f"{config.batch_size}: use more images or a smaller batch_size")
    if len(self.heldout_set) < config.batch_size:
      raise ValueError(f"{len(self.heldout_set)} held-out images make no batch of "
                       f"{config.batch_size}: raise heldout_images or lower batch_size")
    self.image_shape = self.train_set.shape
    self.model = PixelGLoMo(config.model, self.image_shape)
    self.eval_model = PixelGLoMo(config.model.replace(sample_positions=0), self.image_shape)
    self.tokens_per_batch = config.batch_size * self.image_shape[0] * self.image_shape[1]
    self.unit_name = "pixels"
    self.process = (jax.process_index(), jax.process_count())
    self.batches = ExampleBatches(self.train_set, config.batch_size,
                                  lambda idx: self._batch(self.train_set, idx),
                                  seed=config.seed)
    logger.info("%d training and %d held-out images of %d×%d from %s",
                len(self.train_set), len(self.heldout_set), *self.image_shape,
                config.images.describe())

  def _batch(self, images, indices) -> dict:
    return host_rows({"images": images.images[np.asarray(indices)]}, *self.process)

  # ---- model ------------------------------------------------------------------
  def init_variables(self, rng):
    n = self.image_shape[0] * self.image_shape[1]
    everywhere = jnp.arange(n - 1)
    return self.model.init(rng, jnp.zeros((1, *self.image_shape, 3), jnp.uint8),
                           train=False, positions=(everywhere, everywhere))

  def optimizer(self):
    return self.config.build_optimizer()

  def loss(self, variables, batch, rngs):
    (loss, metrics), updates = self.model.apply(
        variables, batch["images"], train=True, rngs=rngs, mutable=["batch_stats"])
    return loss, metrics, updates.get("batch_stats", variables.get("batch_stats", {}))

  # ---- data -------------------------------------------------------------------
  def train_batches(self):
    return self.batches

  def batch_spec(self):
    return {"images": jax.ShapeDtypeStruct((self.config.batch_size, *self.image_shape, 3),
                                           jnp.uint8)}

  # ---- evaluation -------------------------------------------------------------
  def eval_step(self, variables, batch):
    loss, metrics = self.eval_model.apply(variables, batch["images"], train=False)
    return {"loss_sum": loss * metrics["values"], "values": metrics["values"]}

  def evaluate(self, split: str, run_eval: RunEval) -> dict[str, float]:
    """Held-out loss per predicted channel value (nats, and bits as
    bits_per_value) over the first `eval_batches` full batches (0: all).
    It is the teacher-forced 3×3-window loss (a pixel is predicted from up
    to 4 positions), not a likelihood of the image: not comparable with
    PixelCNN bits/dim."""
    loss_sum = values = 0.0
    order = batch_order(self.heldout_set, self.config.batch_size, drop_remainder=True)
    for i, indices in enumerate(order):
      if self.config.eval_batches and i >= self.config.eval_batches:
        break
      out = run_eval(self._batch(self.heldout_set, indices))
      loss_sum += float(out["loss_sum"])
      values += float(out["values"])
    loss = loss_sum / max(values, 1.0)
    return {"loss": loss, "bits_per_value": loss / np.log(2.0), "values": values}

  def check_resume(self, workdir: str) -> None:
    check_run_config(workdir, self.config.to_dict(), RESUMABLE_CHANGES, type(self.config))

  def on_start(self, ctx: RunContext) -> None:
    record_run_config(ctx, self.config.to_dict())

  def on_end(self, ctx: RunContext) -> dict:
    if not self.config.export:
      return {}
    from glomo_jax.export import export_graph_predictor  # noqa: PLC0415
    return {"export": export_graph_predictor(
        os.path.join(ctx.workdir, "export"), self.config.model, ctx.state.variables,
        metadata={"step": int(ctx.state.step), "image_shape": list(self.image_shape),
                  "workdir": os.path.abspath(ctx.workdir)},
        overwrite=True, units="pixels")}


def pretrain_images(config: ImagePretrainConfig, workdir: str, *,
                    compilation_cache_dir: str | None = None, devices=None) -> dict:
  """Runs (or resumes) pixel pretraining in `workdir`; the loop's summary."""
  task = PixelPretrainingTask(config)
  return loop.run(task, config.loop.loop_config(**config.loop_fields(),
                                                compilation_cache_dir=compilation_cache_dir),
                  workdir, devices=devices)
