"""`DownstreamTask`: what every downstream task of the training loop shares.

A task model is trained on a training split with its config's
`OptimOptions` (the optimiser, and the loop's length, evaluations and
checkpoints); the validation split is evaluated every `eval_every` steps,
its `select_metric` ranks the evaluations (the best variables are kept,
patience stops early), and at the end the best variables are scored on the
task's held-out splits. The run's config is recorded in the workdir and a
resumed run must have the same one (`DownstreamConfig.resumable`).

A subclass sets `select_metric` (and `log_metrics`), builds its model and
batches, then calls `__init__` here with its training split and its
batch function; it implements `init_variables`, `loss`, `eval_step`,
`evaluate` and `curve`, and names its `held_out` splits.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import numpy as np

from glomo_jax.train.batches import ExampleBatches
from glomo_jax.train.run_config import check_run_config, record_run_config
from glomo_jax.train.task import RunContext, Task

VALIDATION = "validation"


class DownstreamTask(Task):
  """A downstream task (module docstring).

  Args:
    config: the run's config (a `DownstreamConfig`).
    train: the training split (anything with a length; bucketing by length
      needs `texts` and `lengths(field)`).
    make_batch: indices of `train` -> this process's rows of their batch.
    bucket_batches: length-bucketing window in batches (0: none).
    eval_batch_size: the evaluation batch when `config.optim` sets none
      (default: twice the training batch).

  Attributes:
    select_metric: the validation metric that ranks evaluations (maximised).
    held_out: the splits scored with the best variables at the end.
    batch_size, eval_batch_size: global batches; process: (index, count).
    batches: the training iterator (`ExampleBatches`).
  """
  rng_streams = ("dropout",)
  eval_splits = (VALIDATION,)
  select_metric = "accuracy"
  held_out: Sequence[str] = ()

  def __init__(self, config, train, make_batch: Callable[[np.ndarray], dict], *,
               bucket_batches: int = 0, eval_batch_size: int | None = None):
    self.config = config
    o = config.optim
    self.batch_size = o.batch_size
    self.eval_batch_size = o.eval_batch_size or eval_batch_size or 2 * o.batch_size
    self.process = (jax.process_index(), jax.process_count())
    # a split smaller than one batch is padded with weight-0 rows
    self.batches = ExampleBatches(train, self.batch_size, make_batch, seed=config.seed,
                                  bucket_batches=bucket_batches)
    self.num_steps = config.loop.num_steps_for(self.batches.batches_per_epoch)

  def loop_fields(self) -> dict:
    """What the run adds to `config.loop` in its LoopConfig
    (`LoopOptions.loop_config`, with the epoch of `batches`): the seed and
    the validation metric that ranks evaluations (maximised)."""
    return {"seed": self.config.seed, "select_metric": f"{VALIDATION}/{self.select_metric}",
            "select_mode": "max"}

  def optimizer(self):
    return self.config.optim.optimizer_for(self.num_steps)

  def train_batches(self):
    return self.batches

  def curve(self, entry: dict) -> dict:
    """One point of results.json's curve from an evaluation of the history
    ({'step', 'train': {...}, 'validation': {...}})."""
    return {"step": entry["step"], "train_loss": entry["train"].get("loss"),
            f"validation_{self.select_metric}": entry[VALIDATION][self.select_metric]}

  def check_resume(self, workdir: str) -> None:
    """A resumed run must have the workdir's config (up to `resumable`)."""
    check_run_config(workdir, self.config.to_dict(), self.config.resumable(),
                     type(self.config))

  def on_start(self, ctx: RunContext) -> None:
    """Records the config."""
    record_run_config(ctx, self.config.to_dict())

  def on_end(self, ctx: RunContext) -> dict[str, Any]:
    """{'results': {'validation': the best validation score, <held-out
    split>: the score of the best variables}, 'held_out_metrics': {<held-out
    split>: every metric of that evaluation}}."""
    results = {VALIDATION: ctx.best.get("value", float("nan"))}
    metrics = {}
    if self.held_out:
      best = ctx.best_variables()
      for name in self.held_out:
        metrics[name] = ctx.evaluate(name, best)
        results[name] = metrics[name][self.select_metric]
    return {"results": results, "held_out_metrics": metrics}
