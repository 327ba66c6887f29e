"""GraphTransfer: composition, modes, padding, and no gradient into the graphs."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glomo_jax.transfer import (GatedFusion, GraphMixture, GraphTransfer,
                                graph_candidates, graph_features, uniform_graphs)
from glomo_jax.transfer.candidates import mixtures_are_cheaper

B, T, D, L, K = 2, 6, 4, 2, 3


def predictor_like_graphs(rng, mask):
  """[B, 2L, K, T, T]: forward strictly lower, backward strictly upper,
  rows normalised over real sources, padding rows/columns 0."""
  g = rng.uniform(0.1, 1.0, (B, 2 * L, K, T, T))
  lower = np.tril(np.ones((T, T)), -1)
  g[:, :L] *= lower
  g[:, L:] *= lower.T
  g *= (mask[:, None, None, :, None] & mask[:, None, None, None, :])
  total = g.sum(-1, keepdims=True)
  return np.where(total > 0, g / np.where(total > 0, total, 1), 0).astype(np.float32)


@pytest.fixture
def data():
  rng = np.random.default_rng(0)
  mask = np.array([[1] * T, [1] * 4 + [0] * (T - 4)], bool)
  h = rng.standard_normal((B, T, D)).astype(np.float32)
  return h, predictor_like_graphs(rng, mask), mask


@pytest.mark.parametrize("apply_as", ["candidates", "mixtures", "auto"])
def test_glomo_is_candidates_mixtures_then_fusion(data, apply_as):
  """Either way of applying the graphs ('candidates' never forms the candidate
  graphs) equals forming them, mixing them and applying the mixtures to h
  (the paper's order)."""
  h, graphs, mask = data
  module = GraphTransfer(num_layers=L, num_mixtures=2, features=5, apply_as=apply_as)
  variables = module.init(jax.random.PRNGKey(0), h, graphs, mask)
  assert set(variables["params"]) == {"mixture_fw", "mixture_bw", "fusion"}
  out = module.apply(variables, h, graphs, mask)
  assert out.shape == (B, T, D + 5)
  p = variables["params"]
  fw, bw = graph_candidates(graphs, L)
  m_fw = GraphMixture(2).apply({"params": p["mixture_fw"]}, fw, h)
  m_bw = GraphMixture(2).apply({"params": p["mixture_bw"]}, bw, h)
  mixed = jnp.stack([m_fw[:, 0], m_bw[:, 0], m_fw[:, 1], m_bw[:, 1]], 1)  # fw_1, bw_1, …
  expected = GatedFusion(5).apply({"params": p["fusion"]}, h,
                                  graph_features(mixed, h, mask))
  np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
  jitted = jax.jit(module.apply)(variables, h, graphs, mask)
  np.testing.assert_allclose(jitted, out, rtol=1e-5, atol=1e-6)


def test_both_ways_give_the_same_training_outputs_and_gradients(data):
  """With dropout on (the same rng) and float16 graphs, as the tasks train."""
  h, graphs, mask = data
  graphs = graphs.astype(np.float16)
  target = np.random.default_rng(4).standard_normal((B, T, 2 * D)).astype(np.float32)
  results = []
  for apply_as in ("candidates", "mixtures"):
    module = GraphTransfer(num_layers=L, dropout_rate=0.5, apply_as=apply_as)
    variables = module.init(jax.random.PRNGKey(0), h, graphs, mask)

    def loss(params, h, module=module):
      out = module.apply({"params": params}, h, graphs, mask, train=True,
                         rngs={"dropout": jax.random.PRNGKey(7)})
      return jnp.sum(out * target), out
    results.append(jax.grad(loss, argnums=(0, 1), has_aux=True)(variables["params"], h))
  (grads_a, out_a), (grads_b, out_b) = results
  np.testing.assert_allclose(out_a, out_b, rtol=1e-5, atol=1e-6)
  for a, b in zip(jax.tree_util.tree_leaves(grads_a), jax.tree_util.tree_leaves(grads_b)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_auto_mixes_the_matrices_where_that_costs_less():
  """`mixtures_are_cheaper` (K heads, T, d, L, n): the multiply-adds of
  its docstring, and T ≤ 2d."""
  assert mixtures_are_cheaper(4, 128, 100, 3, 2)          # IMDB's words
  assert not mixtures_are_cheaper(4, 832, 100, 3, 2)      # SQuAD's passages
  assert not mixtures_are_cheaper(4, 33, 16, 3, 2)        # T > 2d
  # K 1, T 32, d 16: formed 2·32³ + 2·2·5·32² + 3·2·32²·16 = 184,320 against
  # applied 2·1·5·32²·16 = 163,840
  assert not mixtures_are_cheaper(1, 32, 16, 3, 2)
  # K 4: formed 442,368 against applied 655,360
  assert mixtures_are_cheaper(4, 32, 16, 3, 2)


def test_uniform_mode_uses_the_uniform_graph(data):
  h, _, mask = data
  module = GraphTransfer(mode="uniform")
  variables = module.init(jax.random.PRNGKey(0), h, None, mask)
  assert set(variables["params"]) == {"fusion"}
  assert variables["params"]["fusion"]["linear"]["kernel"].shape == (2 * D, D)
  out = module.apply(variables, h, None, mask)
  expected = GatedFusion().apply({"params": variables["params"]["fusion"]}, h,
                                 graph_features(uniform_graphs(mask)[:, None], h, mask))
  np.testing.assert_array_equal(out, expected)


def test_none_returns_h_unchanged(data):
  h, graphs, mask = data
  module = GraphTransfer(mode="none")
  variables = module.init(jax.random.PRNGKey(0), h, graphs, mask)
  assert not variables.get("params")
  assert module.apply(variables, h, graphs, mask) is h
  assert module.apply(variables, h, None, mask) is h


@pytest.mark.parametrize("mode,conditioned,apply_as", [
    ("glomo", True, "candidates"), ("glomo", False, "candidates"), ("glomo", True, "mixtures"),
    ("uniform", True, "auto")])
def test_padding_never_leaks(data, mode, conditioned, apply_as):
  h, graphs, mask = data
  module = GraphTransfer(mode=mode, num_layers=L, conditioned=conditioned, apply_as=apply_as)
  variables = module.init(jax.random.PRNGKey(0), h, graphs, mask)
  out = np.asarray(module.apply(variables, h, graphs, mask))
  rng = np.random.default_rng(5)
  pad = ~mask
  h2 = h.copy()
  h2[pad] = 1e3 * rng.standard_normal((pad.sum(), D))
  graphs2 = graphs.copy()                    # garbage in padding rows and columns
  pair = mask[:, :, None] & mask[:, None, :]
  noise = rng.uniform(0, 5, graphs.shape).astype(np.float32)
  graphs2 = np.where(pair[:, None, None], graphs2, noise)
  out2 = np.asarray(module.apply(variables, h2, graphs2, mask))
  np.testing.assert_array_equal(out2[mask], out[mask])
  # and real positions see the same as in an unpadded batch of the real part
  n = mask[1].sum()
  alone = module.apply(variables, h[1:, :n], graphs[1:, :, :, :n, :n], mask[1:, :n])
  np.testing.assert_allclose(alone[0], out[1, :n], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("apply_as", ["candidates", "mixtures"])
def test_no_gradient_reaches_the_graphs(data, apply_as):
  h, graphs, mask = data
  module = GraphTransfer(num_layers=L, apply_as=apply_as)
  variables = module.init(jax.random.PRNGKey(0), h, graphs, mask)
  target = np.random.default_rng(3).standard_normal((B, T, 2 * D)).astype(np.float32)

  def loss(params, graphs):
    out = module.apply({"params": params}, h, graphs, mask)
    return jnp.sum(out * target)

  d_params, d_graphs = jax.jit(jax.grad(loss, argnums=(0, 1)))(variables["params"],
                                                              graphs)
  np.testing.assert_array_equal(d_graphs, 0.0)
  for path, leaf in jax.tree_util.tree_leaves_with_path(d_params):
    assert np.abs(np.asarray(leaf)).max() > 0, jax.tree_util.keystr(path)


def test_bad_inputs_are_rejected(data):
  h, graphs, mask = data
  with pytest.raises(ValueError, match="mode"):
    GraphTransfer(mode="self").init(jax.random.PRNGKey(0), h, graphs, mask)
  with pytest.raises(ValueError, match="2L=6"):
    GraphTransfer(num_layers=3).init(jax.random.PRNGKey(0), h, graphs, mask)
  with pytest.raises(ValueError, match="needs the predictor"):
    GraphTransfer(num_layers=L).init(jax.random.PRNGKey(0), h, None, mask)
  with pytest.raises(ValueError, match="apply_as='dense'"):
    GraphTransfer(num_layers=L, apply_as="dense").init(jax.random.PRNGKey(0), h, graphs, mask)


def test_dropout_follows_the_authors(data):
  """Dropout (train=True) touches only the mixture weights' and the gate's
  inputs, with one mask per example and feature shared over positions; H in
  the output stays clean, and without train the rate changes nothing."""
  h, graphs, mask = data
  plain = GraphTransfer(num_layers=L, num_mixtures=2, features=5)
  dropped = GraphTransfer(num_layers=L, num_mixtures=2, features=5, dropout_rate=0.5)
  variables = plain.init(jax.random.PRNGKey(0), h, graphs, mask)
  rngs = {"dropout": jax.random.PRNGKey(3)}
  np.testing.assert_array_equal(dropped.apply(variables, h, graphs, mask),
                                plain.apply(variables, h, graphs, mask))
  out = dropped.apply(variables, h, graphs, mask, train=True, rngs=rngs)
  np.testing.assert_array_equal(out[..., :D], h)
  assert not np.allclose(out, plain.apply(variables, h, graphs, mask))

  # locked masks: features constant over positions give outputs constant
  # over positions (an i.i.d. mask per position would not)
  constant = np.broadcast_to(h[:, :1], h.shape)
  uniform = GraphTransfer(mode="uniform", features=5, dropout_rate=0.5)
  uv = uniform.init(jax.random.PRNGKey(0), constant, None, None)
  gated = uniform.apply(uv, constant, None, None, train=True, rngs=rngs)[..., D:]
  np.testing.assert_allclose(gated, np.broadcast_to(gated[:, :1], gated.shape), rtol=1e-6)
  assert not np.allclose(gated, uniform.apply(uv, constant, None, None)[..., D:])
  mixture = GraphMixture(2, dropout_rate=0.5)
  candidates = np.ones((B, 3, T, D), np.float32)
  mv = mixture.init(jax.random.PRNGKey(1), candidates, constant)
  _, weights = mixture.apply(mv, candidates, constant, return_weights=True,
                             deterministic=False, rngs=rngs)
  np.testing.assert_allclose(weights, np.broadcast_to(weights[:, :, :1], weights.shape),
                             rtol=1e-6)
  _, clean = mixture.apply(mv, candidates, constant, return_weights=True)
  assert not np.allclose(weights[:, 0], clean[:, 0])
