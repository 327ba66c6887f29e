"""The learned distance prior (ModelConfig.distance_prior, beyond the paper):
the reweighting by hand, the authors' graphs at a zero prior, rows that sum
to 1 or 0 with the squared ReLU's support, padding, the top rows alone, and
a gradient to the prior. (Causality by Jacobians: tests/test_glomo.py.)"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glomo_jax import GLoMo, ModelConfig
from glomo_jax.models.graph_predictor import GraphPredictor
from glomo_jax.ops.sparse_graph import distance_buckets, distance_reweight
from conftest import random_variables


def test_buckets_and_reweighting_by_hand():
  b = np.asarray(distance_buckets(5, 3))
  assert b[4].tolist() == [2, 2, 1, 0, 0] and b[2].tolist() == [1, 0, 0, 0, 0]
  np.testing.assert_array_equal(np.asarray(distance_buckets(5, 3, jnp.asarray([4, 2]))),
                                b[[4, 2]])
  graph = np.zeros((1, 1, 1, 5, 5))
  graph[0, 0, 0, 4, [0, 1, 3]] = [0.5, 0.25, 0.25]           # distances 4, 3, 1
  logits = jnp.asarray([[[np.log(4.0), 0.0, np.log(2.0)]]])  # d=1: ×4, d=2: ×1, d≥3: ×2
  out = np.asarray(distance_reweight(jnp.asarray(graph), logits, distance_buckets(5, 3)))
  w = np.array([0.5 * 2, 0.25 * 2, 0.25 * 4])
  np.testing.assert_allclose(out[0, 0, 0, 4, [0, 1, 3]], w / w.sum(), rtol=1e-6)
  assert out[0, 0, 0, :4].sum() == 0                         # empty rows stay empty


def graphs(config, variables, tokens, mask=None):
  return np.asarray(GLoMo(config).apply(variables, tokens, mask, method=GLoMo.graphs))


def test_zero_prior_is_the_authors_graph_and_a_prior_keeps_the_support():
  base = ModelConfig.tiny()
  tokens = jax.random.randint(jax.random.PRNGKey(3), (2, 9), 1, base.vocab_size)
  mask = jnp.asarray([[1] * 9, [1] * 6 + [0] * 3])
  plain = random_variables(base)
  for init in (0.0, 1.0):
    config = base.replace(distance_prior=4, distance_prior_init=init)
    logits = GLoMo(config).init(jax.random.PRNGKey(0), tokens)["params"]["graph_fw"][
        "distance_logits"]
    assert logits.shape == (2, 4, 4)
    np.testing.assert_allclose(logits[1, 2], -init * np.log([1, 2, 3, 4]), rtol=1e-6)
    params = {**plain["params"],
              **{g: {**plain["params"][g], "distance_logits": logits}
                 for g in ("graph_fw", "graph_bw")}}
    variables = {**plain, "params": params}
    g, g0 = graphs(config, variables, tokens, mask), graphs(base, plain, tokens, mask)
    if init == 0.0:
      np.testing.assert_allclose(g, g0, rtol=1e-5, atol=1e-7)
    else:
      assert not np.allclose(g, g0)
      np.testing.assert_array_equal(g > 0, g0 > 0)             # same support
      near = np.mean(g[:, 0, :, 5, 4] - g0[:, 0, :, 5, 4])
      assert near > 0                                           # 1/d favours the neighbour
    sums = g.sum(-1)
    assert np.all(np.isclose(sums, 1, atol=1e-5) | (sums == 0))
    np.testing.assert_array_equal(g[1, :, :, 6:], 0)
    np.testing.assert_array_equal(g[1, :, :, :, 6:], 0)


def test_top_rows_alone_equal_the_full_graph_and_the_prior_learns():
  config = ModelConfig.tiny(distance_prior=3, distance_prior_init=0.5)
  predictor = GraphPredictor(config)
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 8, config.dim))
  variables = predictor.init(jax.random.PRNGKey(1), x)
  rows = jnp.asarray([7, 2, 2, 5])
  full = predictor.apply(variables, x)
  lower, top = predictor.apply(variables, x, None, False, rows, method=GraphPredictor.split_graphs)
  np.testing.assert_allclose(top, full[:, -1][:, :, rows], rtol=1e-6)
  np.testing.assert_allclose(lower, full[:, :-1], rtol=1e-6)

  def loss(params):
    g = predictor.apply({**variables, "params": params}, x)
    return jnp.sum(g[..., 1:, :] * jnp.arange(8.0))          # rewards far sources
  grad = jax.jit(jax.grad(loss))(variables["params"])["distance_logits"]
  assert np.all(np.isfinite(grad)) and np.abs(np.asarray(grad)).sum() > 0


def test_pixels_have_no_distance_prior():
  from glomo_jax.models.pixel_glomo import PixelGLoMo  # noqa: PLC0415
  config = ModelConfig.tiny(distance_prior=2)
  with pytest.raises(ValueError, match="text units"):
    PixelGLoMo(config, (2, 2)).init(jax.random.PRNGKey(0), jnp.zeros((1, 2, 2, 3), jnp.uint8))


def test_the_fused_graph_kernel_refuses_a_distance_prior():
  with pytest.raises(ValueError, match="distance_prior"):
    ModelConfig.tiny(distance_prior=2, kernels="fused_graph")
  ModelConfig.tiny(distance_prior=2, kernels="fused_loss")     # the loss kernel is indifferent
