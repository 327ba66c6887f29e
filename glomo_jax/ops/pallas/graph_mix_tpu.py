"""The TPU (Mosaic) form of the fused graph mixing (`graph_mix`): the loop
axis of each kernel is the grid's last, sequential ('arbitrary') axis with
the accumulators in VMEM scratch across it; the tile math is
`graph_mix_tiles`'.

Layout for Mosaic's (8, 128) tiles: heads lead, so a block's last two axes
are whole rows of one head (values [b, K, T, C], not [b, T, K, C]); the
target rows' positions and padding are [rows, 1] columns and the sources'
padding a [1, sources] row, so each broadcasts against a [rows, sources]
tile without a relayout. The per-head target vectors (θ, z, ι, dθ) are
stored as [b, K, 1, rows] rows and turned into columns in the kernel: a
[b, K, rows, 1] array in HBM takes 128 lanes a value under the (8, 128)
tiling, 8 MiB a layer at 8 rows × 8 heads × 256 targets. Causal calls skip the
tiles past the diagonal and clamp their block index, so a skipped tile is
not fetched.

Written for Mosaic TPU and checked in interpret mode on the CPU
(tests/test_pallas_graph_mix.py) and by lowering for a TPU
(tests/test_tpu_compile.py); it has not run on a TPU.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from glomo_jax.ops.pallas import tpu_call
from glomo_jax.ops.pallas.graph_mix_tiles import (acc_dtype, cost, dot, first_target,
                                                  score_grad, source_bound, weights)
from glomo_jax.ops.sparse_graph import EPSILON

# in-kernel [rows, sources] tiles counted in a call's VMEM estimate: the
# scores / weights and their square (forward); a, dG and ds (gradients);
# with them, each accumulator's update (its scratch's shape)
_TILES = {"forward": 2, "dq": 3, "dkv": 3}


# ---- kernels ------------------------------------------------------------------------
def _forward_kernel(q_ref, theta_ref, rows_ref, row_ok_ref, k_ref, v_ref, src_ok_ref,
                    m_ref, z_ref, num_acc, z_acc, *, plan, acc):
  i, j = pl.program_id(2), pl.program_id(3)

  @pl.when(j == 0)
  def _init():
    num_acc[...] = jnp.zeros(num_acc.shape, acc)
    z_acc[...] = jnp.zeros(z_acc.shape, acc)

  @pl.when(j < source_bound(plan, i, pl.num_programs(3)))
  def _tile():
    a = weights(q_ref[...], k_ref[...], _column(theta_ref[...]), rows_ref[...],
                row_ok_ref[...], src_ok_ref[...], j * plan.block_sources, acc)
    a2 = a * a
    v = v_ref[...]
    num_acc[...] += jnp.dot(a2.astype(v.dtype), v, preferred_element_type=acc)
    z_acc[...] += a2.sum(1, keepdims=True)

  @pl.when(j == pl.num_programs(3) - 1)
  def _out():
    z = z_acc[...] + EPSILON
    m_ref[...] = (num_acc[...] / z).astype(m_ref.dtype)
    z_ref[...] = _row(z)


def _dq_kernel(q_ref, theta_ref, rows_ref, row_ok_ref, dm_ref, z_ref, inner_ref, k_ref,
               v_ref, src_ok_ref, dq_ref, dtheta_ref, dq_acc, dtheta_acc, *, plan, acc):
  i, j = pl.program_id(2), pl.program_id(3)

  @pl.when(j == 0)
  def _init():
    dq_acc[...] = jnp.zeros(dq_acc.shape, acc)
    dtheta_acc[...] = jnp.zeros(dtheta_acc.shape, acc)

  @pl.when(j < source_bound(plan, i, pl.num_programs(3)))
  def _tile():
    k = k_ref[...]
    a = weights(q_ref[...], k, _column(theta_ref[...]), rows_ref[...], row_ok_ref[...],
                src_ok_ref[...], j * plan.block_sources, acc)
    ds = score_grad(a, dot(dm_ref[...], v_ref[...], ((1,), (1,)), acc), _column(z_ref[...]),
                    _column(inner_ref[...]))
    dq_acc[...] += jnp.dot(ds.astype(k.dtype), k, preferred_element_type=acc)
    dtheta_acc[...] -= ds.sum(1, keepdims=True)

  @pl.when(j == pl.num_programs(3) - 1)
  def _out():
    dq_ref[...] = dq_acc[...]
    dtheta_ref[...] = _row(dtheta_acc[...])


def _dkv_kernel(q_ref, theta_ref, rows_ref, row_ok_ref, dm_ref, z_ref, inner_ref, k_ref,
                v_ref, src_ok_ref, dk_ref, dv_ref, dk_acc, dv_acc, *, plan, acc):
  j, i = pl.program_id(2), pl.program_id(3)

  @pl.when(i == 0)
  def _init():
    dk_acc[...] = jnp.zeros(dk_acc.shape, acc)
    dv_acc[...] = jnp.zeros(dv_acc.shape, acc)

  @pl.when(i >= first_target(plan, j))
  def _tile():
    q, dm, z = q_ref[...], dm_ref[...], _column(z_ref[...])
    a = weights(q, k_ref[...], _column(theta_ref[...]), rows_ref[...], row_ok_ref[...],
                src_ok_ref[...], j * plan.block_sources, acc)
    dv_acc[...] += dot((a * a / z).astype(dm.dtype), dm, ((0,), (0,)), acc)
    ds = score_grad(a, dot(dm, v_ref[...], ((1,), (1,)), acc), z, _column(inner_ref[...]))
    dk_acc[...] += dot(ds.astype(q.dtype), q, ((0,), (0,)), acc)

  @pl.when(i == pl.num_programs(3) - 1)
  def _out():
    dk_ref[...] = dk_acc[...]
    dv_ref[...] = dv_acc[...]


def _column(row: jax.Array) -> jax.Array:
  """A [1, n] row of per-target values as the [n, 1] column a [n, sources]
  tile broadcasts against (through an (8, n) tile's transpose)."""
  return jnp.transpose(jnp.broadcast_to(row, (8, row.shape[1])))[:, :1]


def _row(column: jax.Array) -> jax.Array:
  """An [n, 1] column as the [1, n] row it is stored as."""
  return jnp.transpose(jnp.broadcast_to(column, (column.shape[0], 128)))[:1]


# ---- block specs and calls -------------------------------------------------------------
def _specs(plan, h, c, by_rows: bool):
  """BlockSpecs of the target side (q, θ, rows, row_ok, dm, z, ι) and the
  source side (k, v, src_ok) for a grid (b, K, outer, inner): by_rows, row
  blocks outer and source blocks inner (forward, dq); else the reverse (dk,
  dv). The inner block index is clamped to the tiles the outer block reads."""
  br, bs = plan.block_rows, plan.block_sources
  if by_rows:
    ti = lambda i, j: i
    si = lambda i, j: jnp.minimum(j, source_bound(plan, i, 1 << 30) - 1)
  else:
    ti = lambda j, i: jnp.maximum(i, first_target(plan, j))
    si = lambda j, i: j
  column = lambda: pl.BlockSpec((None, None, 1, br), lambda b, hd, o, n: (b, hd, 0, ti(o, n)))
  target = [pl.BlockSpec((None, None, br, h), lambda b, hd, o, n: (b, hd, ti(o, n), 0)),
            column(),
            pl.BlockSpec((br, 1), lambda b, hd, o, n: (ti(o, n), 0)),
            pl.BlockSpec((None, br, 1), lambda b, hd, o, n: (b, ti(o, n), 0)),
            pl.BlockSpec((None, None, br, c), lambda b, hd, o, n: (b, hd, ti(o, n), 0)),
            column(), column()]
  source = [pl.BlockSpec((None, None, bs, h), lambda b, hd, o, n: (b, hd, si(o, n), 0)),
            pl.BlockSpec((None, None, bs, c), lambda b, hd, o, n: (b, hd, si(o, n), 0)),
            pl.BlockSpec((None, 1, bs), lambda b, hd, o, n: (b, 0, si(o, n)))]
  return target, source


def _call(plan, kernel, grid, in_specs, out_specs, out_shape, scratch, name, which, *args):
  """The call of `kernel` on args (q first, k and v among them) with VMEM
  scratch buffers of these shapes; `which` names its cost and tiles."""
  q, k, v = args[0], args[-3], args[-2]
  acc = acc_dtype(q)
  tile = ((plan.block_rows, plan.block_sources), acc)
  scratch = [(s, acc) for s in scratch]
  return tpu_call(functools.partial(kernel, plan=plan, acc=acc), args, name=name, grid=grid,
                  in_specs=in_specs, out_specs=out_specs, out_shape=out_shape,
                  scratch=scratch, semantics=("parallel", "parallel", "parallel", "arbitrary"),
                  intermediates=[tile] * _TILES[which] + scratch,
                  cost=cost(plan, which, q, k, v.shape[3], v.dtype),
                  interpret=plan.mode.interpret)


def _tpu_layout(theta, rows, row_ok, src_ok, v):
  """The GPU form's padded operands in the TPU layout: θ [b, K, 1, rp], rows
  [rp, 1], row_ok [b, rp, 1], src_ok [b, 1, tp], v [b, K, tp, C]."""
  return (theta[:, :, None], rows[:, None], row_ok[..., None], src_ok[:, None, :],
          jnp.swapaxes(v, 1, 2))


def forward_tpu(plan, q, k, theta, v, rows, row_ok, src_ok):
  """`graph_mix_gpu.forward_gpu`'s results, (m [b, rp, K, C], z [b, K, rp])."""
  b, heads, rp, h = q.shape
  c = v.shape[3]
  theta, rows, row_ok, src_ok, vt = _tpu_layout(theta, rows, row_ok, src_ok, v)
  target, source = _specs(plan, h, c, by_rows=True)
  grid = (b, heads, rp // plan.block_rows, k.shape[2] // plan.block_sources)
  m, z = _call(plan, _forward_kernel, grid, target[:4] + source, [target[4], target[5]],
               [jax.ShapeDtypeStruct((b, heads, rp, c), v.dtype),
                jax.ShapeDtypeStruct((b, heads, 1, rp), acc_dtype(q))],
               [(plan.block_rows, c), (plan.block_rows, 1)], "graph_mix_tpu", "forward",
               q, theta, rows, row_ok, k, vt, src_ok)
  return jnp.swapaxes(m, 1, 2), z[:, :, 0]


def grads_tpu(plan, q, theta, rows, row_ok, dm, z, inner, k, v, src_ok):
  """`graph_mix_gpu.grads_gpu`'s results: (dq, dθ, dk, dv) shaped as q, θ, k, v
  (v [b, tp, K, C]) in the accumulation dtype."""
  acc = acc_dtype(q)
  b, heads, rp, h = q.shape
  tp, c = k.shape[2], v.shape[3]
  theta, rows, row_ok, src_ok, vt = _tpu_layout(theta, rows, row_ok, src_ok, v)
  args = (q, theta, rows, row_ok, jnp.swapaxes(dm, 1, 2), z[:, :, None], inner[:, :, None],
          k, vt, src_ok)
  br, bs = plan.block_rows, plan.block_sources
  target, source = _specs(plan, h, c, by_rows=True)
  dq, dtheta = _call(plan, _dq_kernel, (b, heads, rp // br, tp // bs), target + source,
                     [target[0], target[1]],
                     [jax.ShapeDtypeStruct(q.shape, acc), jax.ShapeDtypeStruct(theta.shape, acc)],
                     [(br, h), (br, 1)], "graph_mix_dq_tpu", "dq", *args)
  target, source = _specs(plan, h, c, by_rows=False)
  dk, dv = _call(plan, _dkv_kernel, (b, heads, tp // bs, rp // br), target + source,
                 [source[0], source[1]],
                 [jax.ShapeDtypeStruct(k.shape, acc), jax.ShapeDtypeStruct(vt.shape, acc)],
                 [(bs, h), (bs, c)], "graph_mix_dkv_tpu", "dkv", *args)
  return dq, dtheta[:, :, 0], dk, jnp.swapaxes(dv, 1, 2)
