"""The feature predictor f (paper Eq. 2) for one reading direction.

F^0 = embeddings. Layer l mixes F^{l−1} with layer l's graph, per head: the
d features are cut into K slices of d/K, head h's graph G^{l,h} mixes slice h,
and the slices are concatenated back:
  m_t = concat_h Σ_i G^{l,h}_{t i} F^{l−1}_{i, slice h}.
Composition:
  'gru':      F^l_t = GRUCell([m_t ⊙ F^{l−1}_t ; m_t], F^{l−1}_t), one cell
              shared by every layer (authors' default);
  'residual': F^l_t = F^{l−1}_t + concat_h Σ_i G^{l,h}_{ti} (V^l F^{l−1}_i + b^l)_{slice h},
              values through a per-layer linear map V^l.
"""
from __future__ import annotations

from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from glomo_jax.config import ModelConfig
from glomo_jax.models.gru import GRUCell
from glomo_jax.models.initializers import fan_in_uniform
from glomo_jax.ops.dense import dense


def mix_heads(graph: jax.Array, values: jax.Array) -> jax.Array:
  """Per-head graph mixing.

  Args:
    graph: [batch, K, T_target, T_source] (any number of target rows).
    values: [batch, T_source, d], d divisible by K.

  Returns:
    [batch, T_target, d]: slice h of row t is Σ_i graph[h, t, i] values[i, slice h].
  """
  b, t, d = values.shape
  k = graph.shape[1]
  v = values.reshape(b, t, k, d // k)
  m = jnp.einsum("bkji,bikc->bjkc", graph.astype(values.dtype), v)
  return m.reshape(b, graph.shape[2], d)


class FeaturePredictor(nn.Module):
  """One direction's feature predictor."""
  config: ModelConfig

  def setup(self):
    c = self.config
    d = c.dim
    if c.composition == "gru":
      self.gru = GRUCell(2 * d, d, c.compute_dtype, c.params_dtype)
    else:
      self.value_kernel = self.param("value_kernel", fan_in_uniform(d),
                                     (c.num_graph_layers, d, d), c.params_dtype)
      self.value_bias = self.param("value_bias", fan_in_uniform(d),
                                   (c.num_graph_layers, d), c.params_dtype)

  def layer(self, layer: int, h: jax.Array, graph: jax.Array,
            rows: jax.Array | None = None) -> jax.Array:
    """F^{l−1} [batch, T, d] and G^l [batch, K, T, T] -> F^l [batch, T, d].

    With `rows` (int [n]), `graph` holds only those target rows
    ([batch, K, n, T]) and F^l is computed only there: [batch, n, d].
    """
    return self.compose(layer, h, lambda values: mix_heads(graph, values), rows)

  def compose(self, layer: int, h: jax.Array, mix: Callable[[jax.Array], jax.Array],
              rows: jax.Array | None = None) -> jax.Array:
    """F^l from F^{l−1} [batch, T, d], with `mix(values [batch, T, d])` ->
    [batch, R, d] the graph mixing of layer l (`layer` mixes with a graph;
    `models.fused_features` with a kernel that forms none). R = T, or the n
    `rows` (int [n]) at which F^l is computed."""
    c = self.config
    h = h.astype(c.compute_dtype)
    here = h if rows is None else h[:, rows]
    if c.composition == "gru":
      m = mix(h)
      return self.gru(jnp.concatenate([m * here, m], axis=-1), here)
    dt = c.compute_dtype
    v = dense(h, self.value_kernel[layer].astype(dt), self.value_bias[layer])
    return here + mix(v)

  def __call__(self, x: jax.Array, graphs: jax.Array) -> list[jax.Array]:
    """x: [batch, T, d] embeddings; graphs: [batch, L, K, T, T].

    Returns [F^1, …, F^L], each [batch, T, d].
    """
    out, h = [], x
    for layer in range(graphs.shape[1]):
      h = self.layer(layer, h, graphs[:, layer])
      out.append(h)
    return out
