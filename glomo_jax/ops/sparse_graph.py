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
  """
  if sparsity == "squared_relu":
    a = jnp.where(allowed, jax.nn.relu(scores - threshold), 0.0)
    a = a * a
    return a / (jnp.sum(a, axis=-1, keepdims=True) + EPSILON)
  if sparsity == "softmax":
    masked = jnp.where(allowed, scores, -jnp.inf)
    row_max = jnp.max(masked, axis=-1, keepdims=True)
    row_max = jnp.where(jnp.isfinite(row_max), row_max, 0.0)
    e = jnp.where(allowed, jnp.exp(masked - jax.lax.stop_gradient(row_max)), 0.0)
    z = jnp.sum(e, axis=-1, keepdims=True)
    return e / jnp.where(z > 0, z, 1.0)
  raise ValueError(f"unknown sparsity {sparsity!r}; use 'squared_relu' or 'softmax'")
