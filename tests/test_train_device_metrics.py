"""The loop's steady state: the metrics are summed on the device and fetched
only when reported (no device-to-host transfer in the other steps), the next
batch is placed while the step runs, and the reported means are the means of
every step's metrics."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax._src import array as jax_array

from glomo_jax.train import loop
from glomo_jax.train.config import LoopConfig
from glomo_jax.train.task import Task

FETCHES = []            # one entry per array fetched to the host


class Batches:
  """x [4, 2] of eighths (sums and means of them are exact in float32); the
  fetches counted so far recorded at every `next`."""

  def __init__(self):
    self.step, self.fetches_at_next = 0, []

  def __iter__(self):
    return self

  def __next__(self):
    self.fetches_at_next.append(len(FETCHES))
    self.step += 1
    x = (self.step + np.arange(8, dtype=np.float32).reshape(4, 2)) / 8
    return {"x": x, "y": x.sum(1)}

  def first(self, step):
    return (step + 0.0) / 8      # batch[x][0, 0] of `step`

  def state(self):
    return {"step": self.step}

  def restore(self, state):
    self.step = state["step"]


class Toy(Task):
  rng_streams = ()

  def __init__(self):
    self.batches = Batches()

  def init_variables(self, rng):
    return {"params": {"w": jnp.zeros((2,))}}

  def optimizer(self):
    return optax.sgd(0.1)

  def loss(self, variables, batch, rngs):
    err = batch["x"] @ variables["params"]["w"] - batch["y"]
    loss = jnp.mean(err ** 2)
    return loss, {"loss": loss, "first": batch["x"][0, 0]}, {}

  def train_batches(self):
    return self.batches

  def eval_step(self, variables, batch):
    return {}

  def evaluate(self, split, run_eval):
    return {}


class Recorder:
  written: list = []

  def __init__(self, workdir, enabled=True):
    Recorder.written = []

  def scalars(self, step, values, prefix=""):
    Recorder.written.append((step, prefix, dict(values)))

  def close(self):
    pass


@pytest.fixture
def counted_fetches(monkeypatch):
  value = jax_array.ArrayImpl._value

  def fetch(self):
    FETCHES.append(self.shape)
    return value.fget(self)
  FETCHES.clear()
  monkeypatch.setattr(jax_array.ArrayImpl, "_value", property(fetch))
  monkeypatch.setattr(loop, "MetricWriter", Recorder)


def test_metrics_are_fetched_only_at_reports_and_averaged_exactly(tmp_path, counted_fetches):
  task = Toy()
  config = LoopConfig(num_steps=10, log_every=4, checkpoint_every=1000, compile_fast=True)
  summary = loop.run(task, config, str(tmp_path), devices=jax.devices()[:1])
  # The batch of step s+1 is taken right after step s is dispatched, before
  # step s's report: between two takes lie one step's dispatch and the
  # previous step's report. Reports: step 1 (first sign of life), 4, 8.
  at = task.batches.fetches_at_next
  assert len(at) == 10                         # no batch taken after the last step
  between = {s: at[s] - at[s - 1] for s in range(1, 10)}   # report of step s-1 … step s
  reported = {2, 5, 9}
  assert all(between[s] == 0 for s in between if s not in reported), between
  # loss, first, grad_norm, param_norm, lr_scale
  assert all(between[s] == 5 for s in reported), between
  train = {step: values for step, prefix, values in Recorder.written if prefix == "train/"}
  assert sorted(train) == [4, 8, 10]
  for step, first in ((4, 1), (8, 5), (10, 9)):
    steps = range(first, step + 1)
    assert train[step]["first"] == np.mean([task.batches.first(s) for s in steps])
    assert train[step]["lr_scale"] == 1.0
  assert summary["train"] == train[10]
