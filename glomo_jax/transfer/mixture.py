"""`GraphMixture`: softmax-weighted mixtures of candidate graphs (paper §2.2).

  M_n[t, :] = s_n · Σ_c w_{n,t,c} C_c[t, :],   Σ_c w_{n,t,c} = 1, w ≥ 0,

for mixtures n = 1 … num_mixtures (authors: 2 per direction, ``att_cnt 2``),
each with its own learned scale s_n (initialised to 1; the authors multiply
H·M_n by it, which is the same). The weights are

* conditioned (authors' default, ``condition 1``): w_{n,t,:} = softmax(W_n h_t
  + b_n), one distribution per target position t from the features h_t;
* free: w_{n,:} = softmax(logits_n), logits initialised to 0 (uniform), the
  same for every position and example.

Parameters: 'logits' (Dense kernel [d, n·C] + bias, conditioned; or [n, C]
free) and 'scale' [n]. The weights are computed in float32.

Dropout (`dropout_rate`, when not deterministic; needs a 'dropout' rng): as
the authors' ``LockedDropout`` before each mixture's logit layer, h_t is
dropped with one mask per example, feature and mixture, shared over the
positions t. Only the weights see it; the candidates are applied to clean
features.

The mixture is linear in each target row, so it can mix the candidates
themselves ([B, C, T_target, T_source] → M) or the candidates already applied
to features (C_c H, [B, C, T_target, d] → M_n H, `propagated_candidates`):
mixing rows of C_c H gives exactly the rows of M_n H. `GraphTransfer` does
either (its `apply_as`): the latter never holds a [T, T] matrix per
candidate; the former applies only the mixtures to H.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


class GraphMixture(nn.Module):
  """Mixes C candidate graphs into `num_mixtures` graphs (module docstring).

  Attributes:
    num_mixtures: mixtures n computed from the same candidates.
    conditioned: weights from the features of each target position (True) or
      free softmax parameters (False).
    dropout_rate: locked dropout on the features the weights are computed
      from (module docstring).
  """
  num_mixtures: int = 2
  conditioned: bool = True
  dropout_rate: float = 0.0

  @nn.compact
  def __call__(self, candidates, features=None, return_weights: bool = False,
               deterministic: bool = True):
    """Mixtures of the candidates.

    Args:
      candidates: [B, C, T_target, X]: candidate graphs (X = T_source) or
        candidates applied to features (X = d); rows are target positions.
      features: [B, T, d], needed when conditioned (ignored otherwise).
      return_weights: also return the softmax weights.
      deterministic: no dropout.

    Returns:
      M [B, num_mixtures, T_target, X] (float32 or wider), and with
      return_weights the weights [B, num_mixtures, T_target, C] (each [.., t, :]
      a distribution over candidates; broadcast over B and T when free).
    """
    candidates = jnp.asarray(candidates)
    if candidates.ndim != 4:
      raise ValueError(f"candidates must be [batch, C, T, T or d], got "
                       f"{candidates.shape}")
    batch, count, length, _ = candidates.shape
    n = self.num_mixtures
    if self.conditioned:
      if features is None or features.ndim != 3 or features.shape[:2] != (batch, length):
        raise ValueError(f"conditioned mixture weights need features [batch={batch}, "
                         f"T={length}, d], got "
                         f"{None if features is None else features.shape}")
      dense = nn.Dense(n * count, name="logits")
      if deterministic or not self.dropout_rate:
        logits = dense(features).reshape(batch, length, n, count).transpose(0, 2, 1, 3)
      else:   # mixture i's logits from its own dropped copy of the features
        copies = jnp.broadcast_to(features[:, None], (batch, n) + features.shape[1:])
        copies = nn.Dropout(self.dropout_rate, broadcast_dims=(2,))(copies, False)
        logits = dense(copies).reshape(batch, n, length, n, count)   # [B, n, T, n, C]
        logits = jnp.stack([logits[:, i, :, i] for i in range(n)], axis=1)
    else:
      logits = self.param("logits", nn.initializers.zeros, (n, count), jnp.float32)
      logits = jnp.broadcast_to(logits[None, :, None, :], (batch, n, length, count))
    weights = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)  # [B, n, T, C]
    scale = self.param("scale", nn.initializers.ones, (n,), jnp.float32)
    mixed = jnp.einsum("bntc,bctx->bntx", weights,
                       candidates.astype(jnp.promote_types(candidates.dtype,
                                                           jnp.float32)))
    mixed = mixed * scale[None, :, None, None]
    return (mixed, weights) if return_weights else mixed
