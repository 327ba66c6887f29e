"""Where a trained picking reader reads, span by span
(`experiments.picking_spans`).

On sequences of one length — longer than the reader was trained on, to see
why it fails there — asked one question k: the accuracy and, in each span
of positions, the gate openness (the share of the span's digits the upper
layer read; 1 for the baselines, which read every digit) and the
attention's mass (the answer's weight on the span, summed over it and
averaged over the sequences; the spans' masses add to 1, less where a
sequence opens no gate and its attention reads nothing). The spans
(`span_edges`): the k digits the answer counts, the rest of the trained
length, then doubling spans to the end. A reader that generalises keeps its
mass on the first; one that does not leaks it into the untrained tail,
where a handful of open gates among thousands of digits can take most of it.

* `read_picking_config(workdir)`, `load_picking_run(workdir)`: a picking
  run's config, and its best variables.
* `SpanReader(config, variables).read(data, edges)`: the figures above,
  with the run's own evaluation (`PickingTask.eval_step`: its test gate,
  its batches and their sampled gates' keys); one compile per length.
"""
from __future__ import annotations

import json
import os

import jax
import numpy as np

from glomo_jax.downstream.best import abstract_variables, restore_best
from glomo_jax.focused.config import PickingConfig
from glomo_jax.focused.model import PickingReader
from glomo_jax.focused.picking import PickingSet
from glomo_jax.focused.task import PickingTask
from glomo_jax.train.run_config import CONFIG_FILE


def read_picking_config(workdir: str) -> PickingConfig:
  """The config.json of an `experiments.picking` run's workdir.

  Raises:
    FileNotFoundError: not a picking run's workdir.
    ValueError: a config.json of another kind of run (naming the file).
  """
  path = os.path.join(workdir, CONFIG_FILE)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{workdir} is not a picking run (no {CONFIG_FILE}): pass the "
                            "--workdir of experiments.picking")
  with open(path, encoding="utf-8") as f:
    try:
      return PickingConfig.from_dict(json.load(f))
    except (TypeError, ValueError) as e:
      raise ValueError(f"{path}: not a picking run's config ({str(e).splitlines()[0]})"
                       ) from e


def load_picking_run(workdir: str) -> tuple[PickingConfig, dict]:
  """(config, best variables) of an `experiments.picking` run's workdir:
  `read_picking_config`, then <workdir>/best (`restore_best`: the step
  results.json names, or the newest best of a run still training).

  Raises:
    FileNotFoundError: not a picking run's workdir, or no best variables yet.
    ValueError: a config.json of another kind of run, or variables that do
      not fit the reader it describes.
  """
  config = read_picking_config(workdir)
  abstract = abstract_variables(config.model.reader(), *PickingReader.example_inputs())
  return config, restore_best(workdir, abstract, "the reader")


def span_edges(k: int, trained: int, length: int) -> list[int]:
  """0-based span boundaries [0, k, trained, 2·trained, 4·trained, …,
  length] (each kept once, none past `length`): span i holds positions
  edges[i] + 1 .. edges[i + 1], counted from 1."""
  if not 1 <= k <= trained <= length:
    raise ValueError(f"need 1 <= k <= trained <= length, got k={k}, trained={trained}, "
                     f"length={length}")
  edges = {0, k, length}
  n = trained
  while n < length:
    edges.add(n)
    n *= 2
  return sorted(edges)


class SpanReader:
  """A picking run's reader (`config`, `variables`) reading sets span by
  span (module docstring)."""

  def __init__(self, config: PickingConfig, variables: dict):
    self.config, self.variables = config, variables
    self._task = self._step = None

  def read(self, data: PickingSet, edges: list[int]) -> dict:
    """The module docstring's figures on `data` (sequences of one length L;
    any k), in the spans between `edges` (0 = e_0 < e_1 < … = L).

    Returns {'accuracy', 'examples', 'spans': [{'first', 'last' (positions,
    from 1), 'openness', 'attention'}]} (fractions).
    """
    lengths = set(np.asarray(data.lengths).tolist())
    if len(lengths) != 1:
      raise ValueError(f"SpanReader.read needs sequences of one length, got "
                       f"{sorted(lengths)[:5]}")
    length = lengths.pop()
    if edges[0] != 0 or edges[-1] != length or any(a >= b for a, b in zip(edges, edges[1:])):
      raise ValueError(f"edges must rise from 0 to the length {length}, got {edges}")
    if self._task is None:               # one task and one jitted step: a compile per length
      self._task = PickingTask(self.config, {"train": data})
      self._step = jax.jit(self._task.eval_step)
    self._task.splits["spans"] = data
    scores, sums = self._task.split_sums("spans",
                                         lambda batch: self._step(self.variables, batch))
    count = scores["examples"]
    gate = np.asarray(sums["gate_at"], np.float64) / count     # [L] share open at t
    focus = np.asarray(sums["focus_at"], np.float64) / count   # [L] mean attention at t
    return {"accuracy": scores["accuracy"], "examples": int(count),
            "spans": [{"first": lo + 1, "last": hi, "openness": float(gate[lo:hi].mean()),
                       "attention": float(focus[lo:hi].sum())}
                      for lo, hi in zip(edges, edges[1:])]}
