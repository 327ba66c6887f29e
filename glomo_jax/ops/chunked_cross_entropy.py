"""Softmax cross-entropy through an output layer tied to the embedding,
computed in row chunks so that no [rows, vocab] logits array ever exists.

With N = B·T·D decoder outputs and V = 100k words, the plain computation
would hold N×V logits (plus their softmax and gradient) at once. Here a
`lax.scan` walks over chunks of `chunk_size` rows. When differentiated, the
forward pass computes each chunk's gradient right away (softmax − one-hot),
folds it into dL/dhidden and dL/dtable, and keeps only those: the same three
GEMMs per chunk as the plain computation and no recomputation, with memory
O(chunk·V + V·d).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from glomo_jax.ops.dense import kernel_gradient


def tied_softmax_cross_entropy(hidden: jax.Array, table: jax.Array,
                               targets: jax.Array, weights: jax.Array,
                               chunk_size: int = 1024):
  """Weighted sum of cross-entropies of ``softmax(hidden @ table.T)``.

  Args:
    hidden: [N, dim] decoder outputs (any float dtype).
    table: [V, dim] output layer (the tied embedding; no bias).
    targets: int [N] target ids.
    weights: float [N]; 0 drops a row (padding, invalid positions). Use
      1/count to get a mean.
    chunk_size: at most this many rows per chunk; the N rows are cut into
      ceil(N / chunk_size) chunks of equal size (`balanced_chunk`), so
      padding wastes at most 7 rows per chunk.

  Returns:
    (loss, ce): loss = Σ_n weights_n · CE_n, a scalar in the accumulation
    dtype (float32, or float64 for float64 inputs), differentiable in hidden,
    table and weights; ce: float32 [N] per-row cross-entropies for metrics
    (gradient stopped).
  """
  check_shapes(hidden, table, targets, weights)
  n = hidden.shape[0]
  chunk = balanced_chunk(n, chunk_size)
  pad = (-n) % chunk
  if pad:
    hidden = jnp.pad(hidden, ((0, pad), (0, 0)))
    targets = jnp.pad(targets, (0, pad))
    weights = jnp.pad(weights, (0, pad))
  loss, ce = _chunked_ce(chunk, hidden, table, targets.astype(jnp.int32),
                         weights.astype(_acc_dtype(hidden, table)))
  return loss, jax.lax.stop_gradient(ce[:n])


def check_shapes(hidden, table, targets, weights) -> None:
  """The arguments of a tied softmax cross-entropy (this one or the fused
  kernel's): hidden [N, dim], table [V, dim], targets and weights [N].

  Raises:
    ValueError: naming the shapes that do not fit.
  """
  if hidden.ndim != 2 or table.ndim != 2 or hidden.shape[1] != table.shape[1]:
    raise ValueError(f"hidden {hidden.shape} and table {table.shape} must be "
                     "[N, dim] and [V, dim]")
  if targets.shape != hidden.shape[:1] or weights.shape != hidden.shape[:1]:
    raise ValueError(f"targets {targets.shape} and weights {weights.shape} must "
                     f"be [{hidden.shape[0]}]")


def balanced_chunk(rows: int, chunk_size: int) -> int:
  """Rows per chunk: ceil(rows / chunks) for the fewest chunks of at most
  `chunk_size` rows, rounded up to a multiple of 8 (but never above
  `chunk_size` unless it is below 8), e.g. 1920 rows, chunk_size 512 → 480."""
  chunk_size = max(1, int(chunk_size))
  if rows <= chunk_size:
    return max(rows, 1)
  chunks = -(-rows // chunk_size)
  size = -(-rows // chunks)
  rounded = -(-size // 8) * 8
  return rounded if rounded <= chunk_size else size


def _acc_dtype(*arrays):
  return functools.reduce(jnp.promote_types, [a.dtype for a in arrays], jnp.float32)


def _chunk_ce(h, y, table, acc):
  """Logits [n, V], their logsumexp [n] and the cross-entropies [n] of a chunk."""
  logits = jnp.einsum("nd,vd->nv", h, table, preferred_element_type=acc).astype(acc)
  lse = jax.nn.logsumexp(logits, axis=-1)
  ce = lse - jnp.take_along_axis(logits, y[:, None], axis=-1)[:, 0]
  return logits, lse, ce


# Two chunks per loop iteration when a chunk's logits are at most this big:
# their GEMMs and element-wise passes are independent, so XLA:CPU can run
# one chunk's single-threaded element-wise work beside the other's GEMM
# (benchmarks/RESULTS.md). Above it (the 100k vocabulary), the second chunk's
# [chunk, V] temporaries would cost more memory than the overlap saves.
UNROLL_MAX_LOGITS_BYTES = 64 << 20


def _unroll(chunk, table, acc):
  logits_bytes = chunk * table.shape[0] * jnp.dtype(acc).itemsize
  return 2 if logits_bytes <= UNROLL_MAX_LOGITS_BYTES else 1


def _split(x, chunk):
  return x.reshape((x.shape[0] // chunk, chunk) + x.shape[1:])


def _forward_only(chunk, hidden, table, targets, weights):
  acc = _acc_dtype(hidden, table)

  def body(total, xs):
    h, y, w = xs
    _, _, ce = _chunk_ce(h, y, table, acc)
    return total + jnp.sum(w.astype(acc) * ce), ce

  total, ce = jax.lax.scan(
      body, jnp.zeros((), acc),
      (_split(hidden, chunk), _split(targets, chunk), _split(weights, chunk)))
  return total, ce.reshape(-1).astype(jnp.float32)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _chunked_ce(chunk, hidden, table, targets, weights):
  return _forward_only(chunk, hidden, table, targets, weights)


def _chunked_ce_fwd(chunk, hidden, table, targets, weights):
  acc = _acc_dtype(hidden, table)

  def body(dtable_t, xs):
    h, y, w = xs
    logits, lse, ce = _chunk_ce(h, y, table, acc)
    onehot = jnp.arange(logits.shape[-1], dtype=y.dtype)[None, :] == y[:, None]
    dlogits = (jnp.exp(logits - lse[:, None]) - onehot) * w.astype(acc)[:, None]
    dlogits = dlogits.astype(table.dtype)
    dh = jnp.einsum("nv,vd->nd", dlogits, table, preferred_element_type=acc)
    # The table's gradient is accumulated transposed, [dim, V] = hᵀ · dlogits
    # (`kernel_gradient`: hᵀ materialised, a plain row-major GEMM, which
    # XLA:CPU runs through its fast library path, where dlogitsᵀ · h is not).
    dtable_t = dtable_t + kernel_gradient(h, dlogits, preferred_element_type=acc)
    return dtable_t, (ce, dh.astype(h.dtype))

  dtable_t, (ce, dh) = jax.lax.scan(
      body, jnp.zeros(table.shape[::-1], acc),
      (_split(hidden, chunk), _split(targets, chunk), _split(weights, chunk)),
      unroll=_unroll(chunk, table, acc))
  ce = ce.reshape(-1)
  loss = jnp.sum(weights.astype(acc) * ce)
  res = (dh.reshape(hidden.shape), dtable_t.astype(table.dtype), ce, targets)
  return (loss, ce.astype(jnp.float32)), res


def _chunked_ce_bwd(chunk, res, cotangents):
  del chunk
  dh, dtable_t, ce, targets = res
  g_loss, _ = cotangents  # ce is returned with its gradient stopped
  g = g_loss.astype(dh.dtype)
  return (g * dh, (g.astype(dtable_t.dtype) * dtable_t).T, None,
          g_loss.astype(ce.dtype) * ce)


_chunked_ce.defvjp(_chunked_ce_fwd, _chunked_ce_bwd)
