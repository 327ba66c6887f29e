"""`ops.dense`: x @ kernel with a hand-written kernel gradient (both branches)."""
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
