"""The top-layer start states of the pretraining loss with the fused graph
kernel (`ModelConfig.kernels` 'fused_graph' or 'fused'): what
`models.glomo.top_features_at` computes, with each layer's graph mixed into
the features by `ops.pallas.graph_mix.fused_graph_mix` instead of formed as a
[batch, K, T, T] array and then mixed.

Each layer's mixing runs one head at a time (`lax.scan` over the K heads),
and each head's queries and keys ([batch, T, H]) are projected inside a
rematerialised block (`graph_mix.RECOMPUTE_INPUTS`): the backward pass
projects them again from the key and query features it keeps anyway (for
the projection's own gradient) instead of holding them. With the paper's 8
heads of 256 on d 512 a layer's queries and keys are 4× the features'
width, larger than the [K, T, T] graph they replace at T 200; one head's
at a time, with their gradients, are an eighth of that. Recomputing costs
the two projections' forward FLOPs again, and keeps the kernel's outputs m
and z, so the forward kernel itself is not rerun (docs/tpu.md has the
bytes this saves).

Only the loss's training path goes through here. `GLoMo.graphs` and
`GLoMo.features`, the export and the transfer form the dense graphs, and
`PixelGLoMo` runs the reference ops (it refuses other `kernels`).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from glomo_jax.ops.dense import dense
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
  """The graph mixing of layer `layer` as a function (graph, keys, queries,
  rows, mask, values) -> [batch, R, d]: keys and queries [batch, T, d] the
  graph predictor's features, rows int [n] or None (R = T), values
  [batch, T, d] (head h mixes columns h·C … (h+1)·C, d = K·C)."""
  def mix(graph, keys, queries, rows, mask, values):
    c = graph.config
    wk, bk, wq, bq = graph.head_projections(layer)           # [d, K, H], [K, H]
    b, t, d = values.shape
    heads = wk.shape[1]
    if not top:
      rows = None
    queries = queries if rows is None else queries[:, rows]
    r = queries.shape[1]
    # θ per head: the 'query' threshold's folded weights (computed in the
    # head's rematerialised block, from the query features), else a constant
    folded = graph.folded_threshold(slice(layer, layer + 1))
    if folded is None:
      theta = jnp.broadcast_to(graph.thresholds(queries, slice(layer, layer + 1)),
                               (1, 1, heads, 1, 1))[0, 0, :, 0, 0]           # [K]
      per_head_theta = (theta, None)                                    # no folded weights
    else:
      per_head_theta = (folded[1][0], jnp.moveaxis(folded[0][:, 0], 1, 0))   # [K], [K, d]
    # the features enter the loop in float32 or wider, so that the K heads'
    # gradients of them add up as the reference's one GEMM over K·H does
    acc = jnp.promote_types(jnp.float32, keys.dtype)
    keys, queries = keys.astype(acc), queries.astype(acc)
    values = values.reshape(b, t, heads, d // heads)

    def head(_, xs):
      h, wk_h, bk_h, wq_h, bq_h, theta_h, fold_h = xs
      k = dense(keys.astype(c.compute_dtype), wk_h, bk_h)[:, None]      # [b, 1, T, H]
      q = dense(queries.astype(c.compute_dtype), wq_h, bq_h)[:, None]   # [b, 1, R, H]
      if fold_h is not None:
        theta_h = jnp.einsum("brd,d->br", queries.astype(fold_h.dtype), fold_h) + theta_h
      theta_h = jnp.broadcast_to(theta_h, (b, r))[:, None]             # [b, 1, R]
      v = lax.dynamic_index_in_dim(values, h, axis=2, keepdims=False)  # [b, T, C]
      return None, fused_graph_mix(q, k, theta_h, v, rows, mask)

    per_head = (jnp.arange(heads), jnp.moveaxis(wk, 1, 0), bk, jnp.moveaxis(wq, 1, 0), bq,
                *per_head_theta)
    _, m = lax.scan(jax.checkpoint(head, policy=RECOMPUTE_INPUTS, prevent_cse=False), None,
                    per_head)
    return jnp.moveaxis(m, 0, 2).reshape(b, r, d)            # [K, b, R, C] -> [b, R, d]
  return mix
