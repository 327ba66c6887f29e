"""`LoopConfig`: the settings of `glomo_jax.train.loop.run` that every task shares;
`LoopOptions`: the part of them a run's config holds (the `loop` group of the
pretraining and downstream configs), which `LoopOptions.loop_config` turns
into the LoopConfig."""
from __future__ import annotations

import dataclasses

MODES = ("min", "max")
# fields counted in steps or evaluations: each >= 1
COUNTS = ("num_steps", "log_every", "eval_every", "checkpoint_every", "keep_checkpoints",
          "patience")


def check_counts(settings, optional=("patience",), where: str = "") -> None:
  """The one check of the loop settings' fields, for a LoopConfig and a
  LoopOptions: raises ValueError for a count (`COUNTS`) below 1, unset
  (None) unless `optional`, or a negative plateau_patience; `where`
  prefixes the field names in messages ('loop.')."""
  for name in COUNTS:
    value = getattr(settings, name)
    if value is None and name not in optional:
      raise ValueError(f"{where}{name} must be set (>= 1)")
    if value is not None and value < 1:
      raise ValueError(f"{where}{name} must be >= 1, got {value}")
  if settings.plateau_patience < 0:
    raise ValueError(f"{where}plateau_patience must be >= 0, got {settings.plateau_patience}")


@dataclasses.dataclass(frozen=True)
class LoopConfig:
  """How long to train, how often to report, evaluate and save, and how
  evaluations steer the run.

  Attributes:
    num_steps: training steps in all (a resumed run continues to it).
    log_every: steps between progress lines and TensorBoard points (also at
      the first step, every evaluation and every save); the reported train
      metrics are means over the steps since the previous report.
    eval_every: steps between evaluations of the task's eval splits (and at
      the last step).
    checkpoint_every: steps between checkpoints (and at the last step, an
      early stop and a preemption). keep_checkpoints: how many are kept.
    seed: parameters, per-step rngs (dropout, sampled positions).
    mesh_data, mesh_fsdp: the mesh's shape; -1 = all remaining devices.
    select_metric: '<split>/<metric>' that ranks evaluations (None: none);
      select_mode: 'min' or 'max'.
    patience: stop after this many evaluations without a better
      select_metric (None: never stop early).
    keep_best: save the variables of the best evaluation in <workdir>/best.
    plateau_patience, plateau_factor: multiply the learning rate by
      plateau_factor after plateau_patience evaluations without a better
      select_metric (0: off); counted again from each cut.
    compile_fast: cheap XLA compiles (CPU tests and smoke runs).
    compilation_cache_dir: JAX's persistent compilation cache (None: off).
  """
  num_steps: int
  log_every: int = 100
  eval_every: int = 1000
  checkpoint_every: int = 1000
  keep_checkpoints: int = 3
  seed: int = 0
  mesh_data: int = -1
  mesh_fsdp: int = 1
  select_metric: str | None = None
  select_mode: str = "min"
  patience: int | None = None
  keep_best: bool = False
  plateau_patience: int = 0
  plateau_factor: float = 0.5
  compile_fast: bool = False
  compilation_cache_dir: str | None = None

  def __post_init__(self):
    check_counts(self)
    if self.select_mode not in MODES:
      raise ValueError(f"select_mode {self.select_mode!r} is not one of {list(MODES)}")
    steering = self.patience is not None or self.keep_best or self.plateau_patience > 0
    if steering and not self.select_metric:
      raise ValueError("patience, keep_best and plateau_patience need a select_metric "
                       "('<split>/<metric>')")


# the LoopOptions fields that may be None (their meaning: `LoopOptions`)
OPTIONAL = ("num_steps", "epochs", "eval_every", "checkpoint_every", "patience")


