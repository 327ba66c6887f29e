"""Eq. 1 of the paper: from affinity scores to a row-normalised sparse graph.

Axis convention everywhere in glomo_jax: a graph ``G[..., j, i]`` has the
*target* position j on the second-to-last axis and the *source* position i on
the last axis; row j holds the weights with which target j reads the sources.
(The paper writes G_ij with i the source and says "columns sum to one"; it is
the same matrix transposed.)
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

EPSILON = 1e-16  # the authors' normaliser: G = a / (Σ a + 1e-16)


def allowed_sources(length: int, mask: jax.Array | None = None,
                    rows: jax.Array | None = None) -> jax.Array:
  """Which (target j, source i) pairs may carry weight.

  Strictly causal (i < j) and, when a padding mask is given, neither the
  source nor the target is padding.

  Args:
    length: T.
    mask: optional [batch, T], true/1 for real tokens.
    rows: optional int [n]: only these target positions (the rows of a
      graph computed for a few targets), in this order.

  Returns:
    bool [R, T] without a mask, else bool [batch, 1, R, T] (broadcasts over
    heads), R = T or n; entry [.., r, i] is True when target j = rows[r]
    (or r) may read source i.
  """
  targets = jnp.arange(length) if rows is None else jnp.asarray(rows)
  causal = jnp.arange(length)[None, :] < targets[:, None]
  if mask is None:
    return causal
  m = mask.astype(bool)
  return causal[None, None] & m[:, None, None, :] & m[:, targets][:, None, :, None]


def normalize_graph(scores: jax.Array, threshold: jax.Array | float,
                    allowed: jax.Array, sparsity: str = "squared_relu") -> jax.Array:
  """Turns scores into a graph whose rows sum to 1, or to 0 with no source.

  squared_relu (Eq. 1): a_ji = ReLU(s_ji − θ_j)² on allowed pairs,
  G_ji = a_ji / (Σ_i a_ji + 1e-16).
  softmax (the "− sparse" ablation): G_j = softmax over allowed i of s_ji;
  rows with no allowed source are all zeros. θ is ignored (a per-row shift
  does not change a softmax).

  Args:
    scores: [..., T_target, T_source].
    threshold: θ broadcastable to scores: [..., T_target, 1] per query, or a
      scalar.
    allowed: bool, broadcastable to scores (see `allowed_sources`).
    sparsity: 'squared_relu' or 'softmax'.

  Returns:
    graph with the shape and dtype of `scores`.

  The squared-ReLU graph has a hand-written gradient (`_squared_relu_graph`):
  its backward pass keeps only a = ReLU(s − θ) on allowed pairs and the row
  normalisers, and is one fused pass over [..., T, T].
  """
  if sparsity == "squared_relu":
    threshold = jnp.asarray(threshold, scores.dtype)
    return _squared_relu_graph(scores, threshold, jnp.asarray(allowed, bool))
  if sparsity == "softmax":
    masked = jnp.where(allowed, scores, -jnp.inf)
    row_max = jnp.max(masked, axis=-1, keepdims=True)
    row_max = jnp.where(jnp.isfinite(row_max), row_max, 0.0)
    e = jnp.where(allowed, jnp.exp(masked - jax.lax.stop_gradient(row_max)), 0.0)
    z = jnp.sum(e, axis=-1, keepdims=True)
    return e / jnp.where(z > 0, z, 1.0)
  raise ValueError(f"unknown sparsity {sparsity!r}; use 'squared_relu' or 'softmax'")


def _sum_to_shape(x: jax.Array, shape: tuple[int, ...]) -> jax.Array:
  """Sums x over the axes along which an array of `shape` was broadcast to it."""
  lead = x.ndim - len(shape)
  axes = tuple(range(lead)) + tuple(
      lead + i for i, n in enumerate(shape) if n == 1 and x.shape[lead + i] != 1)
  return jnp.sum(x, axis=axes).reshape(shape) if axes else x.reshape(shape)


@jax.custom_vjp
def _squared_relu_graph(scores, threshold, allowed):
  a = jnp.where(allowed, jax.nn.relu(scores - threshold), 0.0)
  a2 = a * a
  return a2 / (jnp.sum(a2, axis=-1, keepdims=True) + EPSILON)


def _squared_relu_graph_fwd(scores, threshold, allowed):
  a = jnp.where(allowed, jax.nn.relu(scores - threshold), 0.0)
  a2 = a * a
  z = jnp.sum(a2, axis=-1, keepdims=True) + EPSILON
  return a2 / z, (a, z, threshold.shape)


def _squared_relu_graph_bwd(res, g):
  """G = a²/z, z = Σ a² + ε: dG/da_i = 2a_i(δ − G)/z, so
  ds = 2a/z · (g − Σ_j g_j G_j) and dθ = −Σ ds over θ's broadcast axes."""
  a, z, theta_shape = res
  inner = jnp.sum(g * a * a, axis=-1, keepdims=True) / z
  ds = (2.0 / z) * a * (g - inner)
  return ds, _sum_to_shape(-ds, theta_shape), None


_squared_relu_graph.defvjp(_squared_relu_graph_fwd, _squared_relu_graph_bwd)


def distance_buckets(length: int, buckets: int, rows: jax.Array | None = None) -> jax.Array:
  """int [R, T]: the bucket of distance d = j − i for target j (all T rows,
  or `rows`) and source i: d − 1 for 1 ≤ d < buckets, buckets − 1 beyond;
  pairs with d ≤ 0 get bucket 0 (they are never allowed sources)."""
  targets = jnp.arange(length) if rows is None else jnp.asarray(rows)
  d = targets[:, None] - jnp.arange(length)[None, :]
  return jnp.clip(d, 1, buckets) - 1


def distance_reweight(graph: jax.Array, logits: jax.Array, buckets: jax.Array) -> jax.Array:
  """A graph reweighted by a prior over distances, rows renormalised.

  G'_ji = G_ji · exp(β(j − i)) / (Σ_i G_ji · exp(β(j − i)) + 1e-16). For the
  squared-ReLU graph G = a²/Σa² this is a² · exp(β) normalised: a row's
  support and its emptiness are unchanged, so causality and padding are
  too, and rows still sum to 1 or 0.

  Args:
    graph: [batch, L', K, R, T] rows summing to 1 or 0.
    logits: β, [L', K, n_buckets].
    buckets: int [R, T] (`distance_buckets`).

  Returns:
    the reweighted graph, [batch, L', K, R, T], in the graph's dtype.
  """
  beta = logits.astype(graph.dtype)[:, :, buckets]            # [L', K, R, T]
  weight = jnp.exp(beta - jax.lax.stop_gradient(jnp.max(beta, axis=-1, keepdims=True)))
  w = graph * weight[None]
  return w / (jnp.sum(w, axis=-1, keepdims=True) + EPSILON)
