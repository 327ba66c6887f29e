"""Fixed graphs for pretraining (graph_source): each graph by hand, and the
model trained on given graphs reads exactly them and leaves the graph
predictor without a gradient."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glomo_jax import GLoMo, ModelConfig
from glomo_jax.pretraining import PretrainConfig
from glomo_jax.pretraining.fixed_graphs import (fixed_graph_fn, previous_graphs,
                                                uniform_graphs)
from conftest import random_variables

MASK = np.array([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]], np.int32)


def check_layout(graphs, mask, layers):
  """Forward layers strictly lower-triangular, backward strictly upper; rows
  sum to 1 or 0; padding neither sends nor receives."""
  g = np.asarray(graphs)
  t = mask.shape[1]
  assert np.all(g[:, :layers] * np.triu(np.ones((t, t)), 0) == 0)
  assert np.all(g[:, layers:] * np.tril(np.ones((t, t)), 0) == 0)
  sums = g.sum(-1)
  assert np.all(np.isclose(sums, 0) | np.isclose(sums, 1))
  pad = mask == 0
  assert np.all(g.transpose(0, 3, 1, 2, 4)[pad] == 0)          # padding targets
  assert np.all(g.transpose(0, 4, 1, 2, 3)[pad] == 0)          # padding sources


def test_uniform_graphs_by_hand():
  g = np.asarray(uniform_graphs(jnp.asarray(MASK), layers=2, heads=3))
  assert g.shape == (2, 4, 3, 6, 6)
  check_layout(g, MASK, 2)
  np.testing.assert_allclose(g[0, 0, 0, 3], [1 / 3, 1 / 3, 1 / 3, 0, 0, 0])
  np.testing.assert_allclose(g[0, 2, 1, 1], [0, 0, 1 / 3, 1 / 3, 1 / 3, 0])
  np.testing.assert_allclose(g[1, 3, 2, 0], [0, 0.5, 0.5, 0, 0, 0])
  assert g[0, 0, 0, 0].sum() == 0 and g[1, 2, 0, 2].sum() == 0   # no source


def test_previous_and_planted_graphs_by_hand():
  g = np.asarray(previous_graphs(jnp.asarray(MASK), layers=1, heads=2))
  check_layout(g, MASK, 1)
  for j in range(1, 5):
    assert g[0, 0, 1, j, j - 1] == 1 and g[0, 0, 1, j].sum() == 1
  for j in range(0, 4):
    assert g[0, 1, 0, j, j + 1] == 1
  assert g[0, 1, 0, 4].sum() == 0          # the last real unit has nothing after it
  arcs = np.full(MASK.shape, -1, np.int32)
  arcs[0, 4], arcs[0, 2], arcs[1, 2] = 1, 1, 0      # 4 → 1; 2 → 1 (adjacent row); 2 → 0
  p = np.asarray(previous_graphs(jnp.asarray(MASK), 1, 2, jnp.asarray(arcs)))
  check_layout(p, MASK, 1)
  # head 0: the row before each arc's target reads the arc's source
  assert p[0, 0, 0, 3, 1] == 1 and p[0, 0, 0, 3].sum() == 1
  assert p[1, 0, 0, 1, 0] == 1
  assert p[0, 0, 0, 1, 0] == 1                      # s = t − 1: no earlier source, the chain
  assert p[0, 0, 0, 4, 3] == 1 and p[0, 0, 0, 2, 1] == 1           # previous elsewhere
  np.testing.assert_array_equal(p[:, 0, 1], g[:, 0, 1])           # other heads: the chain
  np.testing.assert_array_equal(p[:, 1], g[:, 1])                 # backward: the chain


def test_the_model_reads_given_graphs_and_the_predictor_gets_no_gradient():
  config = ModelConfig.tiny()
  model, variables = GLoMo(config), random_variables(config)
  tokens = jax.random.randint(jax.random.PRNGKey(1), (2, 9), 1, config.vocab_size)
  mask = jnp.asarray([[1] * 9, [1] * 6 + [0] * 3])
  everywhere = jnp.arange(9 - config.context_length)
  pos = (everywhere, everywhere)
  own = model.apply(variables, tokens, mask, method=GLoMo.graphs)
  plain, _ = model.apply(variables, tokens, mask, train=False, positions=pos)
  given, _ = model.apply(variables, tokens, mask, train=False, positions=pos, graphs=own)
  np.testing.assert_allclose(given, plain, rtol=1e-6)
  other = previous_graphs(mask, config.num_graph_layers, config.num_heads)
  moved, _ = model.apply(variables, tokens, mask, train=False, positions=pos, graphs=other)
  assert abs(float(moved) - float(plain)) > 1e-3     # float32 noise: ~1e-6

  def loss(params):
    return model.apply({**variables, "params": params}, tokens, mask, train=False,
                       positions=pos, graphs=other)[0]
  grads = jax.jit(jax.grad(loss))(variables["params"])
  for name in ("graph_fw", "graph_bw"):
    assert all(np.all(np.asarray(g) == 0) for g in jax.tree_util.tree_leaves(grads[name]))
  assert any(np.any(np.asarray(g) != 0)
             for g in jax.tree_util.tree_leaves(grads["features_fw"]))
  with pytest.raises(ValueError, match="fixed graphs must be"):
    model.apply(variables, tokens, mask, train=False, positions=pos, graphs=other[:, :2])


def test_fixed_sources_are_checked(tiny_export):
  with pytest.raises(ValueError, match="graph_export"):
    PretrainConfig(graph_source="export")
  with pytest.raises(ValueError, match="built-in corpus"):
    PretrainConfig(graph_source="planted", corpus={"source": "files", "pattern": "x"})
  with pytest.raises(ValueError, match="not one of"):
    PretrainConfig(graph_source="random")
  assert fixed_graph_fn("predicted", 2, 4) is None
  with pytest.raises(ValueError, match="3 of 4"):
    fixed_graph_fn("export", 3, 4, export=tiny_export)
  with pytest.raises(ValueError, match="tokenizer is not the run's"):
    fixed_graph_fn("export", 2, 4, export=tiny_export, tokenizer_fingerprint="another")
  fn = fixed_graph_fn("export", 2, 4, export=tiny_export)
  tokens = jnp.asarray([[3, 4, 5, 6]])
  g = np.asarray(fn({"tokens": tokens, "mask": jnp.ones_like(tokens)}))
  assert g.shape == (1, 4, 4, 4, 4) and g.sum() > 0
