"""GRU cell, causal conv + BatchNorm, per-head mixing and the frequency-scaled
embedding lookup against NumPy references of PyTorch's semantics."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glomo_jax.models.causal_conv import CausalConvBlock, TorchBatchNorm
from glomo_jax.models.feature_predictor import mix_heads
from glomo_jax.models.gru import GRUCell, GRUStack
from glomo_jax.ops.embedding_lookup import embedding_lookup


def sigmoid(x):
  return 1 / (1 + np.exp(-x))


def np_gru(x, h, p):
  gi = x @ p["input_kernel"] + p["input_bias"]
  gh = h @ p["hidden_kernel"] + p["hidden_bias"]
  d = h.shape[-1]
  r = sigmoid(gi[..., :d] + gh[..., :d])
  z = sigmoid(gi[..., d:2 * d] + gh[..., d:2 * d])
  n = np.tanh(gi[..., 2 * d:] + r * gh[..., 2 * d:])
  return (1 - z) * n + z * h


def test_gru_cell_matches_torch_formula():
  cell = GRUCell(6, 4)
  x = jax.random.normal(jax.random.PRNGKey(0), (3, 6))
  h = jax.random.normal(jax.random.PRNGKey(1), (3, 4))
  params = cell.init(jax.random.PRNGKey(2), x, h)
  out = cell.apply(params, x, h)
  p = jax.tree_util.tree_map(np.asarray, params["params"])
  np.testing.assert_allclose(out, np_gru(np.asarray(x), np.asarray(h), p), rtol=1e-5, atol=1e-6)


def test_gru_stack_runs_layers_in_order_from_one_start_state():
  stack = GRUStack(4, 2)
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 4))
  h0 = jax.random.normal(jax.random.PRNGKey(1), (2, 4))
  params = stack.init(jax.random.PRNGKey(2), x, h0)
  out = np.asarray(stack.apply(params, x, h0))
  p = jax.tree_util.tree_map(np.asarray, params["params"])
  seq = np.asarray(x)
  for layer in range(2):
    h, steps = np.asarray(h0), []
    for s in range(3):
      h = np_gru(seq[:, s], h, p[f"layer_{layer}"])
      steps.append(h)
    seq = np.stack(steps, 1)
  np.testing.assert_allclose(out, seq, rtol=1e-5, atol=1e-6)


def test_causal_conv_batchnorm_uses_the_authors_t_plus_k_minus_1_statistics():
  b, t, c, k = 2, 5, 3, 3
  x = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (b, t, c)))
  block = CausalConvBlock(c, k, norm="batch")
  v = block.init(jax.random.PRNGKey(1), x, None, True)
  y, upd = block.apply(v, x, None, True, mutable=["batch_stats"])
  w = np.asarray(v["params"]["kernel"])          # [k, in, out]
  bias = np.asarray(v["params"]["bias"])
  xp = np.pad(x, ((0, 0), (k - 1, k - 1), (0, 0)))
  conv = np.stack([sum(xp[:, p + i] @ w[i] for i in range(k)) for p in range(t + k - 1)], 1) + bias
  mean = conv.mean((0, 1))
  var = conv.var((0, 1))
  ref = np.maximum((conv - mean) / np.sqrt(var + 1e-5), 0)[:, :t]   # scale 1, bias 0
  np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
  n = b * (t + k - 1)
  stats = upd["batch_stats"]["norm"]
  np.testing.assert_allclose(stats["mean"], 0.1 * mean, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(stats["var"], 0.9 + 0.1 * var * n / (n - 1), rtol=1e-5)


def test_causal_conv_is_causal_and_zeroes_padding():
  x = jax.random.normal(jax.random.PRNGKey(0), (1, 6, 4))
  block = CausalConvBlock(4, 3, norm="layer")
  v = block.init(jax.random.PRNGKey(1), x, None, False)
  jac = jax.jacrev(lambda z: block.apply(v, z, None, False))(x)  # [1,6,4,1,6,4]
  dep = np.abs(np.asarray(jac)).sum((0, 2, 3, 5))                 # [out t, in s]
  assert np.all(dep[np.triu_indices(6, 1)] == 0)
  assert np.all(np.diag(dep) > 0)
  mask = jnp.array([[1, 1, 1, 0, 0, 0]])
  y1 = block.apply(v, x, mask, False)
  y2 = block.apply(v, x.at[:, 3:].set(100.0), mask, False)
  np.testing.assert_allclose(y1, y2)


def test_eval_mode_uses_running_statistics():
  bn = TorchBatchNorm()
  x = jnp.arange(12.0).reshape(2, 2, 3)
  v = bn.init(jax.random.PRNGKey(0), x, False)
  v = {"params": v["params"], "batch_stats": {"mean": jnp.array([1., 2., 3.]),
                                              "var": jnp.array([4., 4., 4.])}}
  y = bn.apply(v, x, False)
  np.testing.assert_allclose(y, (np.asarray(x) - [1, 2, 3]) / np.sqrt(4 + 1e-5), rtol=1e-6)


def test_mix_heads_weights_each_slice_with_its_heads_graph():
  b, t, d, k = 1, 3, 4, 2
  values = jnp.arange(b * t * d, dtype=jnp.float32).reshape(b, t, d)
  graph = jnp.zeros((b, k, t, t))
  graph = graph.at[0, 0, 2, 0].set(1.0)      # head 0: target 2 copies source 0
  graph = graph.at[0, 1, 2, 1].set(0.5)      # head 1: target 2 takes half of source 1
  m = np.asarray(mix_heads(graph, values))
  np.testing.assert_allclose(m[0, 2, :2], values[0, 0, :2])
  np.testing.assert_allclose(m[0, 2, 2:], 0.5 * values[0, 1, 2:])
  np.testing.assert_array_equal(m[0, :2], 0.0)


def test_embedding_gradient_scaled_by_token_frequency():
  table = jnp.arange(12.0).reshape(4, 3)
  ids = jnp.array([[1, 1, 2], [1, 3, 3]])
  g_out = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 3))
  f = lambda tab, scale: jnp.sum(embedding_lookup(tab, ids, scale) * g_out)
  plain = np.asarray(jax.grad(f)(table, False))
  scaled = np.asarray(jax.grad(f)(table, True))
  np.testing.assert_allclose(plain[1], g_out[0, 0] + g_out[0, 1] + g_out[1, 0], rtol=1e-6)
  np.testing.assert_allclose(scaled[1], plain[1] / 3, rtol=1e-6)
  np.testing.assert_allclose(scaled[3], plain[3] / 2, rtol=1e-6)
  np.testing.assert_allclose(scaled[2], plain[2], rtol=1e-6)
  np.testing.assert_array_equal(scaled[0], 0.0)
  np.testing.assert_array_equal(embedding_lookup(table, ids, True), embedding_lookup(table, ids))


def test_im2col_conv_equals_xla_convolution_in_value_and_gradient():
  from glomo_jax.models.causal_conv import causal_conv1d
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 7, 5))
  w = jax.random.normal(jax.random.PRNGKey(1), (3, 5, 4))
  ref = lambda x, w: jax.lax.conv_general_dilated(x, w, (1,), [(2, 2)],
                                                  dimension_numbers=("NWC", "WIO", "NWC"))
  np.testing.assert_allclose(causal_conv1d(x, w, 2, 2), ref(x, w), rtol=1e-5, atol=1e-5)
  g1 = jax.grad(lambda x, w: jnp.sum(jnp.sin(causal_conv1d(x, w, 2, 0))), (0, 1))(x, w)
  g2 = jax.grad(lambda x, w: jnp.sum(jnp.sin(ref(x, w)[:, :7])), (0, 1))(x, w)
  for a, b in zip(g1, g2):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_batchnorm_scale_init_ones_or_the_authors_uniform():
  x = jnp.ones((2, 3, 64))
  ones = TorchBatchNorm().init(jax.random.PRNGKey(0), x, False)["params"]["scale"]
  np.testing.assert_array_equal(ones, 1.0)
  drawn = np.asarray(TorchBatchNorm(scale_init="uniform").init(
      jax.random.PRNGKey(0), x, False)["params"]["scale"])
  assert np.all((drawn >= 0) & (drawn < 1)) and drawn.std() > 0.1    # U(0, 1)
  from glomo_jax import GLoMo, ModelConfig  # noqa: PLC0415
  config = ModelConfig.tiny(bn_scale_init="uniform")
  v = GLoMo(config).init(jax.random.PRNGKey(0), jnp.ones((1, 6), jnp.int32))
  scales = [np.asarray(leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(v["params"])
            if "scale" in jax.tree_util.keystr(path)]
  assert len(scales) == 2 * 2 * config.key_layers
  assert all(np.all((s >= 0) & (s < 1)) and s.std() > 0 for s in scales)
  with pytest.raises(ValueError, match="bn_scale_init"):
    ModelConfig.tiny(bn_scale_init="zeros")
