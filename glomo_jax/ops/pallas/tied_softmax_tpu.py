"""The TPU (Mosaic) form of the fused tied softmax (`tied_softmax`): the loop
axis of each kernel is the grid's last, sequential ('arbitrary') axis and
the accumulators live in VMEM scratch across it; the tile math is
`tied_softmax_tiles`'. Row vectors (targets, weights, lse and the running
max, sum and target logit) are [rows, 1] columns, so they broadcast against
a [rows, V-tile] block without a relayout.

Written for Mosaic TPU and checked in interpret mode on the CPU
(tests/test_pallas_tied_softmax.py), by lowering for a TPU
(tests/test_lowering.py) and by the TPU compiler (tests/test_tpu_compile.py);
it has not run on a TPU.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from glomo_jax.ops.pallas import tpu_call
from glomo_jax.ops.pallas.tied_softmax_tiles import (init_carry, rows_cost, rows_tile,
                                                     vocab_cost, vocab_tile)

# in-kernel [rows, V-tile] tiles counted in a call's VMEM estimate: compiled
# for a v5e (float32, d 512, blocks (256, 512) to (2048, 512) and (1024,
# 2048)), each kernel needed its double-buffered blocks and scratch and at
# most two logits tiles; with them, the masked table tile [V-tile, d] and
# each accumulator's update (its scratch's shape: p·E, dE's share), which
# count at a large d
_TILES = 2


def _rows_kernel(h_ref, e_ref, y_ref, *refs, plan, vocab, dim, acc, with_grad):
  outs, scratch = (refs[:4], refs[4:]) if with_grad else (refs[:3], refs[3:])
  split, j = pl.program_id(1), pl.program_id(2)

  @pl.when(j == 0)
  def _init():
    for ref, value in zip(scratch, init_carry(plan.block_rows, dim, acc, with_grad)):
      ref[...] = value

  carry = tuple(ref[...] for ref in scratch) + (() if with_grad else (None,))
  start = (split * plan.tiles_per_split + j) * plan.block_vocab
  carry = rows_tile(h_ref[...], e_ref[...], y_ref[...], start, vocab, carry, acc)
  for ref, value in zip(scratch, carry):
    ref[...] = value

  @pl.when(j == plan.tiles_per_split - 1)
  def _out():
    for ref, value in zip(outs, carry):
      ref[...] = value


def rows_tpu(plan, hidden, table, targets, with_grad, vocab, acc):
  """The rows kernel: ([splits, N] max, sum, target logit, and with_grad
  [splits, N, d] u) as the GPU form returns them; the table as it is (the
  last V tile reads past it, masked)."""
  n, d = hidden.shape
  br, bv, splits, per = plan.block_rows, plan.block_vocab, plan.vocab_splits, plan.tiles_per_split
  col = jax.ShapeDtypeStruct((splits, n, 1), acc)
  col_spec = pl.BlockSpec((None, br, 1), lambda i, s, j: (s, i, 0))
  out_shape, out_specs = [col] * 3, [col_spec] * 3
  scratch = [((br, 1), acc)] * 3
  if with_grad:
    out_shape.append(jax.ShapeDtypeStruct((splits, n, d), acc))
    out_specs.append(pl.BlockSpec((None, br, d), lambda i, s, j: (s, i, 0)))
    scratch.append(((br, d), acc))
  out = tpu_call(
      functools.partial(_rows_kernel, plan=plan, vocab=vocab, dim=d, acc=acc,
                        with_grad=with_grad),
      (hidden, table, targets[:, None]), name="tied_softmax_rows_tpu",
      grid=(n // br, splits, per),
      in_specs=[pl.BlockSpec((br, d), lambda i, s, j: (i, 0)),
                pl.BlockSpec((bv, d), lambda i, s, j: (s * per + j, 0)),
                pl.BlockSpec((br, 1), lambda i, s, j: (i, 0))],
      out_specs=out_specs, out_shape=out_shape, scratch=scratch,
      semantics=("parallel", "parallel", "arbitrary"),
      intermediates=[((br, bv), acc)] * _TILES + [((bv, d), table.dtype)] + scratch,
      cost=rows_cost(plan, hidden, table, with_grad, acc, row_reads=1),
      interpret=plan.mode.interpret)
  return [o[..., 0] for o in out[:3]] + list(out[3:])


def _vocab_kernel(e_ref, h_ref, y_ref, w_ref, lse_ref, de_ref, acc_ref, *, plan, acc):
  i = pl.program_id(1)

  @pl.when(i == 0)
  def _init():
    acc_ref[...] = jnp.zeros(acc_ref.shape, acc)

  acc_ref[...] += vocab_tile(h_ref[...], e_ref[...], y_ref[...], w_ref[...], lse_ref[...],
                             pl.program_id(0) * plan.block_vocab, acc)

  @pl.when(i == pl.num_programs(1) - 1)
  def _out():
    de_ref[...] = acc_ref[...]


def vocab_tpu(plan, hidden, table, targets, weights, lse, acc):
  """The vocab kernel: dL/dE [V, d] in `acc` (the last V tile is cut: its
  rows past V are not written)."""
  n, d = hidden.shape
  br, bv = plan.block_rows, plan.block_vocab
  col = lambda: pl.BlockSpec((br, 1), lambda j, i: (i, 0))
  return tpu_call(
      functools.partial(_vocab_kernel, plan=plan, acc=acc),
      (table, hidden, targets[:, None], weights[:, None], lse[:, None]),
      name="tied_softmax_vocab_tpu", grid=(pl.cdiv(table.shape[0], bv), n // br),
      in_specs=[pl.BlockSpec((bv, d), lambda j, i: (j, 0)),
                pl.BlockSpec((br, d), lambda j, i: (i, 0)), col(), col(), col()],
      out_specs=pl.BlockSpec((bv, d), lambda j, i: (j, 0)),
      out_shape=jax.ShapeDtypeStruct(table.shape, acc), scratch=[((bv, d), acc)],
      semantics=("parallel", "arbitrary"),
      intermediates=[((br, bv), acc)] * _TILES + [((bv, d), acc)],     # + dE's share
      cost=vocab_cost(plan, hidden, table, acc), interpret=plan.mode.interpret)
