"""The loop's bookkeeping: the best evaluation, early stopping, the plateau
rule, and the settings that need a selection metric."""
import dataclasses

import pytest

from glomo_jax.train.config import DOWNSTREAM_LOOP, LoopConfig, LoopOptions
from glomo_jax.train.record import Record


def entries(values, split="validation", name="accuracy"):
  return [{"step": 10 * (i + 1), "train": {}, split: {name: v}} for i, v in enumerate(values)]


def test_best_evaluation_and_early_stopping():
  config = LoopConfig(num_steps=100, select_metric="validation/accuracy", select_mode="max",
                      patience=2, keep_best=True)
  record = Record()
  decisions = [record.add(config, e["step"], e)["improved"]
               for e in entries([0.5, 0.7, 0.7, 0.6])]
  assert decisions == [True, True, False, False]
  assert (record.best, record.best_step, record.since_best) == (0.7, 20, 2)
  assert record.stopped_early and len(record.history) == 4
  assert Record.from_json(record.to_json()) == record


def test_plateau_rule_cuts_after_patience_and_counts_again():
  config = LoopConfig(num_steps=100, select_metric="heldout/loss", select_mode="min",
                      plateau_patience=2)
  record = Record()
  cuts = [record.add(config, e["step"], e)["cut_lr"]
          for e in entries([5.0, 5.1, 5.2, 5.3, 5.4, 4.0, 4.5], "heldout", "loss")]
  # the authors' rule: halve after 2 evaluations without a better loss, then count again
  assert cuts == [False, False, True, False, True, False, False]
  assert record.best == 4.0 and not record.stopped_early


def test_settings_that_need_a_selection_metric():
  with pytest.raises(ValueError, match="need a select_metric"):
    LoopConfig(num_steps=10, patience=3)
  with pytest.raises(ValueError, match="select_mode"):
    LoopConfig(num_steps=10, select_metric="v/a", select_mode="largest")
  with pytest.raises(ValueError, match="num_steps must be >= 1"):
    LoopConfig(num_steps=0)
  config = LoopConfig(num_steps=10, select_metric="validation/accuracy")
  with pytest.raises(ValueError, match="is not among the evaluation's metrics"):
    Record().add(config, 1, {"step": 1, "train": {}, "heldout": {"loss": 1.0}})


def test_loop_options_become_the_loop_config_of_a_run():
  """One class of loop settings (`LoopOptions`): pretraining counts steps,
  a downstream run's defaults (`DOWNSTREAM_LOOP`) count epochs, evaluate
  once an epoch and checkpoint at each evaluation; fields are checked once."""
  pretraining = LoopOptions(num_steps=50, eval_every=10, checkpoint_every=None)
  pretraining.check_steps()
  config = pretraining.loop_config(seed=3, select_metric="heldout/loss")
  assert (config.num_steps, config.eval_every, config.checkpoint_every, config.seed,
          config.keep_checkpoints, config.plateau_patience) == (50, 10, 10, 3, 3, 3)
  with pytest.raises(ValueError, match="loop.num_steps must be set"):
    DOWNSTREAM_LOOP.check_steps()
  with pytest.raises(ValueError, match="loop.eval_every must be set: this run has no epochs"):
    dataclasses.replace(DOWNSTREAM_LOOP, num_steps=5).loop_config()
  config = dataclasses.replace(DOWNSTREAM_LOOP, epochs=2.5, patience=2).loop_config(
      7, select_metric="validation/accuracy", select_mode="max")
  assert (config.num_steps, config.eval_every, config.checkpoint_every, config.log_every,
          config.keep_checkpoints, config.keep_best, config.patience,
          config.plateau_patience) == (18, 7, 7, 100, 2, True, 2, 0)
  assert DOWNSTREAM_LOOP.num_steps_for(7) == 7          # one epoch
  for bad, match in (({"patience": 0}, "loop.patience must be >= 1"),
                     ({"log_every": None}, "loop.log_every must be set"),
                     ({"eval_every": 0}, "loop.eval_every must be >= 1"),
                     ({"epochs": 0.0}, "loop.epochs must be > 0")):
    with pytest.raises(ValueError, match=match):
      dataclasses.replace(DOWNSTREAM_LOOP, **bad)
