"""`x @ kernel` whose kernel gradient is a plain row-major GEMM.

Autodiff's kernel gradient of ``x @ W`` is ``xᵀ · g``, a dot that contracts
the *leading* axis of both operands. XLA:CPU (jax 0.10) does not hand that
form to its fast GEMM library (YNNPACK): it runs it on its own slower dot
emitter, often after copying g into a transposed layout first. Here the
backward pass materialises xᵀ behind an optimisation barrier (so XLA cannot
fold the transpose back into the dot) and multiplies ``xᵀ [k, m] · g [m, n]``,
the canonical form; when g is the narrower of the two (n < k, as in the
im2col convolution) it transposes g instead and the small [n, k] result
after the GEMM. Same numbers, same FLOPs; one extra pass over the smaller
operand.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


@jax.custom_vjp
def dense(x: jax.Array, kernel: jax.Array) -> jax.Array:
  """x [..., k] @ kernel [k, n] -> [..., n] (dtype of the operands' promotion)."""
  return jnp.dot(x, kernel)


def _dense_fwd(x, kernel):
  return jnp.dot(x, kernel), (x, kernel)


def _dense_bwd(res, g):
  x, kernel = res
  k, n = kernel.shape
  dx = jnp.dot(g, kernel.T).astype(x.dtype)
  x2, g2 = x.reshape(-1, k), g.reshape(-1, n)
  barrier = jax.lax.optimization_barrier
  if k <= n:
    dkernel = jnp.dot(barrier(x2.T), g2)                  # xᵀ [k, m] · g [m, n]
  else:
    # g is the smaller operand to transpose: (gᵀ [n, m] · x [m, k])ᵀ, the
    # [n, k] result transposed after the GEMM.
    dkernel = barrier(jnp.dot(barrier(g2.T), x2)).T
  return dx, dkernel.astype(kernel.dtype)


dense.defvjp(_dense_fwd, _dense_bwd)
