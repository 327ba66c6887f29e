"""How peaked and how local graphs between pixels are, against a uniform graph.

For graphs [B, 2L, K, H·W, H·W] over raster positions t = r·W + c
([.., target row, source column]; the L forward layers, then the L backward
ones, all in the image's own raster order), each layer gets, over every
head's rows:

* ``empty``: the share of rows with no weight (every source under the learned
  threshold; the first pixel of a direction has no source at all);
* ``dead_heads``: heads whose rows are empty in every image;
* over the other rows (each sums to 1): ``entropy`` in nats and
  ``entropy_gap`` = ln(allowed) − entropy against the uniform graph over the
  row's allowed sources (earlier pixels forward, later ones backward);
  ``distance``, the mean Euclidean distance in pixels from target to source
  (Σ_i G[t,i]·‖p_i − p_t‖), and ``neighbours``, the weight on the 8 pixels
  around the target; ``uniform_distance`` and ``uniform_neighbours`` are the
  same for that uniform row.
"""
from __future__ import annotations

import numpy as np


def _geometry(image_shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
  """[T, T] distances ‖p_i − p_t‖ and 8-neighbour indicators ([target, source])."""
  h, w = image_shape
  r, c = np.divmod(np.arange(h * w), w)
  dr, dc = r[:, None] - r[None, :], c[:, None] - c[None, :]
  near = (np.abs(dr) <= 1) & (np.abs(dc) <= 1) & ((dr != 0) | (dc != 0))
  return np.sqrt(dr ** 2 + dc ** 2), near


def pixel_graph_statistics(graphs: np.ndarray, image_shape: tuple[int, int]) -> list[dict]:
  """Per layer (2L entries, forward first) statistics; module docstring.

  Args:
    graphs: [B, 2L, K, H·W, H·W], rows summing to 1 or 0.
    image_shape: (H, W).
  """
  graphs = np.asarray(graphs, np.float64)
  h, w = image_shape
  if graphs.ndim != 5 or graphs.shape[-2:] != (h * w, h * w) or graphs.shape[1] % 2:
    raise ValueError(f"graphs must be [B, 2L, K, H·W, H·W] with H·W = {h}·{w}, "
                     f"got {graphs.shape}")
  distance, near = _geometry(image_shape)
  layers = graphs.shape[1]
  out = []
  for layer in range(layers):
    strict = np.tril if layer < layers // 2 else np.triu
    allowed = strict(np.ones((h * w, h * w), bool), k=-1 if layer < layers // 2 else 1)
    count = allowed.sum(-1)                                       # [T]
    uniform = allowed / np.maximum(count, 1)[:, None]
    x = graphs[:, layer]                                          # [B, K, T, T]
    full = x.sum(-1) > 0.5                                        # [B, K, T]
    entropy = -(x * np.log(np.where(x > 0, x, 1.0))).sum(-1)
    has = count > 0

    def mean(values):
      return float(values[full].mean()) if full.any() else float("nan")
    out.append({
        "empty": float(1 - full.mean()),
        "dead_heads": int((~full.any(axis=(0, 2))).sum()),
        "entropy": mean(entropy),
        "entropy_gap": mean(np.log(np.maximum(count, 1))[None, None] - entropy),
        "distance": mean((x * distance).sum(-1)),
        "neighbours": mean((x * near).sum(-1)),
        "uniform_distance": float((uniform * distance).sum(-1)[has].mean()),
        "uniform_neighbours": float((uniform * near).sum(-1)[has].mean()),
        "rows": int(full.sum())})
  return out
