"""Embedding lookup with PyTorch's optional ``scale_grad_by_freq``."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def embedding_lookup(table: jax.Array, ids: jax.Array,
                     scale_grad_by_freq: bool = False) -> jax.Array:
  """``table[ids]``; optionally its gradient row for each occurrence of a token
  is divided by how often that token occurs in `ids` (as
  ``nn.Embedding(scale_grad_by_freq=True)``, which the authors use).

  Args:
    table: [vocab, dim].
    ids: int [...], values in [0, vocab).

  Returns:
    [..., dim].
  """
  if not scale_grad_by_freq:
    return jnp.take(table, ids, axis=0)
  return _lookup_scaled(table, ids)


@jax.custom_vjp
def _lookup_scaled(table, ids):
  return jnp.take(table, ids, axis=0)


def _lookup_scaled_fwd(table, ids):
  return jnp.take(table, ids, axis=0), (ids, table)


def _lookup_scaled_bwd(res, g):
  ids, table = res
  shape, dtype = table.shape, table.dtype
  flat = ids.reshape(-1)
  counts = jnp.zeros((shape[0],), jnp.int32).at[flat].add(1)
  rows = g.reshape(-1, shape[1]) / counts[flat][:, None].astype(g.dtype)
  dtable = jnp.zeros(shape, dtype).at[flat].add(rows.astype(dtype))
  return dtable, None


_lookup_scaled.defvjp(_lookup_scaled_fwd, _lookup_scaled_bwd)
