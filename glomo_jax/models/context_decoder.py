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

  @nn.compact
  def __call__(self, h0: jax.Array, inputs: jax.Array, train: bool = False) -> jax.Array:
    """Decodes a short sequence from each start state.

    Args:
      h0: [batch, n, d] start states (copied to every GRU layer).
      inputs: [batch, n, steps, d] teacher-forced inputs.
      train: apply dropout to the start states (if configured).

    Returns:
      [batch, n, steps, d] top-layer outputs.
    """
    c = self.config
    if c.dropout > 0 and train:
      h0 = nn.Dropout(c.dropout, broadcast_dims=(1,))(h0, deterministic=False)
    b, n, steps, d = inputs.shape
    out = GRUStack(d, c.decoder_layers, c.compute_dtype, c.params_dtype, name="gru")(
        inputs.reshape(b * n, steps, d), h0.reshape(b * n, d))
    return out.reshape(b, n, steps, d)


def context_targets(emb: jax.Array, tokens: jax.Array, mask: jax.Array | None,
                    positions: jax.Array, length: int):
  """Teacher-forced decoder inputs, targets and weights for start `positions`.

  The decoder's start states are the top-layer features F^L at `positions`
  ([batch, n, d]); the caller computes them.

  Args:
    emb: [batch, T, d] embeddings of the (direction's) sequence.
    tokens: int [batch, T].
    mask: optional [batch, T], 1 = real token.
    positions: int [n] start positions t, each in [0, T − D).
    length: D.

  Returns:
    inputs [batch, n, D, d] = [0, E(x_{t+1}), …, E(x_{t+D−1})], targets int
    [batch, n, D] = x_{t+1} … x_{t+D}, weights float32 [batch, n, D] (1 where
    the start and the target are real).
  """
  offsets = jnp.arange(1, length + 1)
  at = positions[:, None] + offsets[None, :]                      # [n, D]
  prev = emb[:, at[:, :-1]]                                       # [batch, n, D-1, d]
  first = jnp.zeros(emb.shape[:1] + (positions.shape[0], 1, emb.shape[-1]), emb.dtype)
  inputs = jnp.concatenate([first, prev], axis=2)
  targets = tokens[:, at]
  if mask is None:
    weights = jnp.ones(targets.shape, jnp.float32)
  else:
    m = mask.astype(jnp.float32)
    weights = m[:, at] * m[:, positions][:, :, None]
  return inputs, targets, weights
