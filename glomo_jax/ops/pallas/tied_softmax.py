"""Fused tied-softmax cross-entropy: the loss of
`ops.chunked_cross_entropy.tied_softmax_cross_entropy` and its gradient with
no [rows, V] logits or logits-gradient array in memory.

With hidden rows h_n [N, d], the table E [V, d], targets y_n and weights w_n:
logits s_nv = h_n · E_v, lse_n = log Σ_v exp s_nv, CE_n = lse_n − s_{n,y_n},
loss = Σ_n w_n CE_n, and
  dL/dh_n = w_n (Σ_v softmax_nv E_v − E_{y_n}),
  dL/dE_v = Σ_n w_n (softmax_nv − [v = y_n]) h_n,
  dL/dw_n = CE_n.

Two kernels compute them, each one pass over its loop axis with the logits
tile [rows, V-tile] in registers (GPU) or VMEM (TPU):

* rows kernel: a block of `block_rows` rows (grid) against V in tiles of
  `block_vocab` (loop): the online log-sum-exp (running max m, sum l), the
  target's logit, and u = Σ_v exp(s_v − m) E_v, rescaled when m grows (as
  FlashAttention accumulates its output), so Σ_v softmax_v E_v = u / l. V may
  be cut into `vocab_splits` ranges on the grid, combined afterwards
  (flash-decoding), to give a GPU more blocks than N / block_rows.
* vocab kernel: a V tile (grid) against the rows in blocks (loop), given lse:
  dE for that tile, its logits recomputed.

So the logits GEMM runs twice: 4 GEMMs of 2·N·V·d FLOPs where the reference
runs 3, traded for the [N, V] float32 logits, their bfloat16 gradient and the
two-stage reductions over V in HBM. The gradient is computed in the forward
pass and scaled in the backward pass, as the reference does; without a
gradient, the rows kernel alone runs (no u).

Precision as the reference: logits and accumulators in float32 (float64 for
float64 inputs), the softmax weights cast to the table's dtype before their
GEMMs.

Forms: GPU (Triton; `tied_softmax_gpu`) and TPU (Mosaic; `tied_softmax_tpu`),
each run in interpret mode on the CPU; both use `tied_softmax_tiles` (the
plan, the tile math, the costs), neither the other. Here: the public
function, the row groups and table split over the mesh, and the custom VJP.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl

from glomo_jax.ops.chunked_cross_entropy import check_shapes
from glomo_jax.ops.pallas import (axis_size, batch_axes, check_triton_widths, kernel_mode,
                                  per_shard, round_up, tpu_blocks)
from glomo_jax.ops.pallas.tied_softmax_gpu import rows_gpu, vocab_gpu
from glomo_jax.ops.pallas.tied_softmax_tiles import Plan
from glomo_jax.ops.pallas.tied_softmax_tpu import rows_tpu, vocab_tpu

# (block_rows, block_vocab) of the GPU form: Triton needs powers of two, and
# the rows kernel keeps a [block_rows, d] float32 accumulator per block.
# The TPU form's are its generation's (`glomo_jax.tpu.KERNEL_BLOCKS`):
# Mosaic TPU wants multiples of (8, 128). Starting points, not measured
# optima (benchmarks/kernel_speed.py sweeps them).
DEFAULT_BLOCKS = {"gpu": (64, 64)}
# Blocks of the rows kernel wanted on the grid before V is split.
GPU_MIN_BLOCKS = 256


def fused_tied_softmax_cross_entropy(hidden: jax.Array, table: jax.Array,
                                     targets: jax.Array, weights: jax.Array,
                                     chunk_size: int | None = None, *,
                                     block_rows: int | None = None,
                                     block_vocab: int | None = None,
                                     vocab_splits: int | None = None,
                                     row_groups: int = 1,
                                     vocab_axis: str | None = "fsdp",
                                     form: str | None = None,
                                     interpret: bool | None = None):
  """Weighted sum of cross-entropies of ``softmax(hidden @ table.T)``.

  The arguments and results of `tied_softmax_cross_entropy` (chunk_size is
  accepted for the same signature and unused: the row blocks are
  `block_rows`):

  Args:
    hidden: [N, dim]; table: [V, dim]; targets: int [N]; weights: float [N].
    block_rows, block_vocab: tile sizes (default: `DEFAULT_BLOCKS['gpu']`, or
      the TPU generation's `KERNEL_BLOCKS`).
    vocab_splits: V ranges of the rows kernel on the grid (default: 1 on a
      TPU, else enough for `GPU_MIN_BLOCKS` blocks).
    row_groups: G, the rows are G groups of N / G rows, each in the order of
      the batch (GLoMo: the forward rows, then the backward ones): under a
      mesh each device takes its share of every group (`ops.pallas.per_shard`).
    vocab_axis: under a mesh with this axis (the training loop's 'fsdp', which
      splits the table's rows as its parameters are split) of several devices
      dividing V, each device keeps its V / S rows of the table and its
      gradient: the S devices of a group gather each other's rows (hidden,
      targets, weights: small), score them against their own rows of the
      table, combine the log-sum-exp over the group, and the gradient of
      their hidden rows is summed back to the owners. No device holds the
      whole table or its gradient. Otherwise the table enters every device
      whole and its gradient is summed over the devices.
    form, interpret: `ops.pallas.kernel_mode`.

  Returns:
    (loss, ce): loss = Σ_n weights_n · CE_n in the accumulation dtype,
    differentiable in hidden, table and weights; ce float32 [N] (gradient
    stopped).
  """
  del chunk_size
  check_shapes(hidden, table, targets, weights)
  mode = kernel_mode(form, interpret)
  check_triton_widths(mode, dim=hidden.shape[1])
  n = hidden.shape[0]
  if n % row_groups:
    raise ValueError(f"{n} rows do not make {row_groups} groups")
  axes = batch_axes(n // row_groups)
  shards = axis_size(vocab_axis) if axes and vocab_axis in axes else 1
  split = shards > 1 and table.shape[0] % shards == 0
  local = functools.partial(_local_ce, mode, (block_rows, block_vocab, vocab_splits),
                            (vocab_axis, shards) if split else None)
  group = lambda x: x.reshape((row_groups, n // row_groups) + x.shape[1:])
  loss, ce = per_shard(local, (1, (0, vocab_axis) if split else None, 1, 1), (0, 1),
                       n // row_groups, group(hidden), table, group(targets), group(weights))
  return jnp.sum(loss), jax.lax.stop_gradient(ce.reshape(n))


def _local_ce(mode, blocks, vocab_shards, hidden, table, targets, weights):
  """One device's rows: hidden [G, n, d], targets, weights [G, n] and its
  table [V_local, d] -> (loss [1], ce [G, n]); vocab_shards: (mesh axis, S)
  when the table's rows are split S ways over that axis (the devices of the
  axis score each other's rows), else None."""
  shape = targets.shape
  own = targets.size
  axis = vocab_shards[0] if vocab_shards else None
  if axis:              # the group's rows: [S, G, n] in device order, flattened
    gather = lambda x: lax.all_gather(x, axis).reshape((-1,) + x.shape[2:])
    index = lax.axis_index(axis)
    offset = index * table.shape[0]
  else:
    gather = lambda x: x.reshape((-1,) + x.shape[2:])
    index = offset = 0
  acc = functools.reduce(jnp.promote_types, [hidden.dtype, table.dtype], jnp.float32)
  w_own = weights.reshape(-1).astype(acc)
  hidden, targets = gather(hidden), gather(targets).astype(jnp.int32) - offset
  targets = jnp.where((targets >= 0) & (targets < table.shape[0]), targets, -1)  # -1: elsewhere
  w_all = lax.stop_gradient(gather(weights)).astype(acc)
  block_rows, block_vocab, vocab_splits = blocks
  rows, vocab = DEFAULT_BLOCKS["gpu"] if mode.form == "gpu" else tpu_blocks("tied_softmax")
  # no larger than the arrays (Triton: a power of two; Mosaic: a multiple of 8)
  fit = pl.next_power_of_2 if mode.form == "gpu" else (lambda k: round_up(k, 8))
  block_rows = min(block_rows or rows, fit(hidden.shape[0]))
  block_vocab = min(block_vocab or vocab, fit(table.shape[0]))
  pad = (-hidden.shape[0]) % block_rows
  if pad:
    hidden = jnp.pad(hidden, ((0, pad), (0, 0)))
    targets = jnp.pad(targets, (0, pad))
    w_all = jnp.pad(w_all, (0, pad))
  tiles = -(-table.shape[0] // block_vocab)
  if vocab_splits is None:
    row_blocks = hidden.shape[0] // block_rows
    vocab_splits = 1 if mode.form == "tpu" else -(-GPU_MIN_BLOCKS // row_blocks)
  per_split = -(-tiles // max(1, min(vocab_splits, tiles)))
  plan = Plan(block_rows, block_vocab, -(-tiles // per_split), per_split, mode, axis, own)
  loss, ce = _fused_ce(plan, hidden, table, targets, w_all, w_own, index)
  return loss[None], ce.reshape(shape)


# ---- the custom VJP ------------------------------------------------------------------
def _rows(plan, hidden, table, targets, with_grad, acc):
  """lse [N], target logits [N] and (with_grad) Σ_v softmax_nv E_v [N, d] of
  this device's table rows. The TPU form reads the table as it is (the last
  V tile reads past it, masked); Triton's, padded to whole tiles."""
  vocab = table.shape[0]
  if plan.mode.form == "gpu":
    table = jnp.pad(table, ((0, plan.vocab_splits * plan.tiles_per_split * plan.block_vocab
                             - vocab), (0, 0)))
    out = rows_gpu(plan, hidden, table, targets, with_grad, vocab, acc)
  else:
    out = rows_tpu(plan, hidden, table, targets, with_grad, vocab, acc)
  m, l, t = out[:3]                                  # [splits, N]
  top = jnp.max(m, axis=0)
  scale = jnp.exp(m - top)                           # each split's share
  total = jnp.sum(l * scale, axis=0)
  lse = top + jnp.log(total)
  soft = None
  if with_grad:
    soft = jnp.einsum("sn,snd->nd", scale / total, out[3])
  return lse, jnp.sum(t, axis=0), soft


def _vocab(plan, hidden, table, targets, weights, lse, acc):
  """dL/dE [V, d] in `acc` of this device's table rows."""
  vocab = table.shape[0]
  if plan.mode.form == "gpu":
    table = jnp.pad(table, ((0, round_up(vocab, plan.block_vocab) - vocab), (0, 0)))
    return vocab_gpu(plan, hidden, table, targets, weights, lse, acc)[:vocab]
  return vocab_tpu(plan, hidden, table, targets, weights, lse, acc)


def _combine(plan, lse, t):
  """The group's log-sum-exp and target logits from each device's over its
  table rows (`plan.axis`), and each device's share exp(lse_local − lse)."""
  if plan.axis is None:
    return lse, t, None
  top = lax.pmax(lse, plan.axis)
  share = jnp.exp(lse - top)
  total = lax.psum(share, plan.axis)
  return top + jnp.log(total), lax.psum(t, plan.axis), share / total


def _own(plan, x, index):
  """This device's rows of the group's (the first own_rows without a split)."""
  return lax.dynamic_slice_in_dim(x, index * plan.own_rows, plan.own_rows)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _fused_ce(plan, hidden, table, targets, w_all, w_own, index):
  """(Σ own w · CE, own CE): hidden [N, d], targets (table-row ids) and w_all
  [N] are the group's rows, w_own [n] and the loss the device's own."""
  lse, t = _combine(plan, *_rows(plan, hidden, table, targets, False, w_all.dtype)[:2])[:2]
  ce = _own(plan, lse - t, index)
  return jnp.sum(w_own * ce), ce.astype(jnp.float32)


def _fused_ce_fwd(plan, hidden, table, targets, w_all, w_own, index):
  acc = w_all.dtype
  lse, t, soft = _rows(plan, hidden, table, targets, True, acc)
  lse, t, share = _combine(plan, lse, t)
  if share is not None:
    soft = share[:, None] * soft
  ce = _own(plan, lse - t, index)
  e_y = jnp.where(targets[:, None] >= 0, table[jnp.maximum(targets, 0)], 0)  # y's row here
  # this device's part of each group row's gradient; the gather's transpose
  # sums the parts of a row on its owner
  dh = (w_all[:, None] * (soft - e_y.astype(acc))).astype(hidden.dtype)
  dtable = _vocab(plan, hidden, table, targets, w_all, lse, acc).astype(table.dtype)
  return (jnp.sum(w_own * ce), ce.astype(jnp.float32)), (dh, dtable, ce, index)


def _fused_ce_bwd(plan, res, cotangents):
  # every device's loss enters the caller's sum (`fused_tied_softmax_cross_entropy`),
  # so each has the same cotangent: the parts of a row from other devices
  # are scaled by this device's
  del plan
  dh, dtable, ce, index = res
  g_loss, _ = cotangents  # ce is returned with its gradient stopped
  return (g_loss.astype(dh.dtype) * dh, g_loss.astype(dtable.dtype) * dtable, None,
          jnp.zeros(dh.shape[:1], ce.dtype), g_loss.astype(ce.dtype) * ce,
          np.zeros(np.shape(index), jax.dtypes.float0))


_fused_ce.defvjp(_fused_ce_fwd, _fused_ce_bwd)
