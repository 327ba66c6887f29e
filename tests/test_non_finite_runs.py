"""Every downstream run kind (classification, SQuAD, CIFAR, pixel
pretraining) stops on a non-finite loss with a one-line error naming its
last good checkpoint, which stays finite and intact, as do results.json and
the best variables (pretraining: tests/test_train_resume.py).

Each case trains 2 steps, then resumes for 2 more with the task's loss
multiplied by NaN (a patched `loss`: the NaN flows through the compiled
step, its gradients and the update)."""
import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from experiments import cli
from glomo_jax.images.cifar import CifarTask, run_cifar
from glomo_jax.images.pretraining import PixelPretrainingTask, pretrain_images
from glomo_jax.squad.config import SquadConfig, SquadFiles
from glomo_jax.squad.run import run_squad
from glomo_jax.squad.task import SquadTask
from glomo_jax.tasks import run_transfer
from glomo_jax.tasks.classification import ClassificationTask
from glomo_jax.train import NonFiniteLossError
from test_cifar import config_for as cifar_config
from test_cifar import write_cifar
from test_images_pretraining import config_for as pixel_config
from test_images_pretraining import write_images
from test_squad_parts import write_squad
from test_squad_run import TINY_OPTIM, TINY_READER
from test_tasks_classification import imdb_config

ONE = jax.devices()[:1]


def with_steps(optim, steps):
  return dataclasses.replace(optim, steps=steps, epochs=None, eval_every=2, log_every=1,
                             patience=None, schedule="constant")


def classification(tmp_path, steps):
  config = imdb_config(tmp_path)
  return ClassificationTask, lambda w: run_transfer(
      config.replace(optim=with_steps(config.optim, steps)), w, devices=ONE)


def squad(tmp_path, steps):
  config = SquadConfig(files=SquadFiles(train=write_squad(tmp_path / "train.json")),
                       val_questions=5, length_multiple=8, model=TINY_READER,
                       optim=with_steps(TINY_OPTIM, steps), compile_fast=True)
  return SquadTask, lambda w: run_squad(config, w, devices=ONE)


def cifar(tmp_path, steps):
  config = cifar_config(write_cifar(tmp_path / "cifar.npz"))
  return CifarTask, lambda w: run_cifar(
      config.replace(optim=with_steps(config.optim, steps)), w, devices=ONE)


def pixels(tmp_path, steps):
  config = pixel_config(write_images(tmp_path / "images.npz"), num_steps=steps)
  return PixelPretrainingTask, lambda w: pretrain_images(config, w, devices=ONE)


def nan_loss(task_class, monkeypatch) -> None:
  original = task_class.loss

  def loss(self, variables, batch, rngs):
    value, metrics, batch_stats = original(self, variables, batch, rngs)
    return value * jnp.nan, dict(metrics, loss=value * jnp.nan), batch_stats
  monkeypatch.setattr(task_class, "loss", loss)


def saved_steps(directory) -> list[int]:
  return sorted(int(d) for d in os.listdir(directory) if d.isdigit())


def snapshot(workdir) -> dict[str, bytes]:
  """Every file a run wrote that must survive a later failure."""
  out = {}
  for root, _, names in os.walk(workdir):
    for name in names:
      path = os.path.join(root, name)
      if any(part in path for part in ("/checkpoints/", "/best/", "/export/")) or \
          name == "results.json":
        with open(path, "rb") as f:
          out[os.path.relpath(path, workdir)] = f.read()
  return out


@pytest.mark.parametrize("kind", [classification, squad, cifar, pixels],
                         ids=lambda f: f.__name__)
def test_a_non_finite_loss_stops_the_run_and_keeps_what_it_wrote(tmp_path, monkeypatch,
                                                                 kind):
  workdir = str(tmp_path / "run")
  task_class, run = kind(tmp_path, 2)
  run(workdir)
  before = snapshot(workdir)
  checkpoints = os.path.join(workdir, "checkpoints")
  assert saved_steps(checkpoints) == [2]
  task_class, run = kind(tmp_path, 4)
  nan_loss(task_class, monkeypatch)
  with pytest.raises(NonFiniteLossError) as error:
    run(workdir)
  message = cli.one_line(error.value)
  assert message == str(error.value) and isinstance(error.value, cli.user_errors())
  assert "step 3" in message and f"last good checkpoint is step 2 in {checkpoints}" in message
  assert saved_steps(checkpoints) == [2] and snapshot(workdir) == before
  state = ocp.StandardCheckpointer().restore(os.path.join(checkpoints, "2", "state"))
  assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree_util.tree_leaves(state)
             if np.issubdtype(np.asarray(x).dtype, np.floating))
