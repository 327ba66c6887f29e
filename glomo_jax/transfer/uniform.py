"""Uniform graphs: the paper's "uniform graph" ablation (Table 2).

M[t, i] = mask[i] / Σ_j mask[j] for a valid target t, and 0 for a padding
target: every valid position, the target itself included (i = t), gets the
same weight, so H·M at a valid t is the mean of H over the valid positions.

(The authors' code averages over the padded length T instead of the number of
valid positions, and gives padding targets the same row; we use the mean of
the valid positions, so padding changes nothing.)
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def uniform_graphs(mask) -> jax.Array:
  """Uniform graphs over the valid positions.

  Args:
    mask: [B, T], bool or 0/1 (1 = real position).

  Returns:
    float32 [B, T_target, T_source]: rows of valid targets sum to 1 (or all
    are 0 when a row has no valid position), rows and columns of padding are 0.
  """
  m = jnp.asarray(mask).astype(bool).astype(jnp.float32)
  count = jnp.maximum(m.sum(-1), 1.0)                             # [B]
  return m[:, :, None] * m[:, None, :] / count[:, None, None]
