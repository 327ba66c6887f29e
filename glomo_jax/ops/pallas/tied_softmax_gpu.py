"""The GPU (Triton) form of the fused tied softmax (`tied_softmax`): loops
inside the kernel over the reduced axis (the rows kernel over its split's V
tiles, the vocab kernel over the row blocks), the other axes on the grid;
the tile math is `tied_softmax_tiles`'. Triton loads whole tiles, so the
table comes padded to whole tiles. Run in interpret mode on the CPU by the
tests.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from glomo_jax.ops.pallas import pallas_call
from glomo_jax.ops.pallas.tied_softmax_tiles import (init_carry, rows_cost, rows_tile,
                                                     vocab_cost, vocab_tile)


def _rows_kernel(h_ref, table_ref, y_ref, m_ref, l_ref, t_ref, *u_ref, plan, vocab, acc):
  split = pl.program_id(1)
  h = h_ref[...]
  y = y_ref[...][:, None]

  def body(j, carry):
    start = pl.multiple_of((split * plan.tiles_per_split + j) * plan.block_vocab,
                           plan.block_vocab)
    e = table_ref[pl.ds(start, plan.block_vocab), :]
    return rows_tile(h, e, y, start, vocab, carry, acc)

  carry = init_carry(h.shape[0], h.shape[1], acc, bool(u_ref))
  m, l, t, u = lax.fori_loop(0, plan.tiles_per_split, body, carry)
  m_ref[...], l_ref[...], t_ref[...] = m[:, 0], l[:, 0], t[:, 0]
  if u_ref:
    u_ref[0][...] = u


def _vocab_kernel(table_ref, h_ref, y_ref, w_ref, lse_ref, de_ref, *, plan, acc):
  e = table_ref[...]
  start = pl.program_id(0) * plan.block_vocab

  def body(i, de):
    r = pl.ds(pl.multiple_of(i * plan.block_rows, plan.block_rows), plan.block_rows)
    return de + vocab_tile(h_ref[r, :], e, y_ref[r][:, None], w_ref[r][:, None],
                           lse_ref[r][:, None], start, acc)

  row_blocks = h_ref.shape[0] // plan.block_rows
  de_ref[...] = lax.fori_loop(0, row_blocks, body, jnp.zeros(e.shape, acc))


def _params():
  from jax.experimental.pallas import triton as pltriton  # noqa: PLC0415
  return pltriton.CompilerParams(num_warps=8, num_stages=2)


def rows_gpu(plan, hidden, table, targets, with_grad, vocab, acc):
  """The rows kernel on the table padded to splits × tiles_per_split tiles
  (its first `vocab` rows real): [splits, N] max, sum, target logit and,
  with_grad, [splits, N, d] u."""
  n, d = hidden.shape
  splits, br = plan.vocab_splits, plan.block_rows
  row = jax.ShapeDtypeStruct((splits, n), acc)
  out_shape = [row, row, row]
  out_specs = [pl.BlockSpec((None, br), lambda i, s: (s, i))] * 3
  if with_grad:
    out_shape.append(jax.ShapeDtypeStruct((splits, n, d), acc))
    out_specs.append(pl.BlockSpec((None, br, d), lambda i, s: (s, i, 0)))
  return pallas_call(
      functools.partial(_rows_kernel, plan=plan, vocab=vocab, acc=acc),
      name="tied_softmax_rows",
      cost=rows_cost(plan, hidden, table, with_grad, acc, row_reads=splits),
      grid=(n // br, splits),
      in_specs=[pl.BlockSpec((br, d), lambda i, s: (i, 0)),
                pl.BlockSpec(table.shape, lambda i, s: (0, 0)),
                pl.BlockSpec((br,), lambda i, s: (i,))],
      out_specs=out_specs, out_shape=out_shape, interpret=plan.mode.interpret,
      compiler_params=None if plan.mode.interpret else _params(),
  )(hidden, table, targets)


def vocab_gpu(plan, hidden, table, targets, weights, lse, acc):
  """The vocab kernel on the table padded to whole tiles: dL/dE in `acc`,
  shaped as the padded table."""
  d = hidden.shape[1]
  bv = plan.block_vocab
  whole = lambda a: pl.BlockSpec(a.shape, lambda j: (0,) * a.ndim)
  return pallas_call(
      functools.partial(_vocab_kernel, plan=plan, acc=acc), name="tied_softmax_vocab",
      cost=vocab_cost(plan, hidden, table, acc),
      grid=(table.shape[0] // bv,),
      in_specs=[pl.BlockSpec((bv, d), lambda j: (j, 0)), whole(hidden), whole(targets),
                whole(weights), whole(lse)],
      out_specs=pl.BlockSpec((bv, d), lambda j: (j, 0)),
      out_shape=jax.ShapeDtypeStruct(table.shape, acc), interpret=plan.mode.interpret,
      compiler_params=None if plan.mode.interpret else _params(),
  )(table, hidden, targets, weights, lse)
