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
`TimedTask.profile` traces training steps and splits their time by part of
the model (Flax module, forward or backward).
"""
from __future__ import annotations

import collections
import functools
import glob
import os
import statistics
import tempfile
import time
from typing import Callable, Sequence

import jax
import numpy as np
from flax import traverse_util

from glomo_jax.train.batches import NumberedBatches
from glomo_jax.train.step import create_state, train_step


class TimedTask:
  """One variant's task, state and compiled programs (module docstring)."""

  def __init__(self, name: str, task, split: str = "train"):
    self.name, self.task, self.split = name, task, split
    self.tx = task.optimizer()
    self.state = jax.jit(functools.partial(create_state, task, self.tx))(jax.random.key(0))
    self.step = jax.jit(functools.partial(train_step, task, self.tx), donate_argnums=(0,))
    self.predict = jax.jit(task.eval_step)
    # tasks whose training batches carry their step (the focused encoder's warm-up)
    self.numbered = isinstance(task.train_batches(), NumberedBatches)

  def _batch(self, indices, batch_size: int) -> dict:
    return self.task.device_batch(self.split, indices, batch_size)

  def _train_batch(self, indices, batch_size: int, step: int) -> dict:
    """A training batch; it carries its 1-based `step` where the loop's do."""
    batch = self._batch(indices, batch_size)
    if self.numbered:
      batch["step"] = np.full(len(batch["weight"]), step, np.int32)
    return batch

  def train(self, order: Sequence, batch_size: int) -> float:
    """Seconds for the training batches `order` (host batches and steps,
    overlapped as in the loop; the last loss fetched)."""
    began = time.perf_counter()
    metrics = None
    for step, indices in enumerate(order, 1):
      self.state, metrics = self.step(self.state, self._train_batch(indices, batch_size, step))
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
    batch = self._train_batch(indices, batch_size, 1)
    analysis = self.step.lower(self.state, batch).compile().memory_analysis()
    return (analysis.temp_size_in_bytes + analysis.argument_size_in_bytes) / 1e9

  def profile(self, order: Sequence, batch_size: int, depth: int = 2) -> dict[str, float]:
    """Host-thread milliseconds per training step by part of the model
    (`profile_step.model_part`: Flax module with parameters, forward or
    backward), from a JAX profiler trace of the steps of the batches in
    `order` that have the commonest shapes (one compiled program, so its
    instructions name the events). On the CPU, the threads' time: more
    than the wall time where they run in parallel."""
    from benchmarks.profile_step import (  # noqa: PLC0415  (imports the step benchmarks)
        attribute, hlo_instructions, model_part)
    batches = [self._train_batch(indices, batch_size, step)
               for step, indices in enumerate(order, 1)]
    shapes = [tuple(x.shape for x in jax.tree.leaves(b)) for b in batches]
    common = collections.Counter(shapes).most_common(1)[0][0]   # ties: the first seen
    batches = [b for b, shape in zip(batches, shapes) if shape == common]
    compiled = self.step.lower(self.state, batches[0]).compile()
    info = hlo_instructions(compiled.as_text())
    modules = {path[:i] for path in traverse_util.flatten_dict(self.state.params)
               for i in range(1, len(path))}
    self.state, metrics = compiled(self.state, batches[0])        # warm
    float(metrics["loss"])
    with tempfile.TemporaryDirectory(prefix="task_trace_") as trace_dir:
      with jax.profiler.trace(trace_dir):
        for batch in batches:
          self.state, metrics = compiled(self.state, batch)
        float(metrics["loss"])
      paths = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)
      found, _, _ = attribute(jax.profiler.ProfileData.from_file(paths[0]), info,
                              jax.default_backend())
    parts = collections.Counter()
    for name, durations in found.items():
      parts[model_part(info[name]["op_name"], modules, depth)] += sum(durations) / 1e6
    return {part: ms / len(batches) for part, ms in parts.most_common()}


def print_profiles(timed: Sequence[TimedTask], order: Sequence, batch_size: int
                   ) -> dict[str, dict[str, float]]:
  """`TimedTask.profile` of each variant's training batches `order`, printed
  as a list per variant; returns {variant: {part: ms per step}}."""
  profiles = {}
  for t in timed:
    profiles[t.name] = parts = t.profile(order, batch_size)
    print(f"\n{t.name}: thread time per training step by part of the model "
          f"({sum(parts.values()):.1f} ms in all)")
    for part, ms in parts.items():
      print(f"{ms:8.1f} ms  {part}")
  return profiles


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
