"""The GPU (Triton) form of the fused graph mixing (`graph_mix`): a grid over
(batch row, head, block) and an in-kernel loop over the other side, the
source blocks (forward, dq) or the target blocks (dk, dv); the tile math is
`graph_mix_tiles`'. Run in interpret mode on the CPU by the tests.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from glomo_jax.ops.pallas import pallas_call
from glomo_jax.ops.pallas.graph_mix_tiles import (acc_dtype, cost, dot, score_grad,
                                                  source_bound, weights)
from glomo_jax.ops.sparse_graph import EPSILON


# ---- kernels ---------------------------------------------------------------------------
def _columns(*refs):
  """q [bt, H] and the target rows' vectors theta, rows, row_ok as columns [bt, 1]."""
  return (refs[0][...],) + tuple(ref[...][:, None] for ref in refs[1:])


def _forward_kernel(q_ref, theta_ref, rows_ref, row_ok_ref, k_ref, v_ref, src_ok_ref,
                    m_ref, z_ref, *, plan, acc):
  q, theta, rows, row_ok = _columns(q_ref, theta_ref, rows_ref, row_ok_ref)
  bs = plan.block_sources

  def body(j, carry):
    num, z = carry
    src = pl.ds(pl.multiple_of(j * bs, bs), bs)
    v = v_ref[src, :]
    a = weights(q, k_ref[src, :], theta, rows, row_ok, src_ok_ref[src][None, :], j * bs, acc)
    a2 = a * a
    return (num + jnp.dot(a2.astype(v.dtype), v, preferred_element_type=acc),
            z + a2.sum(1, keepdims=True))

  tiles = source_bound(plan, pl.program_id(2), k_ref.shape[0] // bs)
  init = (jnp.zeros((q.shape[0], v_ref.shape[-1]), acc), jnp.zeros((q.shape[0], 1), acc))
  num, z = lax.fori_loop(0, tiles, body, init)
  z = z + EPSILON
  m_ref[...] = (num / z).astype(m_ref.dtype)
  z_ref[...] = z[:, 0]


def _dq_kernel(q_ref, theta_ref, rows_ref, row_ok_ref, dm_ref, z_ref, inner_ref, k_ref,
               v_ref, src_ok_ref, dq_ref, dtheta_ref, *, plan, acc):
  q, theta, rows, row_ok = _columns(q_ref, theta_ref, rows_ref, row_ok_ref)
  dm, z, inner = dm_ref[...], z_ref[...][:, None], inner_ref[...][:, None]
  bs = plan.block_sources

  def body(j, carry):
    dq, dtheta = carry
    src = pl.ds(pl.multiple_of(j * bs, bs), bs)
    k = k_ref[src, :]
    a = weights(q, k, theta, rows, row_ok, src_ok_ref[src][None, :], j * bs, acc)
    ds = score_grad(a, dot(dm, v_ref[src, :], ((1,), (1,)), acc), z, inner)
    return dq + jnp.dot(ds.astype(k.dtype), k, preferred_element_type=acc), dtheta - ds.sum(1)

  tiles = source_bound(plan, pl.program_id(2), k_ref.shape[0] // bs)
  init = (jnp.zeros(q.shape, acc), jnp.zeros(q.shape[:1], acc))
  dq, dtheta = lax.fori_loop(0, tiles, body, init)
  dq_ref[...] = dq
  dtheta_ref[...] = dtheta


def _dkv_kernel(q_ref, theta_ref, rows_ref, row_ok_ref, dm_ref, z_ref, inner_ref, k_ref,
                v_ref, src_ok_ref, dk_ref, dv_ref, *, plan, acc):
  k, v, src_ok = k_ref[...], v_ref[...], src_ok_ref[...][None, :]
  br = plan.block_rows
  start = pl.program_id(2) * plan.block_sources

  def body(i, carry):
    dk, dv = carry
    tgt = pl.ds(pl.multiple_of(i * br, br), br)
    q, dm, z, inner = q_ref[tgt, :], dm_ref[tgt, :], z_ref[tgt][:, None], inner_ref[tgt][:, None]
    a = weights(q, k, theta_ref[tgt][:, None], rows_ref[tgt][:, None],
                row_ok_ref[tgt][:, None], src_ok, start, acc)
    dv = dv + dot((a * a / z).astype(dm.dtype), dm, ((0,), (0,)), acc)
    ds = score_grad(a, dot(dm, v, ((1,), (1,)), acc), z, inner)
    return dk + dot(ds.astype(q.dtype), q, ((0,), (0,)), acc), dv

  first = lax.div(start, jnp.int32(br)) if plan.causal else 0
  init = (jnp.zeros(k.shape, acc), jnp.zeros(v.shape, acc))
  dk, dv = lax.fori_loop(first, q_ref.shape[0] // br, body, init)
  dk_ref[...] = dk
  dv_ref[...] = dv


# ---- block specs and calls -------------------------------------------------------------
def _specs(plan, q, v, blocked: str):
  """BlockSpecs of (q, theta, rows, row_ok | k, v, src_ok) for a grid (b, h, block):
  the target side cut into row blocks (blocked='rows') or the source side
  into source blocks (blocked='sources'), the other side whole."""
  rp, h = q.shape[2], q.shape[3]
  tp, c = v.shape[1], v.shape[3]
  br = plan.block_rows if blocked == "rows" else rp
  bs = plan.block_sources if blocked == "sources" else tp
  ti = (lambda b, hd, i: i) if blocked == "rows" else (lambda b, hd, i: 0)
  si = (lambda b, hd, i: i) if blocked == "sources" else (lambda b, hd, i: 0)
  target = [pl.BlockSpec((None, None, br, h), lambda b, hd, i: (b, hd, ti(b, hd, i), 0)),
            pl.BlockSpec((None, None, br), lambda b, hd, i: (b, hd, ti(b, hd, i))),
            pl.BlockSpec((br,), lambda b, hd, i: (ti(b, hd, i),)),
            pl.BlockSpec((None, br), lambda b, hd, i: (b, ti(b, hd, i)))]
  target_rows = [pl.BlockSpec((None, br, None, c), lambda b, hd, i: (b, ti(b, hd, i), hd, 0)),
                 pl.BlockSpec((None, None, br), lambda b, hd, i: (b, hd, ti(b, hd, i)))]
  source = [pl.BlockSpec((None, None, bs, h), lambda b, hd, i: (b, hd, si(b, hd, i), 0)),
            pl.BlockSpec((None, bs, None, c), lambda b, hd, i: (b, si(b, hd, i), hd, 0)),
            pl.BlockSpec((None, bs), lambda b, hd, i: (b, si(b, hd, i)))]
  return target, target_rows, source


def _call(plan, kernel, grid, in_specs, out_specs, out_shape, name, which, *args):
  """The call of `kernel` on args (q first, k and v among them); `which`
  names its cost (`graph_mix_tiles.cost`)."""
  params = None
  if not plan.mode.interpret:
    from jax.experimental.pallas import triton as pltriton  # noqa: PLC0415
    params = pltriton.CompilerParams(num_warps=4, num_stages=2)
  q, k, v = args[0], args[-3], args[-2]
  return pallas_call(functools.partial(kernel, plan=plan, acc=acc_dtype(q)), name=name,
                     cost=cost(plan, which, q, k, v.shape[3], v.dtype), grid=grid,
                     in_specs=in_specs, out_specs=out_specs, out_shape=out_shape,
                     interpret=plan.mode.interpret, compiler_params=params)(*args)


def forward_gpu(plan, q, k, theta, v, rows, row_ok, src_ok):
  """(m [b, rp, K, C], z [b, K, rp]) of padded operands (`graph_mix._local_mix`)."""
  b, heads, rp, _ = q.shape
  target, target_rows, source = _specs(plan, q, v, "rows")
  out_shape = [jax.ShapeDtypeStruct((b, rp) + v.shape[2:], v.dtype),
               jax.ShapeDtypeStruct((b, heads, rp), acc_dtype(q))]
  return _call(plan, _forward_kernel, (b, heads, rp // plan.block_rows), target + source,
               target_rows, out_shape, "graph_mix", "forward",
               q, theta, rows, row_ok, k, v, src_ok)


def grads_gpu(plan, *args):
  """(dq, dθ, dk, dv) in the accumulation dtype, shaped as q, θ, k, v, of
  args (q, θ, rows, row_ok, dm, z, ι, k, v, src_ok) (`graph_mix._mix_bwd`)."""
  q, theta, k, v = args[0], args[1], args[7], args[8]
  acc = acc_dtype(q)
  b, heads, rp, _ = q.shape
  tp = k.shape[2]
  target, target_rows, source = _specs(plan, q, v, "rows")
  dq, dtheta = _call(plan, _dq_kernel, (b, heads, rp // plan.block_rows),
                     target + target_rows + target_rows[1:] + source,
                     [target[0], target[1]],
                     [jax.ShapeDtypeStruct(q.shape, acc), jax.ShapeDtypeStruct(theta.shape, acc)],
                     "graph_mix_dq", "dq", *args)
  target, target_rows, source = _specs(plan, q, v, "sources")
  dk, dv = _call(plan, _dkv_kernel, (b, heads, tp // plan.block_sources),
                 target + target_rows + target_rows[1:] + source,
                 [source[0], source[1]],
                 [jax.ShapeDtypeStruct(k.shape, acc), jax.ShapeDtypeStruct(v.shape, acc)],
                 "graph_mix_dkv", "dkv", *args)
  return dq, dtheta, dk, dv
