"""Option groups every downstream run shares: the optimiser and training
length (`OptimOptions`), which become the run's optimiser and `LoopConfig`,
and the TFDS reading options (`TfdsOptions`)."""
from __future__ import annotations

import dataclasses

import optax

from glomo_jax.train.config import LoopConfig
from glomo_jax.train.optimizer import OPTIMIZERS, make_optimizer

SCHEDULES = ("constant", "cosine")


@dataclasses.dataclass(frozen=True)
class OptimOptions:
  """`optimizer` ('adam'; 'adadelta' as document-qa's SQuAD model; 'sgd' with
  `momentum`, Nesterov, as CIFAR ResNets) at `learning_rate`, constant or
  decayed to 0 by a cosine over the run (`schedule` 'cosine'), with L2
  `weight_decay` added to the gradients and global-norm clipping (clip_norm
  None: none); `batch_size` examples a step (`eval_batch_size`: a task's
  default when None); training length `steps`, else `epochs` (default 1);
  `eval_every` steps between validation evaluations (default one epoch);
  early stopping after `patience` evaluations without a better validation
  score (None: never); `log_every` steps between progress lines;
  `checkpoint_every` steps between checkpoints (default: every evaluation)."""
  optimizer: str = "adam"
  learning_rate: float = 1e-3
  clip_norm: float | None = None
  batch_size: int = 32
  eval_batch_size: int | None = None
  epochs: float | None = None
  steps: int | None = None
  eval_every: int | None = None
  patience: int | None = None
  log_every: int = 100
  checkpoint_every: int | None = None
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
    for name in ("batch_size", "log_every"):
      if getattr(self, name) < 1:
        raise ValueError(f"optim.{name} must be >= 1, got {getattr(self, name)}")

  def num_steps(self, batches_per_epoch: int) -> int:
    """Training steps: `steps`, else `epochs` (default 1) of the epoch's batches."""
    if self.steps is not None:
      return self.steps
    return max(1, int(round((self.epochs if self.epochs is not None else 1)
                            * batches_per_epoch)))

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

  def loop_config(self, batches_per_epoch: int, select_metric: str, **fields) -> LoopConfig:
    """The loop's settings: length (`num_steps`), evaluations (default once
    an epoch), checkpoints (default at each evaluation, two kept), the best
    variables kept by `select_metric` (max) and early stopping after
    `patience`; `fields`: other LoopConfig fields (seed, mesh_data, ...)."""
    eval_every = self.eval_every or batches_per_epoch
    return LoopConfig(**{
        "num_steps": self.num_steps(batches_per_epoch), "log_every": self.log_every,
        "eval_every": eval_every, "checkpoint_every": self.checkpoint_every or eval_every,
        "keep_checkpoints": 2, "select_metric": select_metric, "select_mode": "max",
        "patience": self.patience, "keep_best": True, **fields})


@dataclasses.dataclass(frozen=True)
class TfdsOptions:
  """source='tfds': data directory, a TFDS split to use as validation instead
  of carving one, the reader ('auto', 'data_source', 'tf'), download."""
  data_dir: str | None = None
  validation: str | None = None
  reader: str = "auto"
  download: bool = False
