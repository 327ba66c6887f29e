"""The top-layer start states of the pretraining loss with the fused graph
kernel (`ModelConfig.kernels` 'fused_graph' or 'fused'): what
`models.glomo.top_features_at` computes, with each layer's graph mixed into
the features by `ops.pallas.graph_mix.fused_graph_mix` instead of formed as a
[batch, K, T, T] array and then mixed.

Each layer's per-head queries and keys ([batch, K, T, H] each) are projected
inside a rematerialised block (`graph_mix.RECOMPUTE_INPUTS`): the backward
pass projects them again from the key and query features it keeps anyway
(for the projection's own gradient) instead of holding them. With the
paper's 8 heads of 256 on d 512 they are 4× the features' width, larger
than the [K, T, T] graph they replace at T 200; recomputing costs the two
projections' forward FLOPs again, and keeps the kernel's outputs m and z, so
the forward kernel itself is not rerun (docs/tpu.md has the bytes it saves).

Only the loss's training path goes through here. `GLoMo.graphs` and
`GLoMo.features`, the export and the transfer form the dense graphs, and
`PixelGLoMo` runs the reference ops (it refuses other `kernels`).
"""
from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from glomo_jax.ops.pallas.graph_mix import RECOMPUTE_INPUTS, fused_graph_mix


def fused_top_features_at(graph, feats, emb, mask, train: bool, positions) -> jax.Array:
  """Top-layer features F^L at `positions` only (`top_features_at`'s
  arguments and result): [batch, n, d].

  graph, feats: the direction's GraphPredictor and FeaturePredictor (bound).
  emb: [batch, T, d] in reading order; mask: optional [batch, T]; positions:
  int [n] rows of the top layer.
  """
  keys, queries = graph.head_features(emb, mask, train)
  last = graph.config.num_graph_layers - 1
  h = emb
  for layer in range(last):
    h = feats.compose(layer, h, functools.partial(
        _layer_mix(layer, top=False), graph, keys, queries, None, mask))
  return feats.compose(last, h, functools.partial(
      _layer_mix(last, top=True), graph, keys, queries, positions, mask), rows=positions)


def _layer_mix(layer: int, top: bool):
  """The graph mixing of layer `layer` as a rematerialised function
  (graph, keys, queries, rows, mask, values) -> [batch, R, d]: keys and
  queries [batch, T, d] the graph predictor's features, rows int [n] or
  None (R = T), values [batch, T, d]."""
  def mix(graph, keys, queries, rows, mask, values):
    q, k, theta = graph.head_inputs(keys, queries, slice(layer, layer + 1),
                                    rows if top else None)
    b, heads, r = q.shape[0], q.shape[2], q.shape[3]
    theta = theta[:, 0] if theta.ndim else theta            # [b, K, R, 1], [1, 1, 1, 1] or 0-d
    theta = jnp.broadcast_to(jnp.reshape(theta, theta.shape[:3]) if theta.ndim else theta,
                             (b, heads, r))
    return fused_graph_mix(q[:, 0], k[:, 0], theta, values, rows, mask)
  return nn.checkpoint(mix, policy=RECOMPUTE_INPUTS)
