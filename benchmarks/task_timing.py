"""Timing a downstream task's training step and prediction as the loop runs
them, for the transfer benchmarks (`transfer_speed.py`, `squad_speed.py`).

`TimedTask` wraps any task of the training loop (`glomo_jax.train.task.Task`:
`ClassificationTask`, `SquadTask`): its state comes from the loop's
`create_state`, its step is the loop's `train_step` (forward, backward, the
task's optimiser) jitted with the state donated, its prediction the task's
`eval_step`. Timed training batches are what the loop does: build the
batch on the host (`task.device_batch`: words, and for the graph variants
the word graphs gathered from the disk cache) and dispatch the step, so the
next batch is built while the step runs; the clock stops when the last
step's loss is on the host. Predictions fetch each batch's result.
"""
from __future__ import annotations

import functools
import statistics
import time
from typing import Callable, Sequence

import jax

from glomo_jax.train.step import create_state, train_step


class TimedTask:
  """One variant's task, state and compiled programs (module docstring)."""

  def __init__(self, name: str, task, split: str = "train"):
    self.name, self.task, self.split = name, task, split
    self.tx = task.optimizer()
    self.state = jax.jit(functools.partial(create_state, task, self.tx))(jax.random.key(0))
    self.step = jax.jit(functools.partial(train_step, task, self.tx), donate_argnums=(0,))
    self.predict = jax.jit(task.eval_step)

  def _batch(self, indices, batch_size: int) -> dict:
    return self.task.device_batch(self.split, indices, batch_size)

  def train(self, order: Sequence, batch_size: int) -> float:
    """Seconds for the training batches `order` (host batches and steps,
    overlapped as in the loop; the last loss fetched)."""
    began = time.perf_counter()
    metrics = None
    for indices in order:
      self.state, metrics = self.step(self.state, self._batch(indices, batch_size))
    float(metrics["loss"])
    return time.perf_counter() - began

  def answer(self, order: Sequence, batch_size: int) -> float:
    """Seconds for predicting the batches `order` (host batch + forward + fetch)."""
    began = time.perf_counter()
    for indices in order:
      jax.device_get(self.predict(self.state.variables, self._batch(indices, batch_size)))
    return time.perf_counter() - began

  def step_memory_gb(self, indices, batch_size: int) -> float:
    """XLA's buffers (temporaries + arguments) of the compiled training step
    on the batch `indices`, GB."""
    batch = self._batch(indices, batch_size)
    analysis = self.step.lower(self.state, batch).compile().memory_analysis()
    return (analysis.temp_size_in_bytes + analysis.argument_size_in_bytes) / 1e9


def alternate(timed: Sequence[TimedTask], rounds: int,
              measure: dict[str, Callable[[TimedTask], float]]) -> dict:
  """Runs every measure of every variant once untimed (compiles each shape),
  then `rounds` rounds, the variants in turn (reversed every other round).
  Returns {variant: {measure: [seconds per round]}}."""
  for t in timed:
    for fn in measure.values():
      fn(t)
  times = {t.name: {m: [] for m in measure} for t in timed}
  for r in range(rounds):
    for t in timed if r % 2 == 0 else timed[::-1]:
      for m, fn in measure.items():
        times[t.name][m].append(fn(t))
  return times


def rate(count: int, seconds: Sequence[float]) -> float:
  """`count` items over the median of `seconds`."""
  return count / statistics.median(seconds)
