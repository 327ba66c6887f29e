"""Each ablation switch changes what it claims and nothing else.

Flax derives each parameter's initial value from its path, so two configs
initialised with the same key share the values of every parameter they both
have; a switch may only add, remove or use differently the parameters of the
part it ablates.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glomo_jax import GLoMo, ModelConfig
from glomo_jax.models.feature_predictor import mix_heads
from conftest import init_model

flat = lambda tree: {"/".join(str(getattr(k, "key", k)) for k in path): v
                     for path, v in jax.tree_util.tree_leaves_with_path(tree)}


def param_diff(a, b, ablated=()):
  """Names only in a, only in b; every shared parameter outside `ablated` is equal."""
  fa, fb = flat(a["params"]), flat(b["params"])
  only_a, only_b = set(fa) - set(fb), set(fb) - set(fa)
  for k in set(fa) & set(fb) - set(ablated):
    np.testing.assert_array_equal(fa[k], fb[k], err_msg=k)
  return only_a, only_b


def features_of(model, variables, tokens):
  return np.asarray(model.apply(variables, tokens, method=GLoMo.features))


def graphs_of(model, variables, tokens):
  return np.asarray(model.apply(variables, tokens, method=GLoMo.graphs))


def test_composition_switch_changes_only_the_feature_update():
  base = ModelConfig.tiny()
  m1, v1, tok = init_model(base)
  m2, v2, _ = init_model(base.replace(composition="residual"))
  only_gru, only_res = param_diff(v1, v2)
  assert all("features_" in k and "gru" in k for k in only_gru)
  assert only_res == {f"features_{d}/{n}" for d in ("fw", "bw") for n in ("value_kernel", "value_bias")}
  np.testing.assert_array_equal(graphs_of(m1, v1, tok), graphs_of(m2, v2, tok))
  # residual: F^1 = F^0 + mix(G^1, F^0 V + b), checked on the forward direction
  f = features_of(m2, v2, tok)
  g = graphs_of(m2, v2, tok)
  p = v2["params"]["features_fw"]
  values = f[0] @ np.asarray(p["value_kernel"][0]) + np.asarray(p["value_bias"][0])
  ref = f[0] + np.asarray(mix_heads(jnp.asarray(g[:, 0]), jnp.asarray(values)))
  np.testing.assert_allclose(f[1], ref, rtol=1e-5, atol=1e-6)


def test_scalar_threshold_is_the_query_threshold_with_zero_weight():
  base = ModelConfig.tiny()
  m1, v1, tok = init_model(base)
  m2, v2, _ = init_model(base.replace(threshold="scalar"))
  only_q, only_s = param_diff(v1, v2, {f"graph_{d}/threshold_bias" for d in ("fw", "bw")})
  assert only_q == {f"graph_{d}/threshold_kernel" for d in ("fw", "bw")}
  assert only_s == set()
  params = jax.tree_util.tree_map(lambda x: x, v1["params"])
  for d in ("fw", "bw"):
    params[f"graph_{d}"]["threshold_kernel"] = jnp.zeros_like(params[f"graph_{d}"]["threshold_kernel"])
    params[f"graph_{d}"]["threshold_bias"] = jnp.array([0.3, -0.2])
    v2["params"][f"graph_{d}"]["threshold_bias"] = jnp.array([0.3, -0.2])
  v1 = {**v1, "params": params}
  np.testing.assert_allclose(graphs_of(m1, v1, tok), graphs_of(m2, v2, tok), rtol=1e-6)


def test_zero_threshold_is_the_query_threshold_at_zero():
  base = ModelConfig.tiny()
  m1, v1, tok = init_model(base)
  m2, v2, _ = init_model(base.replace(threshold="zero"))
  only_q, only_z = param_diff(v1, v2)
  assert only_q == {f"graph_{d}/{n}" for d in ("fw", "bw")
                    for n in ("threshold_kernel", "threshold_bias")}
  assert only_z == set()
  params = jax.tree_util.tree_map(lambda x: x, v1["params"])
  for d in ("fw", "bw"):
    for n in ("threshold_kernel", "threshold_bias"):
      params[f"graph_{d}"][n] = jnp.zeros_like(params[f"graph_{d}"][n])
  zeroed = graphs_of(m1, {**v1, "params": params}, tok)
  g = graphs_of(m2, v2, tok)
  np.testing.assert_allclose(zeroed, g, rtol=1e-6)
  # a = ReLU(s)²: the query threshold at its initial values cuts other sources
  assert not np.array_equal(graphs_of(m1, v1, tok) > 0, g > 0)


def test_softmax_switch_changes_only_the_normalisation():
  base = ModelConfig.tiny()
  m1, v1, tok = init_model(base)
  m2, v2, _ = init_model(base.replace(sparsity="softmax"))
  only_relu, only_soft = param_diff(v1, v2)
  assert only_relu == {f"graph_{d}/{n}" for d in ("fw", "bw")
                       for n in ("threshold_kernel", "threshold_bias")}
  assert only_soft == set()
  g = graphs_of(m2, v2, tok)
  L = base.num_graph_layers
  fw = g[:, :L]
  assert np.all(fw[:, :, :, 1:, :].sum(-1) > 0.999)        # softmax: every row j ≥ 1 is full
  assert np.all(fw[..., 1:, 0] > 0)                        # dense: no source is cut to zero
  np.testing.assert_array_equal(np.triu(fw), 0.0)


def test_coupled_switch_computes_graphs_from_the_features():
  base = ModelConfig.tiny()
  m1, v1, tok = init_model(base)
  cfg = base.replace(decoupled=False, key_layers=0, query_layers=0)
  m2, v2, _ = init_model(cfg)
  only_dec, only_cpl = param_diff(v1, v2)
  assert all("_cnn/" in k for k in only_dec) and only_cpl == set()
  assert "batch_stats" not in v2 or not jax.tree_util.tree_leaves(v2.get("batch_stats", {}))
  # layer 2's graph is a function of F^1: recompute it from the features
  f = features_of(m2, v2, tok)
  g = graphs_of(m2, v2, tok)
  g2 = m2.apply(v2, jnp.asarray(f[1]), method=lambda m, h: m.graph_fw.layer_graph(1, h))
  np.testing.assert_allclose(g[:, 1], g2, rtol=1e-5, atol=1e-6)
  g1 = m2.apply(v2, jnp.asarray(f[0]), method=lambda m, h: m.graph_fw.layer_graph(0, h))
  np.testing.assert_allclose(g[:, 0], g1, rtol=1e-5, atol=1e-6)


def test_single_layer_switch_keeps_the_first_layer():
  base = ModelConfig.tiny()
  m1, v1, tok = init_model(base)
  m2, v2, _ = init_model(base.replace(num_graph_layers=1))
  assert flat(v2["params"]).keys() == flat(v1["params"]).keys()
  p = jax.tree_util.tree_map(lambda x: x, v1["params"])
  for d in ("fw", "bw"):
    for n in ("key_kernel", "key_bias", "query_kernel", "query_bias", "threshold_kernel",
              "threshold_bias"):
      p[f"graph_{d}"][n] = p[f"graph_{d}"][n][:1]
  g1 = graphs_of(m1, v1, tok)
  g2 = graphs_of(m2, {**v1, "params": p}, tok)
  assert g2.shape[1] == 2
  np.testing.assert_allclose(g2[:, 0], g1[:, 0], rtol=1e-6)
  np.testing.assert_allclose(g2[:, 1], g1[:, 2], rtol=1e-6)


def test_context_length_switch_changes_only_the_decoded_span():
  base = ModelConfig.tiny()
  m1, v1, tok = init_model(base, length=10)
  m2, v2, _ = init_model(base.replace(context_length=1), length=10)
  assert param_diff(v1, v2) == (set(), set())
  run = lambda m, v: m.apply(v, tok, train=True, mutable=["batch_stats"])[0][1]["tokens"]
  assert float(run(m1, v1)) == 2 * 2 * 7 * 3
  assert float(run(m2, v2)) == 2 * 2 * 9 * 1


def test_sentence_objective_predicts_the_next_segment():
  from glomo_jax.models.sentence_objective import sentence_targets
  b, t, d, s = 1, 9, 2, 3
  top = jnp.arange(b * t * d, dtype=jnp.float32).reshape(b, t, d)
  emb = -top
  tokens = jnp.arange(t)[None]
  h0, inputs, targets, weights = sentence_targets(top, emb, tokens, None, s)
  np.testing.assert_allclose(h0[0, 0], top[0, :3].mean(0))
  np.testing.assert_allclose(h0[0, 1], top[0, 3:6].mean(0))
  np.testing.assert_array_equal(targets[0], [[3, 4, 5], [6, 7, 8]])
  np.testing.assert_array_equal(inputs[0, 0], [np.zeros(d), emb[0, 3], emb[0, 4]])
  np.testing.assert_array_equal(weights, 1.0)
  base = ModelConfig.tiny(sentence_length=3)
  m1, v1, tok = init_model(base, length=10)
  m2, v2, _ = init_model(base.replace(objective="sentence"), length=10)
  assert param_diff(v1, v2) == (set(), set())
  np.testing.assert_array_equal(graphs_of(m1, v1, tok), graphs_of(m2, v2, tok))
  (l2, met), _ = m2.apply(v2, tok, train=True, mutable=["batch_stats"])
  assert float(met["tokens"]) == 2 * 2 * 2 * 3   # 2 dirs × batch 2 × 2 next-segments × 3
  with pytest.raises(ValueError, match="2 segments"):
    sentence_targets(top[:, :5], emb[:, :5], tokens[:, :5], None, 3)


def test_layer_norm_switch_changes_only_the_cnn_normalisation():
  base = ModelConfig.tiny()
  m1, v1, tok = init_model(base)
  m2, v2, _ = init_model(base.replace(norm="layer"))
  assert param_diff(v1, v2) == (set(), set())       # both have scale and bias per channel
  assert "batch_stats" not in v2
  f1, f2 = features_of(m1, v1, tok), features_of(m2, v2, tok)
  np.testing.assert_array_equal(f1[0], f2[0])         # embeddings untouched
  assert not np.allclose(f1[1], f2[1])
