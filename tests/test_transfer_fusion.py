"""HM (graph_features), the uniform graph and the gated fusion."""
import jax
import numpy as np
import pytest

from glomo_jax.transfer import GatedFusion, graph_features, uniform_graphs


def test_one_hot_graph_copies_the_source_row():
  rng = np.random.default_rng(0)
  h = rng.standard_normal((2, 5, 3)).astype(np.float32)
  source = np.array([[3, 0, 4, 4, 1], [1, 2, 0, 0, 3]])       # [b, target] -> source
  graphs = np.zeros((2, 1, 5, 5), np.float32)
  for b in range(2):
    graphs[b, 0, np.arange(5), source[b]] = 1.0
  hm = np.asarray(graph_features(graphs, h))
  assert hm.shape == (2, 1, 5, 3)
  for b in range(2):
    np.testing.assert_array_equal(hm[b, 0], h[b, source[b]])


def test_uniform_graph_gives_the_mean_of_valid_positions():
  rng = np.random.default_rng(1)
  h = rng.standard_normal((2, 6, 4)).astype(np.float32)
  mask = np.array([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]], bool)
  graphs = np.asarray(uniform_graphs(mask))
  assert graphs.shape == (2, 6, 6)
  np.testing.assert_allclose(graphs.sum(-1), mask.astype(np.float32), rtol=1e-6)
  assert graphs[0, 1, 1] == np.float32(1 / 3)                  # self is included
  hm = np.asarray(graph_features(graphs[:, None], h, mask))[:, 0]
  for b in range(2):
    n = mask[b].sum()
    np.testing.assert_allclose(hm[b, :n], np.broadcast_to(h[b, :n].mean(0), (n, 4)),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(hm[b, n:], 0.0)


def test_padding_sources_and_targets_are_cut():
  """Neither non-finite features nor non-finite graph weights at a padding
  position reach a real one."""
  h = np.ones((1, 3, 2), np.float32)
  h[0, 2] = np.nan
  graphs = np.full((1, 1, 3, 3), 0.5, np.float32)
  graphs[0, 0, :, 2] = np.inf
  hm = np.asarray(graph_features(graphs, h, np.array([[1, 1, 0]])))
  np.testing.assert_array_equal(hm[0, 0, :2], 1.0)             # 0.5 + 0.5
  np.testing.assert_array_equal(hm[0, 0, 2], 0.0)


def test_gated_fusion_formula():
  rng = np.random.default_rng(2)
  h = rng.standard_normal((2, 4, 3)).astype(np.float32)
  graphs = rng.uniform(0, 1, (2, 2, 4, 4)).astype(np.float32)
  hm = np.einsum("bnts,bsd->bntd", graphs, h)
  module = GatedFusion(features=5)
  variables = module.init(jax.random.PRNGKey(0), h, hm)
  out = np.asarray(module.apply(variables, h, hm))
  assert out.shape == (2, 4, 3 + 5)
  p = jax.tree_util.tree_map(np.asarray, variables["params"])
  assert p["linear"]["kernel"].shape == (3 * 3, 5)
  x = np.concatenate([h, hm[:, 0], hm[:, 1]], -1)             # [H; HM_1; HM_2]
  gated = (x @ p["linear"]["kernel"] + p["linear"]["bias"]) / (
      1 + np.exp(-(x @ p["gate"]["kernel"] + p["gate"]["bias"])))
  np.testing.assert_array_equal(out[..., :3], h)
  np.testing.assert_allclose(out[..., 3:], gated, rtol=1e-5, atol=1e-6)
  default = GatedFusion()                                     # width d
  assert default.apply(default.init(jax.random.PRNGKey(0), h, hm), h,
                       hm).shape == (2, 4, 6)
  with pytest.raises(ValueError, match="do not fit"):
    module.apply(variables, h, hm[:, :, :3])
