"""The context decoder (paper Eq. 3) for one reading direction.

A GRU of `decoder_layers` layers, width d, whose initial state (every layer)
is the feature F^L_t of a start position t. Teacher-forced inputs
[0, E(x_{t+1}), …, E(x_{t+D−1})]; the outputs predict x_{t+1} … x_{t+D}
through the output layer tied to the embedding (applied by the caller, in
chunks). Decoding every start position at once is one batch of B·n rows.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from glomo_jax.config import ModelConfig
from glomo_jax.models.gru import GRUStack


class ContextDecoder(nn.Module):
  """Multi-layer GRU decoder."""
  config: ModelConfig

  def setup(self):
    c = self.config
    self.gru = GRUStack(c.dim, c.decoder_layers, c.compute_dtype, c.params_dtype)
    # On the start states; a no-op at rate 0 or in eval.
    self.start_dropout = nn.Dropout(c.dropout, broadcast_dims=(1,))

  def __call__(self, h0: jax.Array, inputs: jax.Array, train: bool = False) -> jax.Array:
    """Decodes a short sequence from each start state.

    Args:
      h0: [batch, n, d] start states (copied to every GRU layer).
      inputs: [batch, n, steps, d] teacher-forced inputs.
      train: apply dropout to the start states (if configured).

    Returns:
      [batch, n, steps, d] top-layer outputs.
    """
    b, n, steps, d = inputs.shape
    out = self.gru(inputs.reshape(b * n, steps, d),
                   self.start_dropout(h0, deterministic=not train).reshape(b * n, d))
    return out.reshape(b, n, steps, d)

  def decode_windows(self, h0: jax.Array, emb: jax.Array, positions: jax.Array,
                     train: bool = False) -> jax.Array:
    """`__call__` on `context_inputs(emb, positions, D)`, without building
    them: the same numbers, less work.

    Step 0's input is zero, so its first-layer input gates are the bias; step
    s ≥ 1 reads E(x_{t+s}), whose gates depend on the position t + s only.
    When the windows cover more rows than the sequence has positions
    (decoding every start: each position is read by D − 1 windows), the
    gates are computed once per position and gathered; otherwise on the
    gathered embeddings.

    Args:
      h0: [batch, n, d] start states.
      emb: [batch, T, d] embeddings of the sequence (reading order).
      positions: int [n] start positions t, each in [0, T − D).
      train: as `__call__`.

    Returns:
      [batch, n, D, d] top-layer outputs, D = context_length.
    """
    b, n, d = h0.shape
    steps = self.config.context_length
    at = positions[:, None] + jnp.arange(1, steps)[None, :]         # [n, D−1]
    if emb.shape[1] < n * (steps - 1):
      later = self.gru.input_gates(emb)[:, at]                      # [batch, n, D−1, 3d]
    else:
      later = self.gru.input_gates(emb[:, at])
    first = self.gru.input_gates(jnp.zeros((1, d), emb.dtype))      # = the bias, [1, 3d]
    first = jnp.broadcast_to(first.astype(later.dtype), (b, n, 1, first.shape[-1]))
    gates = jnp.concatenate([first, later], axis=2)
    out = self.gru(None, self.start_dropout(h0, deterministic=not train).reshape(b * n, d),
                   first_gates=gates.reshape(b * n, steps, -1))
    return out.reshape(b, n, steps, d)


def context_inputs(emb: jax.Array, positions: jax.Array, length: int) -> jax.Array:
  """The teacher-forced decoder inputs [batch, n, D, d] =
  [0, E(x_{t+1}), …, E(x_{t+D−1})] for start `positions` (int [n]) of the
  embedded sequence emb [batch, T, d] (`ContextDecoder.decode_windows`
  decodes them without building this array)."""
  at = positions[:, None] + jnp.arange(1, length)[None, :]         # [n, D−1]
  first = jnp.zeros(emb.shape[:1] + (positions.shape[0], 1, emb.shape[-1]), emb.dtype)
  return jnp.concatenate([first, emb[:, at]], axis=2)


def context_targets(tokens: jax.Array, mask: jax.Array | None, positions: jax.Array,
                    length: int):
  """Targets and weights of the decoder windows at start `positions`.

  Args:
    tokens: int [batch, T].
    mask: optional [batch, T], 1 = real token.
    positions: int [n] start positions t, each in [0, T − D).
    length: D.

  Returns:
    targets int [batch, n, D] = x_{t+1} … x_{t+D}, weights float32
    [batch, n, D] (1 where the start and the target are real).
  """
  at = positions[:, None] + jnp.arange(1, length + 1)[None, :]     # [n, D]
  targets = tokens[:, at]
  if mask is None:
    return targets, jnp.ones(targets.shape, jnp.float32)
  m = mask.astype(jnp.float32)
  return targets, m[:, at] * m[:, positions][:, :, None]
