"""Fused squared-ReLU graph mixing: the features a graph layer mixes, with no
[batch, K, T_target, T_source] graph in memory.

For one graph layer, per batch row b and head h (target j, source i):
  a_ji = ReLU(q_j · k_i − θ_j) on allowed pairs (i < j, neither padding),
  z_j = Σ_i a_ji² + ε,  G_ji = a_ji² / z_j                  (Eq. 1)
  m_j = Σ_i G_ji v_i = (Σ_i a_ji² v_i) / z_j               (mix_heads, slice h)
which is `ops.sparse_graph.normalize_graph` (squared ReLU, ε = 1e-16) then
`models.feature_predictor.mix_heads`. Nothing needs a running max: one pass
over the sources accumulates Σ a² v and Σ a², divided at the end.

Backward, with dm_j the cotangent of m_j and ι_j = dm_j · m_j:
  dG_ji = dm_j · v_i, and as in `sparse_graph._squared_relu_graph_bwd`,
  ds_ji = (2 a_ji / z_j)(dG_ji − Σ_i' dG_ji' G_ji') = (2 a_ji / z_j)(dm_j · v_i − ι_j),
  dq_j = Σ_i ds_ji k_i,  dθ_j = −Σ_i ds_ji,  dk_i = Σ_j ds_ji q_j,  dv_i = Σ_j G_ji dm_j.
Two kernels, as FlashAttention's backward: per target block, a loop over the
sources (dq, dθ); per source block, a loop over the targets (dk, dv). Scores
are recomputed in each (3 score products in all against the reference's 1;
5 of the other products against 3).

Forms: GPU (Triton; here) and TPU (Mosaic; `graph_mix_tpu`), each run in
interpret mode on the CPU. Under a mesh of several devices the kernels run
per shard (`ops.pallas.per_shard`: each device's batch rows).
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from glomo_jax.ops.pallas import (KernelMode, check_triton_widths, kernel_mode, per_shard,
                                  round_up)
from glomo_jax.ops.sparse_graph import EPSILON

# (target rows, sources) per block and form: Triton needs powers of two;
# Mosaic TPU wants rows in multiples of 8 and sources (a lane axis of the
# padding mask) in multiples of 128, or the whole padded axis.
DEFAULT_BLOCKS = {"gpu": (64, 64), "tpu": (128, 128)}


@dataclasses.dataclass(frozen=True)
class Plan:
  block_rows: int
  block_sources: int
  causal: bool       # rows = 0 … T−1: blocks past the diagonal are skipped
  mode: KernelMode


def fused_graph_mix(q: jax.Array, k: jax.Array, theta: jax.Array, values: jax.Array,
                    rows: jax.Array | None = None, mask: jax.Array | None = None, *,
                    block_rows: int | None = None, block_sources: int | None = None,
                    form: str | None = None, interpret: bool | None = None) -> jax.Array:
  """`mix_heads(normalize_graph(q·kᵀ, θ, allowed_sources(T, mask, rows)), values)`.

  Args:
    q: [batch, K, R, H] queries of the target rows (compute dtype).
    k: [batch, K, T, H] keys of every source.
    theta: [batch, K, R] thresholds θ_j (the graph dtype: float32 or wider).
    values: [batch, T, d], d = K·C; head h mixes the slice h·C … (h+1)·C.
    rows: int [R] target positions (any order, repeats allowed); None: R = T
      and row r is position r.
    mask: optional [batch, T], true/1 for real tokens.
    block_rows, block_sources: tile sizes (default `DEFAULT_BLOCKS` of the
      form, no larger than the padded axes).
    form, interpret: `ops.pallas.kernel_mode`.

  Under a mesh of several devices (in context) the kernels run on each
  device's batch rows (`ops.pallas.per_shard`).

  Returns:
    [batch, R, d] in values.dtype: slice h of row r is Σ_i G^h_{r i} values_i.
  """
  mode = kernel_mode(form, interpret)
  b, heads, r, _ = q.shape
  t, d = values.shape[1], values.shape[2]
  if k.shape[:3] != (b, heads, t) or theta.shape != (b, heads, r) or d % heads:
    raise ValueError(f"q {q.shape}, k {k.shape}, theta {theta.shape} and values "
                     f"{values.shape} do not fit [B, K, R, H], [B, K, T, H], [B, K, R], [B, T, K·C]")
  check_triton_widths(mode, head_dim=q.shape[3], slice_width=d // heads)
  default_rows, default_sources = DEFAULT_BLOCKS[mode.form]
  fit = pl.next_power_of_2 if mode.form == "gpu" else (lambda n: round_up(n, 8))
  plan = Plan(min(block_rows or default_rows, fit(r)),
              min(block_sources or default_sources, fit(t)), rows is None, mode)
  rows = None if rows is None else jnp.asarray(rows, jnp.int32)
  return per_shard(functools.partial(_local_mix, plan), (0, 0, 0, 0, None, 0), 0, b,
                   q, k, theta, values, rows, mask)


def _local_mix(plan, q, k, theta, values, rows, mask):
  """`fused_graph_mix` on one device's rows (the arguments as there)."""
  b, heads, r, _ = q.shape
  t, d = values.shape[1], values.shape[2]
  rp, tp = round_up(r, plan.block_rows), round_up(t, plan.block_sources)
  src_ok = jnp.ones((b, t), jnp.int32) if mask is None else mask.astype(jnp.int32)
  rows = jnp.arange(r, dtype=jnp.int32) if rows is None else rows
  row_ok = src_ok[:, rows]
  pad = lambda x, n, axis: jnp.pad(x, [(0, n - x.shape[axis]) if a == axis else (0, 0)
                                       for a in range(x.ndim)])
  v = pad(values.reshape(b, t, heads, d // heads), tp, 1)
  m = _mix(plan, pad(q, rp, 2), pad(k, tp, 2), pad(theta.astype(_acc(q)), rp, 2), v,
           pad(rows, rp, 0), pad(row_ok, rp, 1), pad(src_ok, tp, 1))
  return m[:, :r].reshape(b, r, d)


def _acc(q):
  return jnp.promote_types(q.dtype, jnp.float32)


# ---- tile math -----------------------------------------------------------------------
def _weights(q, k, theta, rows, row_ok, src_ok, start, acc):
  """a = ReLU(q·kᵀ − θ) on allowed pairs: q [bt, H], k [bs, H], theta / rows /
  row_ok columns [bt, 1], src_ok a row [1, bs] for sources start … start+bs−1
  -> [bt, bs]."""
  s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=acc)
  src = start + lax.broadcasted_iota(jnp.int32, s.shape, 1)
  allowed = (src < rows) & (row_ok > 0) & (src_ok > 0)
  return jnp.where(allowed, jnp.maximum(s - theta, 0.0), 0.0)


def _score_grad(a, dg, z, inner):
  """ds = (2 a / z)(dG − ι): a, dg [bt, bs]; z, inner columns [bt, 1]."""
  return (2.0 / z) * a * (dg - inner)


def _dot(a, b, contract, acc):
  return lax.dot_general(a, b, (contract, ((), ())), preferred_element_type=acc)


def _source_bound(plan, i, tiles):
  """Source tiles that row block i reads: all, or those left of the diagonal."""
  if not plan.causal:
    return tiles
  end = (i + 1) * plan.block_rows + plan.block_sources - 1
  return jnp.minimum(lax.div(end, jnp.int32(plan.block_sources)), tiles)


# ---- kernels (GPU form) --------------------------------------------------------------
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
    a = _weights(q, k_ref[src, :], theta, rows, row_ok, src_ok_ref[src][None, :], j * bs, acc)
    a2 = a * a
    return (num + jnp.dot(a2.astype(v.dtype), v, preferred_element_type=acc),
            z + a2.sum(1, keepdims=True))

  tiles = _source_bound(plan, pl.program_id(2), k_ref.shape[0] // bs)
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
    a = _weights(q, k, theta, rows, row_ok, src_ok_ref[src][None, :], j * bs, acc)
    ds = _score_grad(a, _dot(dm, v_ref[src, :], ((1,), (1,)), acc), z, inner)
    return dq + jnp.dot(ds.astype(k.dtype), k, preferred_element_type=acc), dtheta - ds.sum(1)

  tiles = _source_bound(plan, pl.program_id(2), k_ref.shape[0] // bs)
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
    a = _weights(q, k, theta_ref[tgt][:, None], rows_ref[tgt][:, None],
                 row_ok_ref[tgt][:, None], src_ok, start, acc)
    dv = dv + _dot((a * a / z).astype(dm.dtype), dm, ((0,), (0,)), acc)
    ds = _score_grad(a, _dot(dm, v, ((1,), (1,)), acc), z, inner)
    return dk + _dot(ds.astype(q.dtype), q, ((0,), (0,)), acc), dv

  first = lax.div(start, jnp.int32(br)) if plan.causal else 0
  init = (jnp.zeros(k.shape, acc), jnp.zeros(v.shape, acc))
  dk, dv = lax.fori_loop(first, q_ref.shape[0] // br, body, init)
  dk_ref[...] = dk
  dv_ref[...] = dv


# ---- calls and the custom VJP ------------------------------------------------------------
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


def _call(plan, kernel, grid, in_specs, out_specs, out_shape, name, *args):
  params = None
  if not plan.mode.interpret:
    from jax.experimental.pallas import triton as pltriton  # noqa: PLC0415
    params = pltriton.CompilerParams(num_warps=4, num_stages=2)
  return pl.pallas_call(functools.partial(kernel, plan=plan, acc=_acc(args[0])), grid=grid,
                        in_specs=in_specs, out_specs=out_specs, out_shape=out_shape,
                        name=name, interpret=plan.mode.interpret, compiler_params=params)(*args)


def _forward(plan, q, k, theta, v, rows, row_ok, src_ok):
  """(m [b, rp, K, C], z [b, K, rp]) of padded operands (`_local_mix`)."""
  if plan.mode.form == "tpu":
    from glomo_jax.ops.pallas.graph_mix_tpu import forward_tpu  # noqa: PLC0415
    return forward_tpu(plan, q, k, theta, v, rows, row_ok, src_ok)
  b, heads, rp, _ = q.shape
  target, target_rows, source = _specs(plan, q, v, "rows")
  out_shape = [jax.ShapeDtypeStruct((b, rp) + v.shape[2:], v.dtype),
               jax.ShapeDtypeStruct((b, heads, rp), _acc(q))]
  return _call(plan, _forward_kernel, (b, heads, rp // plan.block_rows), target + source,
               target_rows, out_shape, "graph_mix", q, theta, rows, row_ok, k, v, src_ok)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _mix(plan, q, k, theta, v, rows, row_ok, src_ok):
  return _forward(plan, q, k, theta, v, rows, row_ok, src_ok)[0]


def _mix_fwd(plan, q, k, theta, v, rows, row_ok, src_ok):
  m, z = _forward(plan, q, k, theta, v, rows, row_ok, src_ok)
  return m, (q, k, theta, v, rows, row_ok, src_ok, m, z)


def _mix_bwd(plan, res, dm):
  q, k, theta, v, rows, row_ok, src_ok, m, z = res
  acc = _acc(q)
  dm = dm.astype(v.dtype)
  inner = jnp.einsum("brkc,brkc->bkr", dm.astype(acc), m.astype(acc))
  args = (q, theta, rows, row_ok, dm, z, inner, k, v, src_ok)
  if plan.mode.form == "tpu":
    from glomo_jax.ops.pallas.graph_mix_tpu import grads_tpu  # noqa: PLC0415
    dq, dtheta, dk, dv = grads_tpu(plan, *args)
  else:
    dq, dtheta, dk, dv = _grads_gpu(plan, *args)
  return (dq.astype(q.dtype), dk.astype(k.dtype), dtheta.astype(theta.dtype),
          dv.astype(v.dtype), None, None, None)


def _grads_gpu(plan, *args):
  """(dq, dθ, dk, dv) in the accumulation dtype, shaped as q, θ, k, v."""
  q, theta, k, v = args[0], args[1], args[7], args[8]
  acc = _acc(q)
  b, heads, rp, _ = q.shape
  tp = k.shape[2]
  target, target_rows, source = _specs(plan, q, v, "rows")
  dq, dtheta = _call(plan, _dq_kernel, (b, heads, rp // plan.block_rows),
                     target + target_rows + target_rows[1:] + source,
                     [target[0], target[1]],
                     [jax.ShapeDtypeStruct(q.shape, acc), jax.ShapeDtypeStruct(theta.shape, acc)],
                     "graph_mix_dq", *args)
  target, target_rows, source = _specs(plan, q, v, "sources")
  dk, dv = _call(plan, _dkv_kernel, (b, heads, tp // plan.block_sources),
                 target + target_rows + target_rows[1:] + source,
                 [source[0], source[1]],
                 [jax.ShapeDtypeStruct(k.shape, acc), jax.ShapeDtypeStruct(v.shape, acc)],
                 "graph_mix_dkv", *args)
  return dq, dtheta, dk, dv


_mix.defvjp(_mix_fwd, _mix_bwd)
