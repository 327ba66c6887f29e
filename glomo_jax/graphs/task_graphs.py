"""Word graphs of a task's examples, for the GLoMo variants of the task models.

Graphs are model inputs ([B, 2L, K, W, W] per text field, word level, [..,
target, source]); the frozen predictor never receives a gradient. They are
computed once per (export, split, text field, options) into the one graph
cache of the library (`glomo_jax.graphs.cache`, on disk and memory-mapped)
and gathered per batch by the examples' positions in their split
(`TaskGraphs`), or computed per batch by the predictor with no disk cache
(`OnTheFlyGraphs`: each distinct text of a batch once; the cache's values
exactly when it stores float32, within float16 rounding otherwise).
`task_graphs` opens a task's caches with the options of its config's
`TextFields` (the set-up every text kind calls).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from glomo_jax.graphs.cache import WordGraphCache, cached_word_graphs
from glomo_jax.graphs.unit_graphs import text_graphs, word_graphs
from glomo_jax.text.fields import TextFields
from glomo_jax.text.splits import TaskData


class TaskGraphs:
  """The graph caches of a task: one `WordGraphCache` per split and text field.

  Attributes:
    caches: {split: {field: WordGraphCache}}.
    graph_prefix: (2L, K) of every graph.
  """

  def __init__(self, caches: Mapping[str, Mapping[str, WordGraphCache]]):
    self.caches = {s: dict(f) for s, f in caches.items()}
    prefixes = {c.graph_prefix for fields in self.caches.values() for c in fields.values()}
    if len(prefixes) != 1:
      raise ValueError(f"the graph caches disagree on [2L, K]: {sorted(prefixes)}")
    self.graph_prefix = prefixes.pop()

  @classmethod
  def build(cls, root: str, predictor, data: TaskData, max_words: int, *,
            splits: Sequence[str] | None = None, raw_text: bool = True,
            **options) -> "TaskGraphs":
    """Opens (building once per export, dataset and options) the cache of every
    split and text field of `data` under `root`. raw_text: the predictor
    reads each split's raw texts where it has them (`Split.raw`), else the
    words joined by spaces. `options`: those of `cached_word_graphs` (dtype,
    batch_size, ...)."""
    caches = {}
    for name in splits or list(data.splits):
      split = data.splits[name]
      caches[name] = {}
      for f in data.text_fields:
        text = {}
        if raw_text and split.raw is not None:
          text = dict(texts=split.raw[f], word_spans=split.spans[f])
        caches[name][f] = cached_word_graphs(root, predictor, split.texts[f], max_words,
                                             **text, **options)
    return cls(caches)

  def batch(self, split: str, field: str, index: np.ndarray, lengths: np.ndarray,
            length: int) -> np.ndarray:
    """Graphs [B, 2L, K, length, length] of one batch's field, in the
    cache's stored float dtype (float16 by default, and for uint8 levels:
    half the bytes to copy and to send to the device, where the transfer
    reads them in float32).

    index: int [B], the examples' positions in `split` (-1: padding row,
    zeros). lengths: int [B], the words of each example in the batch (checked
    against the cache: a mismatch means another split order or max_words).
    """
    if split not in self.caches or field not in self.caches[split]:
      raise ValueError(f"no graphs for split {split!r} field {field!r}")
    cache = self.caches[split][field]
    index = np.asarray(index)
    real = np.flatnonzero(index >= 0)
    if len(cache) <= int(index.max(initial=-1)):
      raise ValueError(f"the graph cache of {split}/{field} holds {len(cache)} "
                       f"examples; the batch asks for example {int(index.max())}")
    stored = np.asarray(cache.lengths)[index[real]]
    if not np.array_equal(stored, np.asarray(lengths)[real]):
      raise ValueError(f"the graph cache of {split}/{field} does not match the data "
                       f"(words per example {stored.tolist()} vs "
                       f"{np.asarray(lengths)[real].tolist()}): another split order, or "
                       f"max_words differs from the cache's {cache.max_words}")
    dtype = cache.float_dtype              # no conversion on the host
    if len(real) == len(index):
      return cache.get(index, length, dtype)[0]
    out = np.zeros((len(index),) + self.graph_prefix + (length, length), dtype)
    if len(real):
      out[real] = cache.get(index[real], length, dtype)[0]
    return out


def task_graphs(fields: TextFields, predictor, data: TaskData, root: str, max_words: int, *,
                splits: Sequence[str] | None = None, top_k: int | None = None) -> TaskGraphs:
  """The predictor's word graphs of `data` (every split, or `splits`), cut to
  `max_words` and cached under `root` (`TextFields.graph_cache_root`) with
  the cache options of `fields` (dtype, build batch, self-loops, raw or
  space-joined text) and `top_k` (None: dense)."""
  return TaskGraphs.build(root, predictor, data, max_words, splits=splits, top_k=top_k,
                          raw_text=fields.graph_text == "raw", **fields.graph_cache_options())


class OnTheFlyGraphs:
  """`TaskGraphs.batch` computed by the predictor for each batch (no disk cache).

  Args:
    predictor: a loaded `ExportedGraphPredictor`.
    texts: {split: {field: word lists}}: what the batches' indices point into.
    self_loops: see `glomo_jax.graphs.align_graphs`.
    raw: None, or {split: {field: (raw texts, word spans int [n_i, 2])}}
      beside `texts`: the predictor reads those texts as written and its
      pieces go to the words by characters (`align.text_graphs`), as in
      `TaskGraphs.build(raw_text=True)`; fields without them read the
      words joined by spaces.
  """

  def __init__(self, predictor, texts: Mapping[str, Mapping[str, Sequence[Sequence[str]]]],
               self_loops: bool = False, raw: Mapping[str, Mapping[str, tuple]] | None = None):
    self.predictor, self.texts, self.self_loops = predictor, texts, self_loops
    self.raw = raw or {}
    config = predictor.config
    self.graph_prefix = (2 * config.num_graph_layers, config.num_heads)

  def batch(self, split: str, field: str, index: np.ndarray, lengths: np.ndarray,
            length: int) -> np.ndarray:
    """Graphs float32 [B, 2L, K, length, length] of the texts at `index`
    (-1: padding row, zeros), each cut to its `lengths` words; a text that
    several rows share is computed once."""
    index, lengths = np.asarray(index), np.asarray(lengths)
    real = np.flatnonzero(index >= 0)
    out = np.zeros((len(index),) + self.graph_prefix + (length, length), np.float32)
    if len(real):
      unique, first, inverse = np.unique(index[real], return_index=True, return_inverse=True)
      cut = [int(lengths[real][j]) for j in first]
      raw = self.raw.get(split, {}).get(field)
      if raw is None:
        rows = self.texts[split][field]
        graphs = word_graphs(self.predictor, None, [list(rows[i])[:n] for i, n in
                                                    zip(unique, cut)],
                             length, self_loops=self.self_loops)[0]
      else:
        texts, spans = raw
        graphs = text_graphs(self.predictor, None, [texts[i] for i in unique],
                             [np.asarray(spans[i])[:n] for i, n in zip(unique, cut)],
                             length, self_loops=self.self_loops)[0]
      out[real] = graphs[inverse.reshape(-1)]
    return out


class ArcGraphs:
  """`TaskGraphs.batch` from known dependency arcs: the graphs a perfect
  predictor would give (the built-in language's planted arcs; an oracle).

  Every (layer, head) is the same pair of graphs: forward, each dependent
  word reads its sources, G[t, s] = 1 for an arc (t, s); backward, each
  source reads its dependents, G[s, t] = 1; rows normalised, words without
  an arc in a direction have an empty row there.

  Args:
    data: a TaskData whose splits carry `arcs` (the agreement task; the
      verb-number task's gold subject arc or tree, `classification.verb_number`).
    num_layers, num_heads: the [2L, K] of the graphs.
  """

  def __init__(self, data: TaskData, num_layers: int, num_heads: int = 1):
    missing = [n for n, s in data.splits.items() if s.arcs is None]
    if missing:
      raise ValueError(f"graphs from arcs need known arcs; splits {missing} of task "
                       f"{data.task!r} have none (the built-in language has them, and "
                       "verb_number read with an oracle_arcs from gold parses)")
    self.arcs = {n: s.arcs for n, s in data.splits.items()}
    self.num_layers = num_layers
    self.graph_prefix = (2 * num_layers, num_heads)

  def batch(self, split: str, field: str, index: np.ndarray, lengths: np.ndarray,
            length: int) -> np.ndarray:
    """Graphs float32 [B, 2L, K, length, length] of the examples at `index`
    (-1: padding row, zeros), arcs beyond `lengths` words dropped."""
    index, lengths = np.asarray(index), np.asarray(lengths)
    out = np.zeros((len(index), 2, length, length), np.float32)
    for row, (i, n) in enumerate(zip(index, lengths)):
      if i < 0:
        continue
      arcs = np.asarray(self.arcs[split][field][i]).reshape(-1, 2)
      arcs = arcs[(arcs < min(int(n), length)).all(axis=1)]
      out[row, 0, arcs[:, 0], arcs[:, 1]] = 1.0
      out[row, 1, arcs[:, 1], arcs[:, 0]] = 1.0
    total = out.sum(-1, keepdims=True)
    out = np.where(total > 0, out / np.maximum(total, 1), 0)
    layers = np.repeat(out, self.num_layers, axis=1)                # [B, 2L, T, T]
    return np.ascontiguousarray(np.broadcast_to(
        layers[:, :, None], (len(index),) + self.graph_prefix + (length, length)))
