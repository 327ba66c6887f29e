"""The pieces of the fused tied softmax (`tied_softmax`) that both forms use:
the call's static plan, the tile math of its two kernels and their costs.

A tile is a block of rows (bn) against a tile of the table (bv rows of E):
its logits [bn, bv] are computed in the rows kernel and again in the vocab
kernel.
"""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl

from glomo_jax.ops.pallas import KernelMode


@dataclasses.dataclass(frozen=True)
class Plan:
  """Static shape of a call: block sizes, V splits, the kernel mode, the
  mesh axis splitting the table (None: whole) and the device's own rows."""
  block_rows: int
  block_vocab: int
  vocab_splits: int
  tiles_per_split: int
  mode: KernelMode
  axis: str | None = None
  own_rows: int = 0


def logits(h, e, acc):
  """h [rows, d] · e [cols, d]ᵀ -> [rows, cols] in `acc`."""
  return lax.dot_general(h, e, (((1,), (1,)), ((), ())), preferred_element_type=acc)


def rows_tile(h, e, y, start, vocab, carry, acc):
  """One V tile of the rows kernel. h [bn, d], e [bv, d] (table rows start…),
  y int [bn, 1]; carry: running max m, sum l, target logit t (each [bn, 1])
  and u [bn, d] (None without the gradient)."""
  m, l, t, u = carry
  # V in whole tiles: the last tile's rows past V are padding (zeros) or, on
  # a TPU, whatever the block read beyond the table (any bits): masked
  e = jnp.where(start + lax.broadcasted_iota(jnp.int32, (e.shape[0], 1), 0) < vocab, e, 0)
  s = logits(h, e, acc)
  cols = start + lax.broadcasted_iota(jnp.int32, s.shape, 1)
  s = jnp.where(cols < vocab, s, -jnp.inf)
  t = t + jnp.sum(jnp.where(cols == y, s, 0.0), axis=1, keepdims=True)
  m_new = jnp.maximum(m, jnp.max(s, axis=1, keepdims=True))
  rescale = jnp.exp(m - m_new)
  p = jnp.exp(s - m_new)
  l = l * rescale + jnp.sum(p, axis=1, keepdims=True)
  if u is not None:
    u = u * rescale + jnp.dot(p.astype(e.dtype), e, preferred_element_type=acc)
  return m_new, l, t, u


def vocab_tile(h, e, y, w, lse, start, acc):
  """One row block's share of dE for a V tile: Σ_n w_n (softmax_nv − [v = y_n]) h_n.
  h [bn, d], e [bv, d], y int / w / lse [bn, 1] -> [bv, d] in `acc`."""
  s = logits(h, e, acc)
  cols = start + lax.broadcasted_iota(jnp.int32, s.shape, 1)
  g = (jnp.exp(s - lse) - (cols == y).astype(acc)) * w
  return lax.dot_general(g.astype(e.dtype), h, (((0,), (0,)), ((), ())),
                         preferred_element_type=acc)


def init_carry(rows, d, acc, with_grad):
  """The rows kernel's carry before the first V tile: m −∞, l 0, t 0, u 0."""
  return (jnp.full((rows, 1), -jnp.inf, acc), jnp.zeros((rows, 1), acc),
          jnp.zeros((rows, 1), acc), jnp.zeros((rows, d), acc) if with_grad else None)


# ---- costs -----------------------------------------------------------------------------
# flops count 2 a multiply-add of the GEMMs (the logits, recomputed by the
# vocab kernel; u = p·E; dE = gᵀ·h), not the elementwise work; transcendentals
# the exps; bytes the blocks read (once per grid step that fetches them) and
# the outputs written. V is counted in whole tiles (the last one's padding
# is scored and masked).
def rows_cost(plan, hidden, table, with_grad: bool, acc, row_reads: int) -> pl.CostEstimate:
  """The rows kernel's cost on hidden [N, d] (padded to whole row blocks)
  and the table [V, d] in `plan`'s splits × tiles_per_split tiles:
    flops: 2·N·V·d for the logits, as much again for u (with_grad);
    transcendentals: exp of every logit, and of each row's max rescale per tile;
    bytes: the rows' hidden and targets `row_reads` times (TPU: 1, their
      block stays over the V tiles; GPU: once per V split), the table tiles
      once per row block, and the outputs (max, sum, target logit per split
      and row; u [splits, N, d] with the gradient)."""
  n, d = hidden.shape
  tiles = plan.vocab_splits * plan.tiles_per_split
  cols = tiles * plan.block_vocab
  acc_bytes = np.dtype(acc).itemsize
  read = (row_reads * n * (d * hidden.dtype.itemsize + 4)
          + (n // plan.block_rows) * cols * d * table.dtype.itemsize)
  written = plan.vocab_splits * n * (3 + (d if with_grad else 0)) * acc_bytes
  return pl.CostEstimate(flops=int(2 * n * cols * d * (2 if with_grad else 1)),
                         transcendentals=int(n * cols + n * tiles),
                         bytes_accessed=int(read + written))


def vocab_cost(plan, hidden, table, acc) -> pl.CostEstimate:
  """The vocab kernel's cost on hidden [N, d] (padded) and the table [V, d]
  in tiles of block_vocab:
    flops: 2·N·V·d for the logits (recomputed) and as much for dE;
    transcendentals: exp of every logit;
    bytes: each table tile once; the rows' hidden, targets, weights and lse
      once per V tile; dE [V, d] written in `acc`."""
  n, d = hidden.shape
  tiles = -(-table.shape[0] // plan.block_vocab)
  cols = tiles * plan.block_vocab
  acc_bytes = np.dtype(acc).itemsize
  read = (cols * d * table.dtype.itemsize
          + tiles * n * (d * hidden.dtype.itemsize + 4 + 2 * acc_bytes))
  return pl.CostEstimate(flops=int(4 * n * cols * d), transcendentals=int(n * cols),
                         bytes_accessed=int(read + cols * d * acc_bytes))
