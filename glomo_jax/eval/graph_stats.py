"""How peaked and how local learned graphs are, against a uniform graph.

For graphs [B, 2L, K, W, W] ([.., target row j, source column i]; the L
forward layers, then the L backward ones) and the word mask [B, W], each layer
gets, over the rows of real words of every head:

* ``empty``: the share of rows with no weight (every source below the
  threshold; always the first word of a forward graph);
* over the other rows (each sums to 1): ``entropy`` −Σ_i G[j,i] ln G[j,i] in
  nats, ``self`` G[j,j], ``adjacent`` G[j,j−1] + G[j,j+1] and
  ``distance`` Σ_i G[j,i]·|i − j| (in words).

`uniform_reference` gives the same numbers for the uniform graph over the
earlier words (forward; the later ones backward) of the same texts: a graph
that knows nothing but the direction.
"""
from __future__ import annotations

import numpy as np


def _row_stats(graphs: np.ndarray, valid: np.ndarray) -> dict:
  """graphs [N, W, W] rows summing to 1 or 0; valid bool [N, W] (real rows)."""
  w = graphs.shape[-1]
  sums = graphs.sum(-1)
  full = valid & (sums > 0.5)
  safe = np.where(graphs > 0, graphs, 1.0)
  entropy = -(graphs * np.log(safe)).sum(-1)
  idx = np.arange(w)
  gap = np.abs(idx[None, :] - idx[:, None])                    # [j, i] = |i − j|
  distance = (graphs * gap).sum(-1)
  self_w = np.diagonal(graphs, axis1=-2, axis2=-1)
  adjacent = (graphs * (gap == 1)).sum(-1)
  n = max(int(full.sum()), 1)
  return {"empty": float(1 - full.sum() / max(int(valid.sum()), 1)),
          "entropy": float(entropy[full].sum() / n),
          "self": float(self_w[full].sum() / n),
          "adjacent": float(adjacent[full].sum() / n),
          "distance": float(distance[full].sum() / n),
          "rows": int(full.sum())}


def graph_statistics(graphs: np.ndarray, mask: np.ndarray) -> list[dict]:
  """Per layer (2L entries, forward layers first) statistics; module docstring.

  Args:
    graphs: [B, 2L, K, W, W], rows summing to 1 or 0.
    mask: bool [B, W], True for real words.
  """
  graphs = np.asarray(graphs, np.float64)
  mask = np.asarray(mask, bool)
  if graphs.ndim != 5 or graphs.shape[-1] != graphs.shape[-2]:
    raise ValueError(f"graphs must be [B, 2L, K, W, W], got {graphs.shape}")
  if mask.shape != (graphs.shape[0], graphs.shape[-1]):
    raise ValueError(f"mask must be [B, W] = {(graphs.shape[0], graphs.shape[-1])}, "
                     f"got {mask.shape}")
  b, layers, heads, w, _ = graphs.shape
  valid = np.broadcast_to(mask[:, None, :], (b, heads, w)).reshape(-1, w)
  return [_row_stats(graphs[:, layer].reshape(-1, w, w), valid) for layer in range(layers)]


def uniform_reference(mask: np.ndarray) -> dict[str, dict]:
  """{'forward', 'backward'}: the statistics of uniform graphs over earlier /
  later words of the same texts (rows with no such word are empty)."""
  mask = np.asarray(mask, bool)
  w = mask.shape[-1]
  pair = mask[:, :, None] & mask[:, None, :]
  out = {}
  for name, allowed in (("forward", np.tril(np.ones((w, w), bool), -1)),
                        ("backward", np.triu(np.ones((w, w), bool), 1))):
    g = (pair & allowed).astype(np.float64)
    g /= np.maximum(g.sum(-1, keepdims=True), 1)
    out[name] = _row_stats(g, mask)
  return out
