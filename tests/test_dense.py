"""`ops.dense`: x @ kernel with a hand-written kernel gradient (both branches)."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glomo_jax.ops.dense import dense


@pytest.mark.parametrize("shape_x,shape_k", [
    ((2, 5, 3), (3, 7)),    # k ≤ n: xᵀ · g
    ((2, 5, 9), (9, 4)),    # k > n: (gᵀ · x)ᵀ
    ((6, 4), (4, 4)),
])
def test_value_and_gradients_equal_plain_dot(shape_x, shape_k):
  kx, kk, kg = jax.random.split(jax.random.PRNGKey(0), 3)
  x = jax.random.normal(kx, shape_x, jnp.float64 if jax.config.x64_enabled else jnp.float32)
  w = jax.random.normal(kk, shape_k, x.dtype)
  g = jax.random.normal(kg, shape_x[:-1] + shape_k[-1:], x.dtype)
  np.testing.assert_allclose(dense(x, w), x @ w, rtol=1e-6, atol=1e-6)
  loss = lambda f: lambda x, w: jnp.sum(f(x, w) * g)
  got = jax.grad(loss(dense), argnums=(0, 1))(x, w)
  want = jax.grad(loss(jnp.dot), argnums=(0, 1))(x, w)
  # And against NumPy: dx = g Wᵀ, dW = Σ over leading axes of xᵀ g.
  xn, wn, gn = (np.asarray(a, np.float64) for a in (x, w, g))
  dx = gn @ wn.T
  dw = xn.reshape(-1, wn.shape[0]).T @ gn.reshape(-1, wn.shape[1])
  for a, b, c in zip(got, want, (dx, dw)):
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-5)


def test_jit_and_bfloat16_keep_dtypes():
  x = jnp.ones((3, 4), jnp.bfloat16)
  w = jnp.full((4, 2), 0.5, jnp.bfloat16)
  y, (dx, dw) = jax.jit(lambda x, w: (dense(x, w), jax.grad(
      lambda x, w: jnp.sum(dense(x, w).astype(jnp.float32)), (0, 1))(x, w)))(x, w)
  assert y.dtype == dx.dtype == dw.dtype == jnp.bfloat16
  np.testing.assert_array_equal(np.asarray(y, np.float32), np.full((3, 2), 2.0))
  np.testing.assert_array_equal(np.asarray(dw, np.float32), np.full((4, 2), 3.0))


@pytest.mark.parametrize("shape_x,shape_k", [((2, 5, 3), (3, 7)), ((2, 5, 9), (9, 4))])
def test_bias_value_and_gradients_equal_numpy(shape_x, shape_k):
  kx, kk, kb, kg = jax.random.split(jax.random.PRNGKey(1), 4)
  dtype = jnp.float64 if jax.config.x64_enabled else jnp.float32
  x = jax.random.normal(kx, shape_x, dtype)
  w = jax.random.normal(kk, shape_k, dtype)
  b = jax.random.normal(kb, shape_k[-1:], dtype)
  g = jax.random.normal(kg, shape_x[:-1] + shape_k[-1:], dtype)
  xn, wn, bn, gn = (np.asarray(a, np.float64) for a in (x, w, b, g))
  np.testing.assert_allclose(dense(x, w, b), xn @ wn + bn, rtol=1e-5, atol=1e-5)
  got = jax.grad(lambda x, w, b: jnp.sum(dense(x, w, b) * g), argnums=(0, 1, 2))(x, w, b)
  want = (gn @ wn.T, xn.reshape(-1, wn.shape[0]).T @ gn.reshape(-1, wn.shape[1]),
          gn.reshape(-1, wn.shape[1]).sum(0))
  for a, c in zip(got, want):
    assert a.dtype == dtype
    np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-5)


def test_bfloat16_operands_accumulate_in_float32():
  """bfloat16 x and kernel, float32 bias: the result is the float32 sum of
  exact products plus the bias, rounded once to bfloat16; the gradients are
  float32 sums of products of the bfloat16 gradient, rounded once."""
  kx, kk, kb, kg = jax.random.split(jax.random.PRNGKey(2), 4)
  x = jax.random.normal(kx, (64, 96), jnp.bfloat16)
  w = jax.random.normal(kk, (96, 48), jnp.bfloat16)
  b = jax.random.normal(kb, (48,), jnp.float32)
  g = jax.random.normal(kg, (64, 48), jnp.bfloat16)
  y, vjp = jax.vjp(jax.jit(dense), x, w, b)
  dx, dw, db = vjp(g)
  assert (y.dtype, dx.dtype, dw.dtype, db.dtype) == (jnp.bfloat16,) * 3 + (jnp.float32,)
  xn, wn, bn, gn = (np.asarray(a, np.float64) for a in (x, w, b, g))
  rounded = lambda a: np.asarray(jnp.asarray(a, jnp.bfloat16), np.float64)
  # One rounding to bfloat16 (relative 2^-8 at most), not one per product.
  for got, exact in ((y, xn @ wn + bn), (dx, gn @ wn.T), (dw, xn.T @ gn)):
    np.testing.assert_allclose(np.asarray(got, np.float64), rounded(exact), rtol=2 ** -7, atol=1e-2)
  np.testing.assert_allclose(db, gn.sum(0), rtol=1e-6, atol=1e-5)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's bfloat16 GEMM path")
@pytest.mark.parametrize("shape_x,shape_k", [((48, 640), (640, 64)), ((48, 64), (64, 640))])
def test_bfloat16_gemms_are_compiled_as_bfloat16(shape_x, shape_k):
  """All three GEMMs of a bfloat16 `dense` (forward, input and kernel
  gradients, both `kernel_gradient` branches) multiply bfloat16 operands:
  XLA:CPU upcasts a GEMM to float32 when an operand has a transposed
  layout (`row_major_transpose`), which halves its speed on AVX512-BF16."""
  x = jnp.ones(shape_x, jnp.bfloat16)
  w = jnp.ones(shape_k, jnp.bfloat16)
  b = jnp.ones(shape_k[-1:], jnp.float32)
  step = jax.jit(lambda x, w, b: jax.vjp(dense, x, w, b)[1](dense(x, w, b)))
  hlo = step.lower(x, w, b).compile().as_text()
  dots = re.findall(r"= \w+\[[\d,]*\]\{[\d,]*\} dot\(([^)]*)\)", hlo)
  operands = {name.strip().lstrip("%"): None for args in dots for name in args.split(",")}
  types = {m.group(1): m.group(2) for m in
           re.finditer(r"%([\w.\-]+) = (\w+)\[", hlo) if m.group(1) in operands}
  assert len(dots) == 3 and set(types.values()) == {"bf16"}, (dots, types)
