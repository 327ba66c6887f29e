"""Every downstream run kind (classification, SQuAD, CIFAR, picking, pixel
pretraining, the LSTM language model) stops on a non-finite loss with a
one-line error naming its last good checkpoint, which stays finite; nothing
after it is saved and no results are written (pretraining:
tests/test_train_resume.py).

Each case runs 4 steps, saving at step 2; from the third batch on the task's
loss is multiplied by NaN (a patched `loss` reading a factor the patched
batches carry, so the NaN flows through the compiled step, its gradients
and the update, and the step compiles once)."""
import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from experiments import cli, kinds
from experiments.lstm_control import LstmLmTask, train_lstm_lm
from glomo_jax.focused import PickingTask, run_picking
from glomo_jax.images.cifar import CifarTask, run_cifar
from glomo_jax.pretraining.pixels import PixelPretrainingTask, pretrain_images
from glomo_jax.squad.config import SquadConfig, SquadFiles
from glomo_jax.squad.run import run_squad
from glomo_jax.squad.task import SquadTask
from glomo_jax.classification import run_classification
from glomo_jax.classification.task import ClassificationTask
from glomo_jax.train import NonFiniteLossError
from test_cifar import config_for as cifar_config
from test_cifar import write_cifar
from test_images_pretraining import config_for as pixel_config
from test_images_pretraining import write_images
from test_picking import config_for as picking_config
from test_squad_parts import write_squad
from test_squad_run import TINY_LOOP, TINY_OPTIM, TINY_READER
from test_classification_task import imdb_config
from test_lstm_control import config_for as lstm_config

ONE = jax.devices()[:1]


def with_steps(config, steps):
  """`config` run for `steps` steps at a constant rate, evaluated every 2."""
  return config.replace(
      optim=dataclasses.replace(config.optim, schedule="constant"),
      loop=dataclasses.replace(config.loop, num_steps=steps, epochs=None, eval_every=2,
                               log_every=1, patience=None))


def classification(tmp_path):
  config = imdb_config(tmp_path)
  return ClassificationTask, lambda w: run_classification(with_steps(config, 4), w,
                                                          devices=ONE)


def squad(tmp_path):
  config = with_steps(SquadConfig(
      files=SquadFiles(train=write_squad(tmp_path / "train.json")), val_questions=5,
      length_multiple=8, model=TINY_READER, optim=TINY_OPTIM, loop=TINY_LOOP), 4)
  return SquadTask, lambda w: run_squad(config, w, devices=ONE)


def cifar(tmp_path):
  config = cifar_config(write_cifar(tmp_path / "cifar.npz"))
  return CifarTask, lambda w: run_cifar(with_steps(config, 4), w, devices=ONE)


def picking(tmp_path):
  config = picking_config(tmp_path, test_file=None, test_k="trained")
  return PickingTask, lambda w: run_picking(with_steps(config, 4), w, devices=ONE)


def pixels(tmp_path):
  config = pixel_config(write_images(tmp_path / "images.npz"), steps=4)
  return PixelPretrainingTask, lambda w: pretrain_images(config, w, devices=ONE)


class _Scaled:
  """A task's training batches, each with 'nan_scale' [rows]: 1 for the
  first `good` batches, NaN after."""

  def __init__(self, batches, good: int):
    self.batches, self.good, self.served = batches, good, 0

  def __iter__(self):
    return self

  def __next__(self) -> dict:
    batch = dict(next(self.batches))
    self.served += 1
    rows = len(next(iter(batch.values())))
    batch["nan_scale"] = np.full(rows, 1.0 if self.served <= self.good else np.nan, np.float32)
    return batch

  def state(self):
    return self.batches.state()

  def restore(self, state):
    self.batches.restore(state)


def nan_after(task_class, good: int, monkeypatch) -> None:
  """The task's loss times NaN from batch `good` + 1 on."""
  loss, batches, spec = task_class.loss, task_class.train_batches, task_class.batch_spec

  def scaled_loss(self, variables, batch, rngs):
    batch = dict(batch)
    scale = batch.pop("nan_scale")[0]
    value, metrics, batch_stats = loss(self, variables, batch, rngs)
    return value * scale, dict(metrics, loss=metrics.get("loss", value) * scale), batch_stats

  def scaled_spec(self):
    shapes = spec(self)
    if shapes is None:
      return None
    rows = next(iter(shapes.values())).shape[0]
    return dict(shapes, nan_scale=jax.ShapeDtypeStruct((rows,), jnp.float32))
  monkeypatch.setattr(task_class, "loss", scaled_loss)
  monkeypatch.setattr(task_class, "train_batches", lambda self: _Scaled(batches(self), good))
  monkeypatch.setattr(task_class, "batch_spec", scaled_spec)


def saved_steps(directory) -> list[int]:
  return sorted(int(d) for d in os.listdir(directory) if d.isdigit())


def lstm_lm(tmp_path):
  config = lstm_config(tmp_path, steps=4)
  return LstmLmTask, lambda w: train_lstm_lm(config, w, devices=ONE)


# run kind (experiments/kinds.py) -> its case; text pretraining stops on NaN in
# tests/test_train_resume.py
CASES = {"classify": classification, "squad": squad, "cifar": cifar, "pretrain_images": pixels,
         "picking": picking, "lstm_lm": lstm_lm}


def test_every_run_kind_but_text_pretraining_has_a_case():
  assert set(CASES) == set(kinds.KINDS) - {"pretrain"}


@pytest.mark.parametrize("kind", [k for k in kinds.KINDS if k in CASES])
def test_a_non_finite_loss_stops_the_run_at_its_last_good_checkpoint(tmp_path, monkeypatch,
                                                                     kind):
  workdir = str(tmp_path / "run")
  task_class, run = CASES[kind](tmp_path)
  nan_after(task_class, 2, monkeypatch)
  with pytest.raises(NonFiniteLossError) as error:
    run(workdir)
  checkpoints = os.path.join(workdir, "checkpoints")
  message = cli.one_line(error.value)
  assert message == str(error.value) and isinstance(error.value, cli.user_errors())
  assert "step 3" in message and f"last good checkpoint is step 2 in {checkpoints}" in message
  assert saved_steps(checkpoints) == [2] and not os.path.exists(
      os.path.join(workdir, "results.json"))
  state = ocp.StandardCheckpointer().restore(os.path.join(checkpoints, "2", "state"))
  assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree_util.tree_leaves(state)
             if np.issubdtype(np.asarray(x).dtype, np.floating))
