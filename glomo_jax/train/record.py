"""The loop's host-side bookkeeping: evaluation history, the best evaluation,
early stopping and the plateau rule. Saved as JSON with every checkpoint."""
from __future__ import annotations

import dataclasses
from typing import Any

from glomo_jax.train.config import LoopConfig


@dataclasses.dataclass
class Record:
  """Attributes:
    history: every evaluation, {'step', 'train': means, split: metrics}.
    best, best_step: the best select_metric so far and its step.
    since_best: evaluations since the best one (early stopping).
    plateau_bad: evaluations without improvement since the best one or the
      last learning-rate cut (the plateau rule).
    stopped_early: patience ran out.
    train_seconds: wall time spent in the loop so far, over every
      invocation of the run (up to its last checkpoint).
  """
  history: list = dataclasses.field(default_factory=list)
  best: float | None = None
  best_step: int = 0
  since_best: int = 0
  plateau_bad: int = 0
  stopped_early: bool = False
  train_seconds: float = 0.0

  def to_json(self) -> dict:
    return dataclasses.asdict(self)

  @classmethod
  def from_json(cls, values: dict[str, Any]) -> "Record":
    return cls(**values)

  def add(self, config: LoopConfig, step: int, entry: dict) -> dict:
    """Records one evaluation; returns what it decided: {'improved': bool,
    'cut_lr': bool} (early stopping sets `stopped_early`)."""
    self.history.append(entry)
    if not config.select_metric:
      return {"improved": False, "cut_lr": False}
    split, _, name = config.select_metric.partition("/")
    if split not in entry or name not in entry[split]:
      raise ValueError(f"select_metric {config.select_metric!r} is not among the "
                       f"evaluation's metrics {sorted(k for k in entry if k != 'step')}")
    value = float(entry[split][name])
    better = (self.best is None or (value < self.best if config.select_mode == "min"
                                    else value > self.best))
    cut = False
    if better:
      self.best, self.best_step, self.since_best, self.plateau_bad = value, step, 0, 0
    else:
      self.since_best += 1
      self.plateau_bad += 1
      if config.plateau_patience and self.plateau_bad >= config.plateau_patience:
        cut, self.plateau_bad = True, 0
    if config.patience is not None and self.since_best >= config.patience:
      self.stopped_early = True
    return {"improved": better, "cut_lr": cut}
