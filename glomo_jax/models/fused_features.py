"""The top-layer start states of the pretraining loss with the fused graph
kernel (`ModelConfig.kernels` 'fused_graph' or 'fused'): what
`models.glomo.top_features_at` computes, with each layer's graph mixed into
the features by `ops.pallas.graph_mix.fused_graph_mix` instead of formed as a
[batch, K, T, T] array and then mixed.

Only the loss's training path goes through here. `GLoMo.graphs` and
`GLoMo.features`, the export and the transfer form the dense graphs, and
`PixelGLoMo` runs the reference ops (it refuses other `kernels`).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from glomo_jax.ops.pallas.graph_mix import fused_graph_mix


def fused_top_features_at(graph, feats, emb, mask, train: bool, positions) -> jax.Array:
  """Top-layer features F^L at `positions` only (`top_features_at`'s
  arguments and result): [batch, n, d].

  graph, feats: the direction's GraphPredictor and FeaturePredictor (bound).
  emb: [batch, T, d] in reading order; mask: optional [batch, T]; positions:
  int [n] rows of the top layer.
  """
  (q, k, theta), (q_top, k_top, theta_top) = graph.split_heads(emb, mask, train, positions)
  h = emb
  for layer in range(q.shape[1]):
    h = feats.compose(layer, h, functools.partial(
        _mix, q[:, layer], k[:, layer], _layer(theta, layer), None, mask))
  return feats.compose(q.shape[1], h, functools.partial(
      _mix, q_top[:, 0], k_top[:, 0], _layer(theta_top, 0), positions, mask), rows=positions)


def _layer(theta, layer):
  """θ of one layer of `GraphPredictor.head_inputs`' thresholds: [b, K, R, 1],
  [1, 1, 1, 1] or 0-d."""
  return theta[:, layer] if theta.ndim else theta


def _mix(q, k, theta, rows, mask, values):
  """One layer: q [b, K, R, H], k [b, K, T, H], θ broadcastable to
  [b, K, R, 1], values [b, T, d] -> [b, R, d]."""
  b, heads, r, _ = q.shape
  theta = jnp.broadcast_to(jnp.reshape(theta, theta.shape[:3]) if theta.ndim else theta,
                           (b, heads, r))
  return fused_graph_mix(q, k, theta, values, rows, mask)
