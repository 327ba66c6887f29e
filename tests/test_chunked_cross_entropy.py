"""The chunked tied softmax equals the plain computation in value and gradient."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glomo_jax.ops import chunked_cross_entropy as cce
from glomo_jax.ops.chunked_cross_entropy import balanced_chunk, tied_softmax_cross_entropy


def plain(hidden, table, targets, weights):
  logp = jax.nn.log_softmax(hidden @ table.T, axis=-1)
  ce = -jnp.take_along_axis(logp, targets[:, None], axis=-1)[:, 0]
  return jnp.sum(weights * ce), ce


@pytest.mark.parametrize("unrolled", [True, False])
@pytest.mark.parametrize("chunk", [1, 7, 16, 1000])
def test_value_and_gradient_match_plain(chunk, unrolled, monkeypatch):
  # Two chunks per scan iteration (small vocabularies; 23 chunks at chunk=1
  # leave a remainder) and one (large ones).
  if not unrolled:
    monkeypatch.setattr(cce, "UNROLL_MAX_LOGITS_BYTES", 0)
  k = jax.random.split(jax.random.PRNGKey(0), 4)
  n, v, d = 23, 11, 5
  hidden = jax.random.normal(k[0], (n, d))
  table = jax.random.normal(k[1], (v, d))
  targets = jax.random.randint(k[2], (n,), 0, v)
  weights = jax.random.uniform(k[3], (n,)) * (jnp.arange(n) % 4 != 0)

  loss, ce = tied_softmax_cross_entropy(hidden, table, targets, weights, chunk)
  ref_loss, ref_ce = plain(hidden, table, targets, weights)
  np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
  np.testing.assert_allclose(ce, ref_ce, rtol=1e-5)

  f = lambda h, t, w: tied_softmax_cross_entropy(h, t, targets, w, chunk)[0]
  g = jax.grad(f, argnums=(0, 1, 2))(hidden, table, weights)
  gref = jax.grad(lambda h, t, w: plain(h, t, targets, w)[0], argnums=(0, 1, 2))(
      hidden, table, weights)
  for a, b in zip(g, gref):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_jit_and_scaled_cotangent():
  k = jax.random.split(jax.random.PRNGKey(1), 3)
  hidden = jax.random.normal(k[0], (9, 4))
  table = jax.random.normal(k[1], (6, 4))
  targets = jax.random.randint(k[2], (9,), 0, 6)
  w = jnp.ones(9) / 9
  f = jax.jit(jax.grad(lambda h: 3.0 * tied_softmax_cross_entropy(h, table, targets, w, 4)[0]))
  gref = jax.grad(lambda h: 3.0 * plain(h, table, targets, w)[0])(hidden)
  np.testing.assert_allclose(f(hidden), gref, rtol=1e-5, atol=1e-7)


def test_no_full_logits_array_in_the_compiled_program():
  n, v, d, chunk = 256, 512, 8, 32
  hidden = jnp.ones((n, d))
  table = jnp.ones((v, d))
  targets = jnp.zeros((n,), jnp.int32)
  w = jnp.ones((n,))
  f = jax.jit(jax.value_and_grad(
      lambda h, t: tied_softmax_cross_entropy(h, t, targets, w, chunk)[0], argnums=(0, 1)))
  hlo = f.lower(hidden, table).compile().as_text()
  assert f"f32[{n},{v}]" not in hlo
  assert f"f32[{chunk},{v}]" in hlo


@pytest.mark.parametrize("rows,size,expected", [
    (1920, 512, 480), (960, 512, 480), (1024, 512, 512), (100, 512, 100),
    (1000, 7, 7), (13, 4, 4), (1025, 512, 344), (5, 1, 1)])
def test_balanced_chunks_cover_the_rows_with_little_padding(rows, size, expected):
  chunk = balanced_chunk(rows, size)
  assert chunk == expected
  chunks = -(-rows // chunk)
  assert chunk <= size and chunks == -(-rows // size)
  assert chunks * chunk - rows < 8 * chunks


def test_shape_errors_are_clear():
  with pytest.raises(ValueError, match="dim"):
    tied_softmax_cross_entropy(jnp.ones((3, 4)), jnp.ones((5, 3)), jnp.zeros(3, jnp.int32),
                               jnp.ones(3))
  with pytest.raises(ValueError, match="targets"):
    tied_softmax_cross_entropy(jnp.ones((3, 4)), jnp.ones((5, 4)), jnp.zeros(2, jnp.int32),
                               jnp.ones(3))


def test_two_chunks_per_iteration_only_below_the_logits_size_limit():
  table = jnp.zeros((10_000, 4))
  assert cce._unroll(480, table, jnp.float32) == 2               # 19 MB of logits
  assert cce._unroll(480, jnp.zeros((100_000, 4)), jnp.float32) == 1   # 192 MB
  assert cce._unroll(1000, table, jnp.float64) == 1              # 80 MB in float64
