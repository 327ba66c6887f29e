"""The graph predictor g (paper Eq. 1) for one reading direction.

Input embeddings [batch, T, d] go through a key CNN and a query CNN (causal).
For each graph layer l and head h:
  k_i = W_k^{l,h} key_i + b,  q_j = W_q^{l,h} query_j + b   (width head_dim)
  s_ji = q_j · k_i                                   (no 1/sqrt scaling)
  θ_j = w^l · q_j + c^l   ('query'; computed as (W_q w)·query_j + (b_q·w + c))
                           or   θ = b^l   ('scalar')
  G_ji = ReLU(s_ji − θ_j)² / (Σ_i ReLU(s_ji − θ_j)² + 1e-16),  i < j only.
With `distance_prior` (beyond the paper), each weight is also multiplied by a
learned exp(β^{l,h}(j − i)) before the normalisation
(`ops.sparse_graph.distance_reweight`).
Graphs are [batch, L, K, T_target, T_source]; row j (target) sums to 1, or to
0 when no source survives (always for j = 0).

Parameters are stacked over layers (`key_kernel` [L, d, K, head_dim] …) so the
projections of all layers are one GEMM: the key/query features are the same
for every layer.

In the coupled ("− decouple") variant there are no CNNs: `layer_graph`
computes layer l's graph from the feature predictor's layer-(l−1) features.

Pixels: with `image_shape` (H, W) the units are the H·W pixels of an image in
raster order and the key and query CNNs are `PixelConvStack`s (causal in
raster order); the rest is unchanged. No parameter depends on (H, W), so a
predictor trained on one image size runs on another.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from glomo_jax.config import ModelConfig
from glomo_jax.models.causal_conv import CausalConvStack
from glomo_jax.models.initializers import fan_in_uniform
from glomo_jax.models.pixel_conv import PixelConvStack
from glomo_jax.ops.dense import dense, row_major_transpose
from glomo_jax.ops.sparse_graph import (allowed_sources, distance_buckets,
                                        distance_reweight, normalize_graph)


def project_heads(x: jax.Array, kernel: jax.Array, bias: jax.Array) -> jax.Array:
  """Per-layer, per-head projections of every position, as one GEMM.

  x: [batch, T, d]; kernel: [L', d, K, H]; bias: [L', K, H]
  -> [batch, L', K, T, H] = einsum("btd,ldkh->blkth", x, kernel) + bias
  (`ops.dense`: canonical kernel gradient, accumulation and bias in float32
  or wider).
  """
  b, t, _ = x.shape
  layers, d, heads, width = kernel.shape
  flat = jnp.transpose(kernel, (1, 0, 2, 3)).reshape(d, layers * heads * width)
  y = dense(x, flat, bias.reshape(-1)).reshape(b, t, layers, heads, width)
  return row_major_transpose(y, (0, 2, 3, 1, 4))


def affinity_scores(q: jax.Array, k: jax.Array, dtype, split_batch: bool = False) -> jax.Array:
  """s_ji = q_j · k_i for every head: [batch, L', K, R, H] queries and
  [batch, L', K, T, H] keys -> [batch, L', K, R, T] (target j, source i).

  split_batch: compute the two halves of the batch as two independent
  products and concatenate them (the same numbers). XLA:CPU runs one
  batched dot of small products on one thread, and two independent ones on
  two; on other backends, or with the batch sharded over devices, one
  batched product is the better program (`glomo_jax.tuning.split_batch_scores`).
  """
  eq = "blkjh,blkih->blkji"
  half = q.shape[0] // 2
  if not split_batch or half == 0:
    return jnp.einsum(eq, q, k, preferred_element_type=dtype)
  return jnp.concatenate([
      jnp.einsum(eq, q[:half], k[:half], preferred_element_type=dtype),
      jnp.einsum(eq, q[half:], k[half:], preferred_element_type=dtype)])


class GraphPredictor(nn.Module):
  """One direction's graph predictor. See the module docstring for the math.

  Attributes:
    config: the model's hyper-parameters.
    split_batch_scores: `affinity_scores`'s split_batch (same numbers; a
      choice of program for one CPU device).
    image_shape: (H, W) when the units are pixels in raster order; None for
      a sequence.
  """
  config: ModelConfig
  split_batch_scores: bool = False
  image_shape: tuple[int, int] | None = None

  def setup(self):
    c = self.config
    L, d, K, H = c.num_graph_layers, c.dim, c.num_heads, c.head_dim
    pd = c.params_dtype
    if c.decoupled:
      stack = dict(features=d, kernel_size=c.kernel_size, norm=c.norm,
                   bn_momentum=c.bn_momentum, epsilon=c.bn_epsilon,
                   dtype=c.compute_dtype, param_dtype=pd, bn_scale_init=c.bn_scale_init)
      if self.image_shape is None:
        self.key_cnn = CausalConvStack(c.key_layers, **stack)
        self.query_cnn = CausalConvStack(c.query_layers, **stack)
      else:
        shape = tuple(self.image_shape)
        self.key_cnn = PixelConvStack(c.key_layers, image_shape=shape, **stack)
        self.query_cnn = PixelConvStack(c.query_layers, image_shape=shape, **stack)
    proj = fan_in_uniform(d)
    self.key_kernel = self.param("key_kernel", proj, (L, d, K, H), pd)
    self.key_bias = self.param("key_bias", proj, (L, K, H), pd)
    self.query_kernel = self.param("query_kernel", proj, (L, d, K, H), pd)
    self.query_bias = self.param("query_bias", proj, (L, K, H), pd)
    if c.sparsity == "squared_relu":
      if c.threshold == "query":
        self.threshold_kernel = self.param("threshold_kernel", fan_in_uniform(H), (L, H), pd)
        self.threshold_bias = self.param("threshold_bias", fan_in_uniform(H), (L,), pd)
      elif c.threshold == "scalar":   # the authors' sparse_mode 2 starts at 1e-4
        self.threshold_bias = self.param("threshold_bias", nn.initializers.constant(1e-4),
                                         (L,), pd)
    if c.distance_prior:
      if self.image_shape is not None:
        raise ValueError("distance_prior is for text units, not pixels")
      init = lambda key, shape, dtype: jnp.broadcast_to(
          -c.distance_prior_init * jnp.log(jnp.arange(1, shape[-1] + 1, dtype=dtype)), shape)
      self.distance_logits = self.param("distance_logits", init, (L, K, c.distance_prior), pd)
    # Same mask for every position of a sequence; a no-op at rate 0 or in eval.
    self.input_dropout = nn.Dropout(c.dropout, broadcast_dims=(1,))

  def __call__(self, x: jax.Array, mask: jax.Array | None = None,
               train: bool = False) -> jax.Array:
    """Graphs of every layer (decoupled predictor).

    Args:
      x: [batch, T, d] embeddings of the sequence in reading order.
      mask: optional [batch, T], 1 for real tokens, 0 for padding.
      train: batch statistics (and dropout, if configured) instead of running
        statistics.

    Returns:
      [batch, L, K, T, T] graphs, [.., target j, source i].
    """
    keys, queries = self.head_features(x, mask, train)
    return self._graphs(keys, queries, slice(None), mask)

  def split_graphs(self, x: jax.Array, mask: jax.Array | None, train: bool,
                   top_rows: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The lower layers' graphs in full, the top layer's only at `top_rows`.

    The pretraining loss reads the top layer's features only at the decoder
    start positions, and row j of a graph feeds only position j, so the
    top layer's other rows are never needed (same numbers, less work).

    Args:
      x, mask, train: as `__call__`.
      top_rows: int [n] target positions (repeats allowed).

    Returns:
      ([batch, L−1, K, T, T] graphs of layers 1..L−1,
       [batch, K, n, T] rows `top_rows` of layer L's graph).
    """
    keys, queries = self.head_features(x, mask, train)
    last = self.config.num_graph_layers - 1
    lower = self._graphs(keys, queries, slice(0, last), mask)
    top = self._graphs(keys, queries, slice(last, last + 1), mask, rows=top_rows)
    return lower, top[:, 0]

  def head_features(self, x: jax.Array, mask: jax.Array | None, train: bool):
    """Key and query CNN features of embeddings x [batch, T, d], each
    [batch, T, d] (`head_inputs` projects them to the heads)."""
    if not self.config.decoupled:
      raise ValueError("a coupled graph predictor has no CNNs: use layer_graph "
                       "with the feature predictor's features")
    keys = self.key_cnn(self.input_dropout(x, deterministic=not train), mask, train)
    queries = self.query_cnn(self.input_dropout(x, deterministic=not train), mask, train)
    return keys, queries

  def layer_graph(self, layer: int, features: jax.Array,
                  mask: jax.Array | None = None) -> jax.Array:
    """Layer `layer`'s graph from given features (coupled variant).

    features: [batch, T, d] -> [batch, K, T, T].
    """
    return self._graphs(features, features, slice(layer, layer + 1), mask)[:, 0]

  def head_inputs(self, keys, queries, layers, rows=None):
    """keys, queries: [batch, T, d] -> the per-head queries q [batch, L', K, R, H]
    and keys k [batch, L', K, T, H] (compute dtype) of `layers` (a slice), and
    the thresholds θ of `thresholds`; R = T target rows, or the n given
    `rows` (int [n])."""
    cast = lambda a: a.astype(self.config.compute_dtype)
    threshold = self.thresholds(queries, layers, rows)
    if rows is not None:
      queries = queries[:, rows]
    k = project_heads(cast(keys), cast(self.key_kernel[layers]), self.key_bias[layers])
    q = project_heads(cast(queries), cast(self.query_kernel[layers]), self.query_bias[layers])
    return q, k, threshold

  def head_projections(self, layer: int):
    """Layer `layer`'s projections: key and query kernels [d, K, H] in the
    compute dtype and biases [K, H] as stored (`head_inputs` applies them
    to every head at once, `models.fused_features` one head at a time)."""
    cast = lambda a: a.astype(self.config.compute_dtype)
    return (cast(self.key_kernel[layer]), self.key_bias[layer],
            cast(self.query_kernel[layer]), self.query_bias[layer])

  def thresholds(self, queries, layers, rows=None):
    """The thresholds θ of `layers` (a slice) from the query features
    [batch, T, d], in the graph dtype, broadcastable to [batch, L', K, R, 1]
    ('query': that shape; 'scalar': [1, L', 1, 1, 1]; 'zero' and softmax: a
    0-d zero); R = T, or the n given `rows` (int [n])."""
    c = self.config
    gdt = c.graph_dtype
    if rows is not None:
      queries = queries[:, rows]
    folded = self.folded_threshold(layers)
    if folded is not None:
      w_fold, b_fold = folded
      threshold = jnp.einsum("btd,dlk->blkt", queries.astype(gdt), w_fold)
      return (threshold + b_fold[None, :, :, None])[..., None]
    if c.sparsity == "squared_relu" and c.threshold == "scalar":
      return self.threshold_bias[layers].astype(gdt)[None, :, None, None, None]
    return jnp.zeros((), gdt)

  def folded_threshold(self, layers):
    """The 'query' threshold θ = w·q + c with q = W_q x + b_q, folded into
    θ = (W_q w)·x + (b_q·w + c): one thin GEMM on the query features x
    instead of a pass over q (which would need q in a second memory
    layout). Returns (W_q w [d, L', K], b_q·w + c [L', K]) of `layers` (a
    slice) in the graph dtype, or None for the other thresholds."""
    c = self.config
    if not (c.sparsity == "squared_relu" and c.threshold == "query"):
      return None
    gdt = c.graph_dtype
    w = self.threshold_kernel[layers].astype(gdt)                        # [L', H]
    w_fold = jnp.einsum("ldkh,lh->dlk", self.query_kernel[layers].astype(gdt), w)
    b_fold = jnp.einsum("lkh,lh->lk", self.query_bias[layers].astype(gdt), w)
    return w_fold, b_fold + self.threshold_bias[layers].astype(gdt)[:, None]

  def _graphs(self, keys, queries, layers, mask, rows=None):
    """keys, queries: [batch, T, d] -> graphs [batch, L', K, R, T] for `layers`
    (a slice), R = T target rows, or the n given `rows` (int [n])."""
    c = self.config
    gdt = c.graph_dtype
    length = keys.shape[1]
    q, k, threshold = self.head_inputs(keys, queries, layers, rows)
    scores = affinity_scores(q, k, gdt, split_batch=self.split_batch_scores)
    allowed = allowed_sources(length, mask, rows)
    if mask is not None:
      allowed = allowed[:, None]                       # [batch, 1, 1, R, T]
    graph = normalize_graph(scores.astype(gdt), threshold, allowed, c.sparsity)
    if c.distance_prior:
      graph = distance_reweight(graph, self.distance_logits[layers],
                                distance_buckets(length, c.distance_prior, rows))
    return graph
