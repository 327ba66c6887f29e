"""GraphMixture: weights are distributions; M is the scaled weighted sum."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glomo_jax.transfer import GraphMixture

B, C, T, D = 2, 6, 4, 3


@pytest.fixture
def inputs():
  rng = np.random.default_rng(1)
  candidates = rng.uniform(0, 1, (B, C, T, T)).astype(np.float32)
  features = rng.standard_normal((B, T, D)).astype(np.float32)
  return candidates, features


def set_scale(variables, scale):
  params = dict(variables["params"])
  params["scale"] = jnp.asarray(scale, jnp.float32)
  return {"params": params}


def test_conditioned_weights_are_per_position_distributions(inputs):
  candidates, features = inputs
  module = GraphMixture(num_mixtures=2, conditioned=True)
  variables = module.init(jax.random.PRNGKey(0), candidates, features)
  assert variables["params"]["logits"]["kernel"].shape == (D, 2 * C)
  np.testing.assert_array_equal(variables["params"]["scale"], [1.0, 1.0])
  variables = set_scale(variables, [2.0, 0.5])
  mixed, weights = module.apply(variables, candidates, features, return_weights=True)
  weights, mixed = np.asarray(weights), np.asarray(mixed)
  assert weights.shape == (B, 2, T, C)
  assert np.all(weights >= 0)
  np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)
  # conditioned on h_t: different positions get different weights
  assert np.abs(weights[:, :, 0] - weights[:, :, 1]).max() > 1e-4
  expected = np.einsum("bntc,bcts->bnts", weights, candidates)
  expected *= np.array([2.0, 0.5])[None, :, None, None]
  assert mixed.shape == (B, 2, T, T)
  np.testing.assert_allclose(mixed, expected, rtol=1e-5, atol=1e-7)
  # weights = softmax(W h_t + b) per mixture
  kernel = np.asarray(variables["params"]["logits"]["kernel"])
  bias = np.asarray(variables["params"]["logits"]["bias"])
  logits = (features @ kernel + bias).reshape(B, T, 2, C).transpose(0, 2, 1, 3)
  soft = np.exp(logits - logits.max(-1, keepdims=True))
  np.testing.assert_allclose(weights, soft / soft.sum(-1, keepdims=True), rtol=1e-5)


def test_free_weights_are_shared_softmax_parameters(inputs):
  candidates, _ = inputs
  module = GraphMixture(num_mixtures=3, conditioned=False)
  variables = module.init(jax.random.PRNGKey(0), candidates)
  _, weights = module.apply(variables, candidates, return_weights=True)
  np.testing.assert_allclose(weights, 1.0 / C, rtol=1e-6)    # logits start at 0
  logits = np.random.default_rng(2).standard_normal((3, C)).astype(np.float32)
  params = dict(variables["params"], logits=jnp.asarray(logits))
  mixed, weights = module.apply({"params": params}, candidates, return_weights=True)
  weights = np.asarray(weights)
  assert weights.shape == (B, 3, T, C) and np.all(weights >= 0)
  np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)
  soft = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
  np.testing.assert_allclose(weights, np.broadcast_to(soft[None, :, None], weights.shape),
                             rtol=1e-5)
  np.testing.assert_allclose(mixed, np.einsum("nc,bcts->bnts", soft, candidates),
                             rtol=1e-5, atol=1e-7)


def test_conditioned_mixture_needs_features(inputs):
  candidates, _ = inputs
  with pytest.raises(ValueError, match="features"):
    GraphMixture().init(jax.random.PRNGKey(0), candidates)
