"""The loop's bookkeeping: the best evaluation, early stopping, the plateau
rule, and the settings that need a selection metric."""
import pytest

from glomo_jax.train.config import LoopConfig
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
