"""The pieces of the fused graph mixing (`graph_mix`) that both forms use: the
call's static plan, the tile math of the three kernels, which tiles a causal
call skips, and each kernel's cost.

A tile is a block of target rows (bt) against a block of sources (bs) of one
batch row and head; the scores of a tile are recomputed by each kernel that
needs them (the forward, dq and dkv kernels: 3 score products).
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
  block_rows: int
  block_sources: int
  causal: bool       # rows = 0 … T−1: blocks past the diagonal are skipped
  mode: KernelMode


def acc_dtype(q):
  """The accumulation dtype of queries `q`: float32, or wider."""
  return jnp.promote_types(q.dtype, jnp.float32)


def weights(q, k, theta, rows, row_ok, src_ok, start, acc):
  """a = ReLU(q·kᵀ − θ) on allowed pairs: q [bt, H], k [bs, H], theta / rows /
  row_ok columns [bt, 1], src_ok a row [1, bs] for sources start … start+bs−1
  -> [bt, bs]."""
  s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=acc)
  src = start + lax.broadcasted_iota(jnp.int32, s.shape, 1)
  allowed = (src < rows) & (row_ok > 0) & (src_ok > 0)
  return jnp.where(allowed, jnp.maximum(s - theta, 0.0), 0.0)


def score_grad(a, dg, z, inner):
  """ds = (2 a / z)(dG − ι): a, dg [bt, bs]; z, inner columns [bt, 1]."""
  return (2.0 / z) * a * (dg - inner)


def dot(a, b, contract, acc):
  """`a` · `b` contracting the axes `contract` ((a's,), (b's,)), in `acc`."""
  return lax.dot_general(a, b, (contract, ((), ())), preferred_element_type=acc)


def source_bound(plan, i, tiles):
  """Source tiles that row block i reads: all, or those left of the diagonal."""
  if not plan.causal:
    return tiles
  end = (i + 1) * plan.block_rows + plan.block_sources - 1
  return jnp.minimum(lax.div(end, jnp.int32(plan.block_sources)), tiles)


def first_target(plan, j):
  """The first target block that source block j feeds (0 unless causal)."""
  if not plan.causal:
    return 0
  return lax.div(j * plan.block_sources, jnp.int32(plan.block_rows))


def tile_count(plan, row_blocks: int, source_blocks: int) -> int:
  """Tiles a kernel computes per batch row and head: every (row block,
  source block) pair, or (causal) those `source_bound` reads, which are
  those `first_target` feeds."""
  if not plan.causal:
    return row_blocks * source_blocks
  return sum(min(-(-(i + 1) * plan.block_rows // plan.block_sources), source_blocks)
             for i in range(row_blocks))


def cost(plan, kernel: str, q, k, width: int, v_dtype) -> pl.CostEstimate:
  """The cost of one call of `kernel` ('forward', 'dq' or 'dkv') on padded
  q [b, K, rp, H] and k [b, K, tp, H], values of `width` C per head.

  Per batch row and head, with P the pairs of the computed tiles (`tile_count`
  × bt × bs):
    flops (2 a multiply-add): the scores q·kᵀ (2·P·H, recomputed in each
      kernel), then forward a²·v (2·P·C); dq dG = dm·vᵀ and ds·k (2·P·(C + H));
      dkv G·dm, dG and dsᵀ·q (2·P·(2C + H)). The elementwise work is left out.
    transcendentals: none (ReLU, squares and divisions).
    bytes: a block is read once per grid step that fetches it (a kernel's
      outer blocks once, its inner blocks once per computed tile: the TPU
      form clamps a skipped tile's block index, the GPU form does not load
      it), the outputs written once. Target side: q, θ, position and padding
      (and dm, z, ι in the gradients); source side: k, v and padding.
  """
  b, heads, rp, h = q.shape
  tp = k.shape[2]
  br, bs = plan.block_rows, plan.block_sources
  row_blocks, source_blocks = rp // br, tp // bs
  pairs = tile_count(plan, row_blocks, source_blocks) * br * bs
  tiles = pairs // (br * bs)
  item, acc = q.dtype.itemsize, np.dtype(acc_dtype(q)).itemsize
  v_item = np.dtype(v_dtype).itemsize
  target = br * (h * item + acc + 4 + 4)
  grad_target = target + br * (width * v_item + 2 * acc)
  source = bs * (h * k.dtype.itemsize + width * v_item + 4)
  if kernel == "forward":
    products = h + width
    read = row_blocks * target + tiles * source
    written = rp * (width * v_item + acc)
  elif kernel == "dq":
    products = 2 * h + width
    read = row_blocks * grad_target + tiles * source
    written = rp * (h + 1) * acc
  elif kernel == "dkv":
    products = 2 * h + 2 * width
    read = source_blocks * source + tiles * grad_target
    written = tp * (h + width) * acc
  else:
    raise ValueError(f"no graph mixing kernel {kernel!r}")
  return pl.CostEstimate(flops=int(b * heads * 2 * pairs * products), transcendentals=0,
                         bytes_accessed=int(b * heads * (read + written)))
