"""`LoopConfig`: the settings of `glomo_jax.train.loop.run` that every task shares;
`LoopOptions`: the part of them a pretraining config holds."""
from __future__ import annotations

import dataclasses

MODES = ("min", "max")


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
    for name in ("num_steps", "log_every", "eval_every", "checkpoint_every",
                 "keep_checkpoints"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
    if self.select_mode not in MODES:
      raise ValueError(f"select_mode {self.select_mode!r} is not one of {list(MODES)}")
    if self.patience is not None and self.patience < 1:
      raise ValueError(f"patience must be >= 1 or None, got {self.patience}")
    steering = self.patience is not None or self.keep_best or self.plateau_patience > 0
    if steering and not self.select_metric:
      raise ValueError("patience, keep_best and plateau_patience need a select_metric "
                       "('<split>/<metric>')")


@dataclasses.dataclass(frozen=True)
class LoopOptions:
  """The loop settings a pretraining config holds (`PretrainConfig.loop`,
  `ImagePretrainConfig.loop`); `loop_config` adds what the run decides (its
  seed, the metric that ranks evaluations).

  Attributes:
    num_steps, log_every, eval_every, checkpoint_every, keep_checkpoints,
    mesh_data, mesh_fsdp, compile_fast: as `LoopConfig`'s.
    plateau_patience: evaluations without a better held-out loss before the
      learning rate is multiplied by plateau_factor (0: never).
  """
  num_steps: int = 1000
  log_every: int = 10
  eval_every: int = 200
  checkpoint_every: int = 200
  keep_checkpoints: int = 3
  plateau_patience: int = 3
  plateau_factor: float = 0.5
  mesh_data: int = -1
  mesh_fsdp: int = 1
  compile_fast: bool = False

  def __post_init__(self):
    for name in ("num_steps", "log_every", "eval_every", "checkpoint_every",
                 "keep_checkpoints"):
      if getattr(self, name) < 1:
        raise ValueError(f"loop.{name} must be >= 1, got {getattr(self, name)}")

  def loop_config(self, **fields) -> LoopConfig:
    """A LoopConfig of these settings and `fields` (seed, select_metric, ...;
    they override)."""
    return LoopConfig(**{**dataclasses.asdict(self), **fields})


# A pretraining config.json written before these fields moved under `loop`
# reads into the current layout (`glomo_jax.config.moved_fields`).
LOOP_MOVED_FIELDS = {f.name: f"loop.{f.name}" for f in dataclasses.fields(LoopOptions)}
