"""The training loop's iterator over a split of examples, and its batch order.

`batch_order` lists one epoch's batches of example indices, shuffled
deterministically from (seed, epoch); `ExampleBatches` is the loop's
iterator over a split (`glomo_jax.train.task.Batches`): endless epochs,
resumable from (epoch, step); `NumberedBatches` adds each batch's step. A
split is anything with a length; bucketing by length also needs `texts`
and `lengths(field)` (`text.splits.Split`, `squad.data.SquadSplit`).
`host_rows` cuts a global batch into this process's rows.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

STATE_VERSION = 1


def batch_order(split, batch_size: int, *, shuffle: bool = False, seed: int = 0,
                epoch: int = 0, drop_remainder: bool = False,
                bucket_batches: int = 0, bucket_field: str | None = None
                ) -> list[np.ndarray]:
  """Index arrays of one epoch's batches (deterministic in seed and epoch).

  Args:
    split: the examples.
    batch_size: B.
    shuffle: permute with numpy's default_rng([seed, epoch]).
    drop_remainder: leave out the last, short batch.
    bucket_batches: if > 0 (with shuffle), examples are sorted by length
      (of `bucket_field`, default the first field) within windows of
      bucket_batches · B shuffled examples, cut into batches, and the batches
      shuffled: less padding, same randomness source.
  """
  if batch_size < 1:
    raise ValueError(f"batch_size must be >= 1, got {batch_size}")
  n = len(split)
  if not shuffle:
    order = np.arange(n)
    batches = [order[i:i + batch_size] for i in range(0, n, batch_size)]
  else:
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(n)
    if bucket_batches > 0:
      field = bucket_field or next(iter(split.texts))
      lengths = split.lengths(field)
      window = bucket_batches * batch_size
      chunks = []
      for start in range(0, n, window):
        part = order[start:start + window]
        chunks.append(part[np.argsort(lengths[part], kind="stable")])
      order = np.concatenate(chunks) if chunks else order
    batches = [order[i:i + batch_size] for i in range(0, n, batch_size)]
    if bucket_batches > 0:
      batches = [batches[i] for i in rng.permutation(len(batches))]
  if drop_remainder:
    batches = [b for b in batches if len(b) == batch_size]
  return batches


def host_rows(batch: Mapping[str, np.ndarray], process_index: int,
              process_count: int) -> dict[str, np.ndarray]:
  """Process `process_index`'s rows of a global batch: the p-th of
  `process_count` equal blocks of the leading axis."""
  size = len(next(iter(batch.values())))
  if size % process_count:
    raise ValueError(f"a global batch of {size} rows cannot be split over "
                     f"{process_count} processes")
  rows = slice(process_index * size // process_count,
               (process_index + 1) * size // process_count)
  return {k: v[rows] for k, v in batch.items()}


class ExampleBatches:
  """Endless shuffled epochs of a split's batches; the training loop's
  iterator (`glomo_jax.train.task.Batches`).

  Epoch e visits `batch_order(split, batch_size, shuffle=True, seed=seed,
  epoch=e, drop_remainder=..., bucket_batches=...)`; the last, short batch
  is dropped unless the split is smaller than one batch. Each batch is
  `make(indices)`. `state()` / `restore()` hold (epoch, step) and the
  settings that must match.
  """

  def __init__(self, split, batch_size: int, make: Callable[[np.ndarray], dict], *,
               seed: int = 0, bucket_batches: int = 0):
    if len(split) == 0:
      raise ValueError("empty training split")
    self.split, self.batch_size, self.make = split, batch_size, make
    self.seed, self.bucket_batches = seed, bucket_batches
    self.drop_remainder = len(split) >= batch_size
    self.batches_per_epoch = len(batch_order(split, batch_size,
                                             drop_remainder=self.drop_remainder))
    self.epoch = self.step = 0
    self._order_epoch, self._order = -1, []

  def __iter__(self):
    return self

  def _epoch_order(self, epoch: int) -> list[np.ndarray]:
    if epoch != self._order_epoch:
      self._order = batch_order(self.split, self.batch_size, shuffle=True, seed=self.seed,
                                epoch=epoch, drop_remainder=self.drop_remainder,
                                bucket_batches=self.bucket_batches)
      self._order_epoch = epoch
    return self._order

  def __next__(self) -> dict:
    indices = self._epoch_order(self.epoch)[self.step]
    self.step += 1
    if self.step == self.batches_per_epoch:
      self.epoch, self.step = self.epoch + 1, 0
    return self.make(indices)

  def _settings(self) -> dict:
    return {"seed": self.seed, "batch_size": self.batch_size, "examples": len(self.split),
            "bucket_batches": self.bucket_batches}

  def state(self) -> dict:
    return {"version": STATE_VERSION, "epoch": self.epoch, "step": self.step,
            **self._settings()}

  def restore(self, state: Mapping[str, Any]) -> None:
    """Continues from `state()` of an iterator with the same settings."""
    mismatch = {k: (state.get(k), v) for k, v in self._settings().items()
                if state.get(k) != v}
    if state.get("version") != STATE_VERSION or mismatch:
      raise ValueError(f"the checkpoint's data position does not fit this data "
                       f"(checkpoint, now): {mismatch or state.get('version')}; rerun with "
                       "the run's original data settings, or in a new --workdir")
    self.epoch, self.step = int(state["epoch"]), int(state["step"])


class NumberedBatches:
  """`ExampleBatches` whose batches each carry 'step' int32 [rows]: the
  1-based training step it is drawn for (the batches drawn so far, so a
  resumed run numbers them as the straight run does). The focused encoder's
  sparsity warm-up reads it (the picking task, SQuAD's focused passage
  encoder)."""

  def __init__(self, batches: ExampleBatches):
    self.batches = batches

  def __iter__(self):
    return self

  def __next__(self) -> dict:
    batch = next(self.batches)
    b = self.batches
    rows = len(next(iter(batch.values())))
    batch["step"] = np.full(rows, b.epoch * b.batches_per_epoch + b.step, np.int32)
    return batch

  def state(self) -> dict:
    return self.batches.state()

  def restore(self, state: Mapping[str, Any]) -> None:
    self.batches.restore(state)
