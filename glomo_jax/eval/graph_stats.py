"""How peaked and how local learned word graphs are, against a uniform graph.

For graphs [B, 2L, K, W, W] ([.., target row j, source column i]; the L
forward layers, then the L backward ones) and the word mask [B, W], each layer
gets, over the rows of real words of every head:

* ``empty``: the share of rows with no weight (every source under the
  learned threshold, or none allowed);
* over the other rows (each sums to 1): ``entropy`` −Σ_i G[j,i] ln G[j,i] in
  nats, ``self`` G[j,j], ``adjacent`` G[j,j−1] + G[j,j+1], ``distance``
  Σ_i G[j,i]·|i − j| (in words), and, row by row against the uniform graph
  over the same row's allowed sources (words i < j forward, i > j backward;
  with ``self_loops=True``, for word graphs that keep the weight between
  pieces of one word on the diagonal, i ≤ j and i ≥ j),
  ``entropy_gap`` = ln(allowed) − entropy (0: no better than uniform) and
  ``uniform_distance`` (that uniform row's mean distance).

`uniform_reference` gives the statistics of those uniform graphs themselves
(all rows of real words).
"""
from __future__ import annotations

import numpy as np


def _allowed(mask: np.ndarray, forward: bool, self_loops: bool) -> np.ndarray:
  """bool [B, W, W]: source i allowed for target j (both real words)."""
  w = mask.shape[-1]
  diagonal = 0 if self_loops else 1
  direction = (np.tril(np.ones((w, w), bool), -diagonal) if forward
               else np.triu(np.ones((w, w), bool), diagonal))
  return mask[:, :, None] & mask[:, None, :] & direction


def _row_stats(graphs: np.ndarray, valid: np.ndarray, allowed: np.ndarray) -> dict:
  """graphs [N, W, W] rows summing to 1 or 0; valid bool [N, W] (real rows);
  allowed bool [N, W, W] (the uniform reference's sources)."""
  w = graphs.shape[-1]
  full = valid & (graphs.sum(-1) > 0.5)
  entropy = -(graphs * np.log(np.where(graphs > 0, graphs, 1.0))).sum(-1)
  idx = np.arange(w)
  gap = np.abs(idx[None, :] - idx[:, None])                    # [j, i] = |i − j|
  count = allowed.sum(-1)
  uniform_distance = (allowed * gap).sum(-1) / np.maximum(count, 1)
  n = max(int(full.sum()), 1)

  def mean(x):
    return float(x[full].sum() / n)
  return {"empty": float(1 - full.sum() / max(int(valid.sum()), 1)),
          "entropy": mean(entropy),
          "self": mean(np.diagonal(graphs, axis1=-2, axis2=-1)),
          "adjacent": mean((graphs * (gap == 1)).sum(-1)),
          "distance": mean((graphs * gap).sum(-1)),
          "entropy_gap": mean(np.log(np.maximum(count, 1)) - entropy),
          "uniform_distance": mean(uniform_distance),
          "rows": int(full.sum())}


def graph_statistics(graphs: np.ndarray, mask: np.ndarray, self_loops: bool = False
                     ) -> list[dict]:
  """Per layer (2L entries, forward layers first) statistics; module docstring.

  Args:
    graphs: [B, 2L, K, W, W], rows summing to 1 or 0.
    mask: bool [B, W], True for real words.
    self_loops: the graphs may put weight on the diagonal (module docstring).
  """
  graphs = np.asarray(graphs, np.float64)
  mask = np.asarray(mask, bool)
  if graphs.ndim != 5 or graphs.shape[-1] != graphs.shape[-2] or graphs.shape[1] % 2:
    raise ValueError(f"graphs must be [B, 2L, K, W, W], got {graphs.shape}")
  if mask.shape != (graphs.shape[0], graphs.shape[-1]):
    raise ValueError(f"mask must be [B, W] = {(graphs.shape[0], graphs.shape[-1])}, "
                     f"got {mask.shape}")
  b, layers, heads, w, _ = graphs.shape
  valid = np.repeat(mask, heads, axis=0)                        # [B·K, W], b-major
  out = []
  for layer in range(layers):
    allowed = np.repeat(_allowed(mask, layer < layers // 2, self_loops), heads, axis=0)
    out.append(_row_stats(graphs[:, layer].reshape(-1, w, w), valid, allowed))
  return out


def uniform_reference(mask: np.ndarray, self_loops: bool = False) -> dict[str, dict]:
  """{'forward', 'backward'}: the statistics of the uniform graphs over the
  allowed sources (i < j / i > j; i ≤ j / i ≥ j with self_loops) of the same
  texts."""
  mask = np.asarray(mask, bool)
  out = {}
  for name, forward in (("forward", True), ("backward", False)):
    allowed = _allowed(mask, forward, self_loops)
    g = allowed / np.maximum(allowed.sum(-1, keepdims=True), 1)
    out[name] = _row_stats(g, mask, allowed)
  return out


def row_health(live_rows: np.ndarray, real_rows: float) -> dict[str, float]:
  """Dead heads and empty rows of a predictor, per graph layer.

  Args:
    live_rows: [2L, K] rows with weight (summed over texts and target tokens),
      forward layers first.
    real_rows: the number of target tokens those rows were counted over.

  Returns:
    {'empty_rows_fw1': share of empty rows of forward layer 1 over its K
    heads, 'dead_heads_fw1': heads of that layer with no live row, ...,
    'empty_rows_bw1', ...}. The first token of a window has no source
    forward (the last none backward), so the share is at least 1/T.
  """
  live_rows = np.asarray(live_rows, np.float64)
  if live_rows.ndim != 2 or live_rows.shape[0] % 2:
    raise ValueError(f"live_rows must be [2L, K], got {live_rows.shape}")
  layers, heads = live_rows.shape[0] // 2, live_rows.shape[1]
  out = {}
  for i, row in enumerate(live_rows):
    name = f"{'fw' if i < layers else 'bw'}{i % layers + 1}"
    out[f"empty_rows_{name}"] = float(1 - row.sum() / max(heads * real_rows, 1))
    out[f"dead_heads_{name}"] = float((row == 0).sum())
  return out