@dataclasses.dataclass(frozen=True)
class LoopOptions:
  """The loop settings a run's config holds as its `loop` group (every
  pretraining and downstream config; flags `--config.loop.<field>`);
  `loop_config` adds what the run decides (its seed, the metric that ranks
  evaluations, the training split's batches an epoch). The defaults are
  pretraining's; `DOWNSTREAM_LOOP` holds the downstream configs' ones.

  Attributes:
    num_steps: training steps in all (a resumed run continues to it); None:
      `epochs` of the training split (downstream runs only: pretraining
      counts steps).
    epochs: the length when num_steps is None, in passes over the training
      split (None: 1).
    log_every: steps between progress lines and TensorBoard points.
    eval_every: steps between evaluations (None: once an epoch).
    checkpoint_every: steps between checkpoints (None: at every evaluation).
    keep_checkpoints: how many checkpoints are kept.
    keep_best: save the variables of the best evaluation in <workdir>/best.
    patience: stop after this many evaluations without a better score
      (None: never stop early).
    plateau_patience: evaluations without a better score before the
      learning rate is multiplied by plateau_factor (0: never).
    mesh_data, mesh_fsdp: the mesh's shape; -1 = all remaining devices.
    compile_fast: cheap XLA compiles (CPU smoke runs, the `tiny` presets).
  """
  num_steps: int | None = 1000
  epochs: float | None = None
  log_every: int = 10
  eval_every: int | None = 200
  checkpoint_every: int | None = 200
  keep_checkpoints: int = 3
  keep_best: bool = False
  patience: int | None = None
  plateau_patience: int = 3
  plateau_factor: float = 0.5
  mesh_data: int = -1
  mesh_fsdp: int = 1
  compile_fast: bool = False

  def __post_init__(self):
    check_counts(self, OPTIONAL, "loop.")
    if self.epochs is not None and self.epochs <= 0:
      raise ValueError(f"loop.epochs must be > 0, got {self.epochs}")

  def check_steps(self) -> None:
    """Raises ValueError unless the length and evaluations are counted in
    steps (num_steps, eval_every set; no epochs): a run without epochs
    (pretraining)."""
    for name in ("num_steps", "eval_every"):
      if getattr(self, name) is None:
        raise ValueError(f"loop.{name} must be set: this run counts steps, not epochs")
    if self.epochs is not None:
      raise ValueError("loop.epochs is for downstream runs: this run counts steps "
                       "(loop.num_steps)")

  def num_steps_for(self, batches_per_epoch: int | None = None) -> int:
    """Training steps: num_steps, else `epochs` (default 1) of the epoch's batches."""
    if self.num_steps is not None:
      return self.num_steps
    return max(1, int(round((self.epochs if self.epochs is not None else 1)
                            * self._epoch(batches_per_epoch, "num_steps"))))

  def loop_config(self, batches_per_epoch: int | None = None, **fields) -> LoopConfig:
    """The LoopConfig of these settings: the length (`num_steps_for`),
    evaluations (eval_every None: every `batches_per_epoch` steps),
    checkpoints (None: at each evaluation); `fields`: what the run adds or
    overrides (seed, select_metric, select_mode, ...)."""
    eval_every = self.eval_every or self._epoch(batches_per_epoch, "eval_every")
    values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
              if f.name != "epochs"}
    values.update(num_steps=self.num_steps_for(batches_per_epoch),
                  eval_every=eval_every, checkpoint_every=self.checkpoint_every or eval_every)
    return LoopConfig(**{**values, **fields})

  @staticmethod
  def _epoch(batches_per_epoch: int | None, name: str) -> int:
    if batches_per_epoch is None:
      raise ValueError(f"loop.{name} must be set: this run has no epochs")
    return batches_per_epoch


# The downstream configs' loop (`DownstreamConfig.loop`): one epoch, evaluated
# once an epoch, a checkpoint at each evaluation (two kept), the best
# variables kept, no early stopping, no plateau rule.
DOWNSTREAM_LOOP = LoopOptions(num_steps=None, log_every=100, eval_every=None,
                              checkpoint_every=None, keep_checkpoints=2, keep_best=True,
                              plateau_patience=0)

# A pretraining config.json written before these fields moved under `loop`
# reads into the current layout (`glomo_jax.config.moved_fields`).
LOOP_MOVED_FIELDS = {name: f"loop.{name}" for name in (
    "num_steps", "log_every", "eval_every", "checkpoint_every", "keep_checkpoints",
    "plateau_patience", "plateau_factor", "mesh_data", "mesh_fsdp", "compile_fast")}
