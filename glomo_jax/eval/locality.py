"""How local a predictor's unit graphs are, as sums a jitted evaluation step
returns and the host adds up over batches.

For graphs [batch, 2L, K, T, T] in `GLoMo.graphs`' layout ([.., target j,
source i]; L forward layers reading i < j, then L backward ones reading
i > j) and the real units' mask [batch, T], each layer gets, over its live
rows (rows with weight, of real targets, every head):

* ``near``: the weight on the adjacent unit in the reading direction
  (G[j, j−1] forward, G[j, j+1] backward);
* ``distance``: the mean source distance Σ_i G[j, i]·|i − j| (in units);
* ``near_uniform`` and ``distance_uniform``: the same for the uniform row
  over the row's allowed sources (real units before j forward, after j
  backward): 1/n_j and the mean of |i − j| over those n_j sources.

A layer whose graphs carry no preference for nearby units has near ≈
near_uniform and distance ≈ distance_uniform.
"""
from __future__ import annotations

from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from glomo_jax.ops.sparse_graph import allowed_sources

SUMS = ("rows", "near", "distance", "near_uniform", "distance_uniform")


def locality_sums(graphs: jax.Array, mask: jax.Array | None) -> dict[str, jax.Array]:
  """Per-layer sums over the live rows (module docstring).

  Args:
    graphs: [batch, 2L, K, T, T].
    mask: [batch, T] (1 = real unit) or None (all real).

  Returns:
    {name: float32 [2L]} for every name of `SUMS` ('rows' counts the live rows).
  """
  b, two_l, _, t, _ = graphs.shape
  mask = jnp.ones((b, t), bool) if mask is None else mask.astype(bool)
  g = graphs.astype(jnp.float32)
  live = ((g.sum(-1) > 0.5) & mask[:, None, None, :]).astype(jnp.float32)   # [B, 2L, K, T]
  idx = jnp.arange(t)
  gap = jnp.abs(idx[None, :] - idx[:, None]).astype(jnp.float32)          # [j, i]
  forward = jnp.arange(two_l) < two_l // 2                                 # [2L]
  near_offset = jnp.where(forward, -1, 1)                                  # [2L]
  near = (idx[None, None, :] == idx[None, :, None] + near_offset[:, None, None])
  fw_allowed = allowed_sources(t, mask)[:, 0].astype(jnp.float32)          # [B, T, T]
  allowed = jnp.where(forward[None, :, None, None], fw_allowed[:, None],
                      jnp.swapaxes(fw_allowed, -1, -2)[:, None])           # [B, 2L, T, T]
  count = jnp.maximum(allowed.sum(-1), 1.0)                                # [B, 2L, T]
  uniform_near = (allowed * near[None]).sum(-1) / count
  uniform_distance = (allowed * gap).sum(-1) / count
  per_row = {
      "near": (g * near[None, :, None]).sum(-1),
      "distance": (g * gap).sum(-1),
      "near_uniform": jnp.broadcast_to(uniform_near[:, :, None], live.shape),
      "distance_uniform": jnp.broadcast_to(uniform_distance[:, :, None], live.shape)}
  out = {name: (value * live).sum(axis=(0, 2, 3)) for name, value in per_row.items()}
  out["rows"] = live.sum(axis=(0, 2, 3))
  return out


def locality_metrics(sums: Mapping[str, np.ndarray]) -> dict[str, float]:
  """Summed `locality_sums` -> {'near_fw1': mean over live rows, ...,
  'distance_uniform_bwL': ...}; a layer without a live row is left out."""
  rows = np.asarray(sums["rows"], np.float64)
  layers = len(rows) // 2
  out = {}
  for name in SUMS[1:]:
    values = np.asarray(sums[name], np.float64)
    for i, total in enumerate(values):
      if rows[i]:
        out[f"{name}_{'fw' if i < layers else 'bw'}{i % layers + 1}"] = float(total / rows[i])
  return out
