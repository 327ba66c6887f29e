"""Eq. 1 (sparse graph normalisation) on hand-computed cases."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glomo_jax.ops.sparse_graph import allowed_sources, normalize_graph


def test_allowed_sources_is_strictly_causal():
  a = np.asarray(allowed_sources(4))
  expected = np.array([[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]], bool)
  np.testing.assert_array_equal(a, expected)


def test_allowed_sources_masks_padding_sources_and_targets():
  mask = jnp.array([[1, 1, 0, 1]])
  a = np.asarray(allowed_sources(4, mask))[0, 0]
  expected = np.array([[0, 0, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0]], bool)
  np.testing.assert_array_equal(a, expected)


def test_allowed_sources_of_given_rows_are_those_rows():
  mask = jnp.array([[1, 1, 0, 1]])
  rows = jnp.array([3, 0, 3, 2])
  full = np.asarray(allowed_sources(4, mask))[0, 0]
  np.testing.assert_array_equal(np.asarray(allowed_sources(4, mask, rows))[0, 0],
                                full[[3, 0, 3, 2]])
  np.testing.assert_array_equal(np.asarray(allowed_sources(4, rows=rows)),
                                np.asarray(allowed_sources(4))[[3, 0, 3, 2]])


def test_squared_relu_hand_computed():
  # target row j=2 reads sources 0, 1 (2 and 3 are not allowed: i >= j)
  scores = jnp.array([[0., 0., 0., 0.],
                      [3., 0., 0., 0.],
                      [2., 4., 9., 9.],
                      [1., 1., 1., 0.]])
  theta = jnp.array([[0.], [5.], [1.], [0.5]])
  g = np.asarray(normalize_graph(scores, theta, allowed_sources(4)))
  # row 0: nothing allowed -> zeros
  np.testing.assert_array_equal(g[0], 0.0)
  # row 1: relu(3 - 5) = 0 -> nothing survives -> zeros
  np.testing.assert_array_equal(g[1], 0.0)
  # row 2: relu(2-1)^2 = 1, relu(4-1)^2 = 9 -> [0.1, 0.9, 0, 0]
  np.testing.assert_allclose(g[2], [0.1, 0.9, 0.0, 0.0], rtol=1e-6)
  # row 3: three sources of (0.5)^2 each -> 1/3 each
  np.testing.assert_allclose(g[3], [1 / 3, 1 / 3, 1 / 3, 0.0], rtol=1e-6)


def test_epsilon_is_the_authors_1e_16():
  # a single tiny surviving weight a = 1e-16 gives a / (a + 1e-16) = 0.5
  scores = jnp.array([[0., 0.], [1e-8, 0.]], dtype=jnp.float64) if jax.config.jax_enable_x64 \
      else jnp.array([[0., 0.], [1e-8, 0.]])
  g = normalize_graph(scores, 0.0, allowed_sources(2))
  np.testing.assert_allclose(np.asarray(g)[1, 0], 0.5, rtol=1e-5)


def test_softmax_ablation_matches_masked_softmax():
  rng = np.random.default_rng(0)
  s = rng.normal(size=(5, 5)).astype(np.float32)
  g = np.asarray(normalize_graph(jnp.asarray(s), 123.0, allowed_sources(5), "softmax"))
  for j in range(5):
    if j == 0:
      np.testing.assert_array_equal(g[0], 0.0)
      continue
    e = np.exp(s[j, :j] - s[j, :j].max())
    np.testing.assert_allclose(g[j, :j], e / e.sum(), rtol=1e-5)
    np.testing.assert_array_equal(g[j, j:], 0.0)


def test_gradients_are_finite_on_empty_rows():
  s = jnp.zeros((3, 3))
  for sparsity in ("squared_relu", "softmax"):
    grad = jax.grad(lambda x: jnp.sum(normalize_graph(x, 1.0, allowed_sources(3), sparsity) ** 2))(s)
    assert np.all(np.isfinite(np.asarray(grad)))


def plain_graph(scores, threshold, allowed):
  """Eq. 1 written out, differentiated by autodiff (the reference)."""
  a = jnp.where(allowed, jax.nn.relu(scores - threshold), 0.0) ** 2
  return a / (jnp.sum(a, axis=-1, keepdims=True) + 1e-16)


@pytest.mark.parametrize("theta_shape", ["per_row", "per_layer", "scalar"])
def test_hand_written_gradient_equals_autodiff(theta_shape):
  """The squared-ReLU graph's custom VJP (scores and θ) against autodiff of
  the plain formula, float64, with padding, empty rows and every θ layout."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(1)
    scores = jnp.asarray(rng.normal(size=(2, 3, 4, 6, 6)))          # [B, L, K, T, T]
    theta = {"per_row": rng.normal(size=(2, 3, 4, 6, 1)) * 0.5,
             "per_layer": rng.normal(size=(1, 3, 1, 1, 1)) * 0.5,
             "scalar": np.float64(0.3)}[theta_shape]
    theta = jnp.asarray(theta)
    mask = jnp.asarray([[1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1]])
    allowed = allowed_sources(6, mask)[:, None]                     # [B, 1, 1, T, T]
    weights = jnp.asarray(rng.normal(size=scores.shape))
    ours = lambda s, t: jnp.sum(weights * normalize_graph(s, t, allowed))
    ref = lambda s, t: jnp.sum(weights * plain_graph(s, t, allowed))
    np.testing.assert_allclose(ours(scores, theta), ref(scores, theta), rtol=1e-13)
    got = jax.jit(jax.grad(ours, argnums=(0, 1)))(scores, theta)
    want = jax.grad(ref, argnums=(0, 1))(scores, theta)
    for g, w in zip(got, want):
      assert g.shape == w.shape
      np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-13)
    assert np.abs(np.asarray(got[1])).max() > 0


def test_unknown_sparsity_is_a_clear_error():
  with pytest.raises(ValueError, match="sparsity"):
    normalize_graph(jnp.zeros((2, 2)), 0.0, allowed_sources(2), "relu")
