"""`x @ kernel (+ bias)` with a hand-written backward pass.

Two things the automatic one does not do:

* Kernel gradients as plain row-major GEMMs. Autodiff's kernel gradient of
  ``x @ W`` is ``xᵀ · g``, a dot that contracts the *leading* axis of both
  operands. XLA:CPU (jax 0.10) does not hand that form to its fast GEMM
  library (YNNPACK): it runs it on its own slower dot emitter, often after
  copying g into a transposed layout first. Here the backward pass
  materialises xᵀ behind an optimisation barrier (so XLA cannot fold the
  transpose back into the dot) and multiplies ``xᵀ [k, m] · g [m, n]``, the
  canonical form; when g is the narrower of the two (n < k, as in the im2col
  convolution) it transposes g instead and the small [n, k] result after the
  GEMM. Same numbers, same FLOPs; one extra pass over the smaller operand.
* Mixed precision done the fast way. Every GEMM, forward and backward,
  multiplies operands of the compute dtype (bfloat16 in mixed precision) and
  accumulates in float32 (float64 for float64 operands); the bias is added
  and its gradient summed in that accumulation dtype. On a CPU with
  AVX512-BF16 that is XLA:CPU's fast bfloat16 path, where a bfloat16-output
  GEMM is not; a bfloat16 bias gradient would
  be a long bfloat16 reduction, which XLA:CPU rewrites into slow windowed
  reductions. For float32 operands all of this is the plain float32
  computation.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def dense(x: jax.Array, kernel: jax.Array, bias: jax.Array | None = None) -> jax.Array:
  """x [..., k] @ kernel [k, n] (+ bias [n]) -> [..., n].

  The GEMM accumulates, and the bias is added, in `accumulation_dtype`; the
  result has the dtype of x's and kernel's promotion (the bias's dtype does
  not change it). Gradients: x and kernel in their own dtypes, bias in its
  own.
  """
  return _dense(x, kernel, bias)


def accumulation_dtype(*dtypes) -> jnp.dtype:
  """float32, or wider when an operand is wider (float64)."""
  out = jnp.dtype(jnp.float32)
  for dtype in dtypes:
    out = jnp.promote_types(out, dtype)
  return out


def kernel_gradient(x: jax.Array, g: jax.Array, preferred_element_type=None) -> jax.Array:
  """xᵀ · g for x [m, k] and g [m, n] -> [k, n], as a canonical GEMM.

  The smaller operand is transposed first, behind an optimisation barrier:
  xᵀ [k, m] · g [m, n] when k ≤ n, else (gᵀ [n, m] · x [m, k])ᵀ with the
  small [n, k] result transposed after the GEMM.
  """
  barrier = jax.lax.optimization_barrier
  if x.shape[1] <= g.shape[1]:
    return jnp.dot(barrier(row_major_transpose(x)), g,
                   preferred_element_type=preferred_element_type)
  return barrier(jnp.dot(barrier(row_major_transpose(g)), x,
                         preferred_element_type=preferred_element_type)).T


def row_major_transpose(a: jax.Array, axes=None) -> jax.Array:
  """`jnp.transpose(a, axes)`, for a GEMM operand.

  XLA gives a transpose a permuted ("transposed") memory layout, and for a
  bfloat16 GEMM with float32 output XLA:CPU checks the operands' layouts
  before it assigns real ones: a permuted layout fails the check, and the
  GEMM is then run in float32 on upcast copies at half the speed. Going
  through a size-1 leading axis gives the result a plain row-major layout,
  which passes. float32 operands take the plain transpose (a GEMM of
  float32 operands is never upcast, and its layout is left to XLA).
  """
  if a.dtype != jnp.bfloat16:
    return jnp.transpose(a, axes)
  axes = tuple(range(a.ndim))[::-1] if axes is None else tuple(axes)
  return jnp.transpose(a[None], (0,) + tuple(i + 1 for i in axes))[0]


def _forward(x, kernel, bias):
  acc = accumulation_dtype(x.dtype, kernel.dtype)
  y = jnp.dot(x, kernel, preferred_element_type=acc)
  if bias is not None:
    y = y + bias.astype(acc)
  return y.astype(jnp.promote_types(x.dtype, kernel.dtype))


@jax.custom_vjp
def _dense(x, kernel, bias):
  return _forward(x, kernel, bias)


def _dense_fwd(x, kernel, bias):
  # Backward needs only the bias's dtype (a 0-d stand-in), or None.
  bias_like = None if bias is None else jnp.zeros((), bias.dtype)
  return _forward(x, kernel, bias), (x, kernel, bias_like)


def _dense_bwd(res, g):
  x, kernel, bias_like = res
  k, n = kernel.shape
  acc = accumulation_dtype(x.dtype, kernel.dtype)
  dx = jnp.dot(g, row_major_transpose(kernel), preferred_element_type=acc).astype(x.dtype)
  g2 = g.reshape(-1, n)
  dkernel = kernel_gradient(x.reshape(-1, k), g2, preferred_element_type=acc)
  dbias = None if bias_like is None else jnp.sum(g2, axis=0, dtype=acc).astype(bias_like.dtype)
  return dx, dkernel.astype(kernel.dtype), dbias


_dense.defvjp(_dense_fwd, _dense_bwd)
