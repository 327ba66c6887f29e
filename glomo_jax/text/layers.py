"""Building blocks shared by the task models: masked softmax, the LSTM
update, bidirectional RNNs that ignore padding, self-attention, masked pooling, graph checks.

Masks are [batch, T] (bool or 0/1), True for real positions, and every
sequence's real positions come first (right padding). Every block here
returns zeros at padding positions and its outputs at real positions do not
depend on what, or how much, padding follows.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from glomo_jax.models.gru import gru_update


def lstm_update(gates: jax.Array, c: jax.Array) -> tuple[jax.Array, jax.Array]:
  """One LSTM update (flax.linen.OptimizedLSTMCell's math) from its gates.

  gates: [..., 4H] = W_i x + W_h h + b in the order (i, f, g, o); c: [..., H]
  -> (c', h'): c' = σ(f) ⊙ c + σ(i) ⊙ tanh(g), h' = σ(o) ⊙ tanh(c').
  """
  i, f, g, o = jnp.split(gates, 4, axis=-1)
  c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
  return c, jax.nn.sigmoid(o) * jnp.tanh(c)


def masked_softmax(scores: jax.Array, mask: jax.Array, axis: int = -1) -> jax.Array:
  """Softmax over `axis` restricted to mask; rows with nothing valid are all 0.

  Args:
    scores: float [..., n, ...].
    mask: bool/0-1, broadcastable to scores; False entries get weight 0.

  Returns:
    weights, same shape as scores; each row sums to 1 over its valid entries
    (or to 0 when it has none). Never NaN.
  """
  mask = jnp.broadcast_to(mask.astype(bool), scores.shape)
  scores = jnp.where(mask, scores, -jnp.inf)
  top = jnp.max(scores, axis=axis, keepdims=True)
  top = jnp.where(jnp.isfinite(top), top, 0.0)
  exp = jnp.where(mask, jnp.exp(scores - jax.lax.stop_gradient(top)), 0.0)
  total = jnp.sum(exp, axis=axis, keepdims=True)
  return exp / jnp.where(total > 0, total, 1.0)


def masked_pool(h: jax.Array, mask: jax.Array, kinds: Sequence[str] = ("max", "mean")
                ) -> jax.Array:
  """Pools over the valid positions.

  Args:
    h: [B, T, d]; mask: [B, T].
    kinds: any of 'max', 'mean' (concatenated in this order).

  Returns:
    [B, len(kinds) · d]; an empty sequence pools to zeros.
  """
  m = mask.astype(bool)[..., None]
  out = []
  for kind in kinds:
    if kind == "max":
      top = jnp.max(jnp.where(m, h, -jnp.inf), axis=1)
      out.append(jnp.where(jnp.any(m, axis=1), top, 0.0))
    elif kind == "mean":
      count = jnp.maximum(jnp.sum(m, axis=1), 1).astype(h.dtype)
      out.append(jnp.sum(jnp.where(m, h, 0.0), axis=1) / count)
    else:
      raise ValueError(f"unknown pooling {kind!r}: 'max' or 'mean'")
  return jnp.concatenate(out, axis=-1)


def reverse_index(mask: jax.Array) -> jax.Array:
  """int32 [B, T]: position t ↦ len−1−t inside each sequence, t beyond it.

  Gathering with it reverses each sequence's real part and leaves its padding
  in place (an involution: applying it twice restores the order).
  """
  lengths = jnp.sum(mask.astype(jnp.int32), axis=-1, keepdims=True)
  t = jnp.arange(mask.shape[1], dtype=jnp.int32)[None]
  return jnp.where(t < lengths, lengths - 1 - t, t)


def _gather_time(x: jax.Array, index: jax.Array) -> jax.Array:
  return jnp.take_along_axis(x, index[..., None], axis=1)


class BiRNN(nn.Module):
  """A bidirectional GRU or LSTM layer that respects padding.

  Math (per direction, per step; biases included in each linear map):
  * 'gru' (flax.linen.GRUCell = PyTorch GRU): r = σ(W_ir x + W_hr h),
    z = σ(W_iz x + W_hz h), n = tanh(W_in x + r ⊙ (W_hn h)),
    h' = (1 − z) ⊙ n + z ⊙ h  (`glomo_jax.models.gru.gru_update`).
  * 'lstm' (flax.linen.OptimizedLSTMCell): [i, f, g, o] = W_i x + W_h h,
    c' = σ(f) ⊙ c + σ(i) ⊙ tanh(g), h' = σ(o) ⊙ tanh(c').
  Tests check both against flax.linen.RNN with those cells given the same
  weights. The implementation differs for speed: the input projections of
  all steps are one GEMM before the loop, and both directions run in one
  `lax.scan` (half the loops to compile and run).

  Padding: the forward direction reads positions 0..len−1 first (padding
  comes after, so it cannot reach real outputs); the backward direction reads
  each sequence reversed within its length (`reverse_index`). Outputs at
  padding are zeroed.

  Attributes:
    features: hidden width per direction (output 2·features).
    cell: 'gru' or 'lstm'.

  Parameters: {forward,backward}_input (Dense d_in → G·features, with bias),
  {forward,backward}_hidden [features, G·features] and, for 'gru',
  {forward,backward}_hidden_bias [G·features]; G = 3 (r, z, n) or 4 (i, f, g, o).
  """
  features: int
  cell: str = "gru"

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
    """x: [B, T, d_in]; mask: [B, T] → [B, T, 2·features] (fw ; bw)."""
    if self.cell not in ("gru", "lstm"):
      raise ValueError(f"unknown RNN cell {self.cell!r}: 'gru' or 'lstm'")
    h_dim = self.features
    gates = (3 if self.cell == "gru" else 4) * h_dim
    batch = x.shape[0]
    rev = reverse_index(mask)
    gi = jnp.stack([nn.Dense(gates, name="forward_input")(x),
                    nn.Dense(gates, name="backward_input")(_gather_time(x, rev))])
    wh = jnp.stack([self.param(f"{d}_hidden", nn.initializers.orthogonal(),
                               (h_dim, gates)) for d in ("forward", "backward")])
    if self.cell == "gru":
      bh = jnp.stack([self.param(f"{d}_hidden_bias", nn.initializers.zeros, (gates,))
                      for d in ("forward", "backward")])[:, None]

      def step(h, g):  # h [2, B, H]; g [2, B, 3H]
        h = gru_update(g, jnp.einsum("dbh,dhk->dbk", h, wh) + bh, h)
        return h, h
      carry = jnp.zeros((2, batch, h_dim), gi.dtype)
    else:
      def step(state, g):  # state (c, h) [2, B, H]; g [2, B, 4H]
        c, h = state
        c, h = lstm_update(g + jnp.einsum("dbh,dhk->dbk", h, wh), c)
        return (c, h), h
      zeros = jnp.zeros((2, batch, h_dim), gi.dtype)
      carry = (zeros, zeros)
    _, ys = jax.lax.scan(step, carry, jnp.moveaxis(gi, 2, 0))  # [T, 2, B, H]
    forward = jnp.moveaxis(ys[:, 0], 0, 1)
    backward = _gather_time(jnp.moveaxis(ys[:, 1], 0, 1), rev)
    out = jnp.concatenate([forward, backward], axis=-1)
    return out * mask.astype(out.dtype)[..., None]


class SelfAttention(nn.Module):
  """Clark & Gardner (2018) style residual self-attention (their SQuAD model,
  which the paper's SQuAD baseline follows; used for IMDB and after ESIM's
  inference composition here).

  s_ij = w1·h_i + w2·h_j + w3·(h_i ⊙ h_j) (trilinear), the diagonal masked
  (a position does not attend to itself) and padding keys masked;
  a_i = masked softmax_j(s_ij); c_i = Σ_j a_ij h_j;
  out_i = h_i + ReLU(W [h_i ; c_i ; h_i ⊙ c_i] + b); zero at padding.
  The weights a are sown as intermediates 'attention' [B, T, T].

  Attributes:
    mask_diagonal: forbid i → i (Clark & Gardner); a one-word text then
      attends to nothing (c = 0).
    dropout_rate: dropout on the input of the scores and of the projection.
  """
  mask_diagonal: bool = True
  dropout_rate: float = 0.0

  @nn.compact
  def __call__(self, h: jax.Array, mask: jax.Array, *, train: bool = False
               ) -> jax.Array:
    """h: [B, T, d]; mask: [B, T] → [B, T, d]."""
    d = h.shape[-1]
    m = mask.astype(bool)
    x = nn.Dropout(self.dropout_rate, deterministic=not train)(h)
    w1 = nn.Dense(1, use_bias=True, name="query")(x)[..., 0]  # [B, T]
    w2 = nn.Dense(1, use_bias=False, name="key")(x)[..., 0]  # [B, T]
    w3 = self.param("dot", nn.initializers.normal(1.0 / d ** 0.5), (d,))
    scores = (w1[:, :, None] + w2[:, None, :]
              + jnp.einsum("bid,bjd->bij", x * w3, x))
    allowed = m[:, None, :] & m[:, :, None]
    if self.mask_diagonal:
      allowed = allowed & ~jnp.eye(h.shape[1], dtype=bool)[None]
    attention = masked_softmax(scores, allowed)
    self.sow("intermediates", "attention", attention)
    c = jnp.einsum("bij,bjd->bid", attention, h)
    fused = jnp.concatenate([h, c, h * c], axis=-1)
    fused = nn.Dropout(self.dropout_rate, deterministic=not train)(fused)
    out = h + nn.relu(nn.Dense(d, name="project")(fused))
    return out * m[..., None].astype(out.dtype)


def check_graphs(graphs: Any, mask: jax.Array, num_layers: int, what: str) -> None:
  """Raises ValueError unless graphs is [B, 2L, K, T, T] matching mask [B, T]."""
  if graphs is None:
    raise ValueError(f"graph transfer needs {what} graphs [B, 2L, K, T, T]; got None")
  b, t = mask.shape
  shape = tuple(graphs.shape)
  if len(shape) != 5 or shape[0] != b or shape[1] != 2 * num_layers or shape[3:] != (t, t):
    raise ValueError(f"{what} graphs have shape {shape}; expected [B={b}, "
                     f"2L={2 * num_layers}, K, T={t}, T={t}]")


def embedding_initializer(matrix) -> Callable:
  """A flax initializer returning `matrix` (e.g. GloVe, [V, D]); checks the shape."""
  def init(key, shape, dtype=jnp.float32):
    del key
    if tuple(shape) != tuple(matrix.shape):
      raise ValueError(f"embedding matrix is {tuple(matrix.shape)}, the model "
                       f"wants {tuple(shape)}")
    return jnp.asarray(matrix, dtype)
  return init


class WordEmbedding(nn.Module):
  """Embedding table [vocab_size, features], optionally frozen.

  Frozen means the lookup goes through stop_gradient: the table stays a
  parameter (checkpointed with the rest) but gets exactly zero gradient.
  `ClassificationTask`'s Adam (no weight decay) also leaves zero-gradient
  leaves untouched, so a frozen table stays bit-identical.
  """
  vocab_size: int
  features: int
  embedding_init: Callable = nn.initializers.normal(0.1)
  freeze: bool = False

  @nn.compact
  def __call__(self, ids: jax.Array) -> jax.Array:
    """ids: int [B, T] → [B, T, features]."""
    table = self.param("embedding", self.embedding_init, (self.vocab_size, self.features))
    if self.freeze:
      table = jax.lax.stop_gradient(table)
    return jnp.take(table, ids, axis=0)
