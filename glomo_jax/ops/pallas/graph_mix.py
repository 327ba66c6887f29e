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

Forms: GPU (Triton; `graph_mix_gpu`) and TPU (Mosaic; `graph_mix_tpu`),
each run in interpret mode on the CPU; both use `graph_mix_tiles` (the plan,
the tile math, the costs), neither the other. Here: the public function,
the padding and the custom VJP. Under a mesh of several devices the kernels
run per shard (`ops.pallas.per_shard`: each device's batch rows).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from jax.experimental import pallas as pl

from glomo_jax.ops.pallas import (check_triton_widths, kernel_mode, per_shard, round_up,
                                  tpu_blocks)
from glomo_jax.ops.pallas.graph_mix_gpu import forward_gpu, grads_gpu
from glomo_jax.ops.pallas.graph_mix_tiles import Plan, acc_dtype
from glomo_jax.ops.pallas.graph_mix_tpu import forward_tpu, grads_tpu

# (target rows, sources) per block of the GPU form: Triton needs powers of
# two. The TPU form's are its generation's (`glomo_jax.tpu.KERNEL_BLOCKS`):
# Mosaic TPU wants rows in multiples of 8 and sources (a lane axis of the
# padding mask) in multiples of 128, or the whole padded axis.
DEFAULT_BLOCKS = {"gpu": (64, 64)}

# The residuals a caller's `jax.checkpoint` should keep: the mixed features m
# and the normalisers z, which only the forward kernel computes. With
# `RECOMPUTE_INPUTS` as the policy, q and k (and anything else before the
# kernel) are recomputed in the backward pass instead of kept
# (`models.fused_features`).
SAVED_NAMES = ("graph_mix_out", "graph_mix_norm")
RECOMPUTE_INPUTS = jax.checkpoint_policies.save_only_these_names(*SAVED_NAMES)


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
    block_rows, block_sources: tile sizes (default: `DEFAULT_BLOCKS['gpu']`,
      or the TPU generation's `KERNEL_BLOCKS`; no larger than the padded axes).
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
  default_rows, default_sources = (DEFAULT_BLOCKS["gpu"] if mode.form == "gpu"
                                   else tpu_blocks("graph_mix"))
  fit = pl.next_power_of_2 if mode.form == "gpu" else (lambda n: round_up(n, 8))
  if mode.form == "tpu":
    # an axis within two blocks is one whole block: no padding to whole tiles
    # (T 200 would be 256 in 128-blocks: +28 % of every q, k, v and gradient)
    default_rows = fit(r) if fit(r) <= 2 * default_rows else default_rows
    default_sources = fit(t) if fit(t) <= 2 * default_sources else default_sources
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
  src_ok = jnp.ones((b, t), jnp.int32) if mask is None else jnp.asarray(mask, jnp.int32)
  rows = jnp.arange(r, dtype=jnp.int32) if rows is None else rows
  row_ok = src_ok[:, rows]
  pad = lambda x, n, axis: jnp.pad(x, [(0, n - x.shape[axis]) if a == axis else (0, 0)
                                       for a in range(x.ndim)])
  v = pad(values.reshape(b, t, heads, d // heads), tp, 1)
  m = _mix(plan, pad(q, rp, 2), pad(k, tp, 2), pad(theta.astype(acc_dtype(q)), rp, 2), v,
           pad(rows, rp, 0), pad(row_ok, rp, 1), pad(src_ok, tp, 1))
  return m[:, :r].reshape(b, r, d)


# ---- the custom VJP ---------------------------------------------------------------------
def _forward(plan, q, k, theta, v, rows, row_ok, src_ok):
  """(m [b, rp, K, C], z [b, K, rp]) of padded operands (`_local_mix`)."""
  form = forward_tpu if plan.mode.form == "tpu" else forward_gpu
  return form(plan, q, k, theta, v, rows, row_ok, src_ok)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _mix(plan, q, k, theta, v, rows, row_ok, src_ok):
  return _forward(plan, q, k, theta, v, rows, row_ok, src_ok)[0]


def _mix_fwd(plan, q, k, theta, v, rows, row_ok, src_ok):
  m, z = _forward(plan, q, k, theta, v, rows, row_ok, src_ok)
  m, z = checkpoint_name(m, SAVED_NAMES[0]), checkpoint_name(z, SAVED_NAMES[1])
  return m, (q, k, theta, v, rows, row_ok, src_ok, m, z)


def _mix_bwd(plan, res, dm):
  q, k, theta, v, rows, row_ok, src_ok, m, z = res
  acc = acc_dtype(q)
  dm = dm.astype(v.dtype)
  inner = jnp.einsum("brkc,brkc->bkr", dm.astype(acc), m.astype(acc))
  args = (q, theta, rows, row_ok, dm, z, inner, k, v, src_ok)
  dq, dtheta, dk, dv = (grads_tpu if plan.mode.form == "tpu" else grads_gpu)(plan, *args)
  return (dq.astype(q.dtype), dk.astype(k.dtype), dtheta.astype(theta.dtype),
          dv.astype(v.dtype), None, None, None)


_mix.defvjp(_mix_fwd, _mix_bwd)
