"""Option groups every downstream run shares: the optimiser and batches
(`OptimOptions`) and the TFDS reading options (`TfdsOptions`). The training
length, evaluations and checkpoints are the config's `loop` group
(`glomo_jax.train.config.LoopOptions`)."""
from __future__ import annotations

import dataclasses

import optax

from glomo_jax.train.optimizer import OPTIMIZERS, make_optimizer

SCHEDULES = ("constant", "cosine")


@dataclasses.dataclass(frozen=True)
class OptimOptions:
  """`optimizer` ('adam'; 'adadelta' as document-qa's SQuAD model; 'sgd' with
  `momentum`, Nesterov, as CIFAR ResNets) at `learning_rate`, constant or
  decayed to 0 by a cosine over the run (`schedule` 'cosine'), with L2
  `weight_decay` added to the gradients and global-norm clipping (clip_norm
  None: none); `batch_size` examples a step (`eval_batch_size`: a task's
  default when None). The run's length, evaluations and checkpoints are
  the config's `loop` (`LoopOptions`)."""
  optimizer: str = "adam"
  learning_rate: float = 1e-3
  clip_norm: float | None = None
  batch_size: int = 32
  eval_batch_size: int | None = None
  momentum: float = 0.9
  weight_decay: float = 0.0
  schedule: str = "constant"

  def check(self) -> None:
    """Raises ValueError for a setting that cannot run."""
    if self.optimizer not in OPTIMIZERS:
      raise ValueError(f"unknown optim.optimizer {self.optimizer!r}: one of "
                       f"{sorted(OPTIMIZERS)}")
    if self.schedule not in SCHEDULES:
      raise ValueError(f"unknown optim.schedule {self.schedule!r}: one of {list(SCHEDULES)}")
    if self.batch_size < 1:
      raise ValueError(f"optim.batch_size must be >= 1, got {self.batch_size}")

  def optimizer_for(self, num_steps: int) -> optax.GradientTransformation:
    """The optimiser (`glomo_jax.train.optimizer.make_optimizer`): clipping,
    L2 weight decay, then Adam, Adadelta or SGD with Nesterov momentum; the
    cosine schedule runs over the run's `num_steps`."""
    self.check()
    lr = self.learning_rate
    if self.schedule == "cosine":
      lr = optax.cosine_decay_schedule(self.learning_rate, num_steps)
    return make_optimizer(self.optimizer, lr, momentum=self.momentum, nesterov=True,
                          clip_norm=self.clip_norm, weight_decay=self.weight_decay,
                          decay="l2")


@dataclasses.dataclass(frozen=True)
class TfdsOptions:
  """source='tfds': data directory, a TFDS split to use as validation instead
  of carving one, the reader ('auto', 'data_source', 'tf'), download."""
  data_dir: str | None = None
  validation: str | None = None
  reader: str = "auto"
  download: bool = False


# A downstream config.json written before the loop's settings became one
# `loop` group (`LoopOptions`) reads into the current layout
# (`glomo_jax.config.moved_fields`).
DOWNSTREAM_MOVED_FIELDS = {"optim.steps": "loop.num_steps", "optim.epochs": "loop.epochs",
                           "optim.eval_every": "loop.eval_every",
                           "optim.patience": "loop.patience",
                           "optim.log_every": "loop.log_every",
                           "optim.checkpoint_every": "loop.checkpoint_every",
                           "mesh_data": "loop.mesh_data", "compile_fast": "loop.compile_fast"}
