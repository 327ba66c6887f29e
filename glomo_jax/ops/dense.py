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


def kernel_gradient(x: jax.Array, g: jax.Array, preferred_element_type=None) -> jax.Array:
  """xᵀ · g for x [m, k] and g [m, n] -> [k, n], as a canonical GEMM.

  The smaller operand is transposed first, behind an optimisation barrier:
  xᵀ [k, m] · g [m, n] when k ≤ n, else (gᵀ [n, m] · x [m, k])ᵀ with the
  small [n, k] result transposed after the GEMM.
  """
  barrier = jax.lax.optimization_barrier
  if x.shape[1] <= g.shape[1]:
    return jnp.dot(barrier(x.T), g, preferred_element_type=preferred_element_type)
  return barrier(jnp.dot(barrier(g.T), x, preferred_element_type=preferred_element_type)).T


def _dense_bwd(res, g):
  x, kernel = res
  k, n = kernel.shape
  dx = jnp.dot(g, kernel.T).astype(x.dtype)
  dkernel = kernel_gradient(x.reshape(-1, k), g.reshape(-1, n))
  return dx, dkernel.astype(kernel.dtype)


dense.defvjp(_dense_fwd, _dense_bwd)
