"""Transfer candidates: Λ products per head and direction, count and order; the
candidates applied to features without forming them."""
import numpy as np
import pytest

from glomo_jax.transfer import candidate_names, graph_candidates, propagated_candidates


def random_graphs(rng, batch, num_layers, heads, length):
  """Row-normalised random positive graphs [B, 2L, K, T, T] (dense, so every
  product entry is exercised)."""
  g = rng.uniform(0.1, 1.0, (batch, 2 * num_layers, heads, length, length))
  return (g / g.sum(-1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("num_layers", [1, 3])
def test_candidates_are_layers_then_products_in_documented_order(num_layers):
  rng = np.random.default_rng(0)
  batch, heads, length = 2, 3, 5
  graphs = random_graphs(rng, batch, num_layers, heads, length)
  fw, bw = graph_candidates(graphs, num_layers)
  count = (2 * num_layers - 1) * heads
  assert fw.shape == bw.shape == (batch, count, length, length)
  assert len(candidate_names(num_layers, heads)) == count
  for got, direction in ((np.asarray(fw), graphs[:, :num_layers]),
                         (np.asarray(bw), graphs[:, num_layers:])):
    g = direction.astype(np.float64)
    expected = [g[:, 0]]
    product = g[:, 0]
    for layer in range(1, num_layers):
      product = np.matmul(g[:, layer], product)    # [.., target j, source i]
      expected += [g[:, layer], product]
    expected = np.stack(expected, 1).reshape(batch, count, length, length)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)


def test_product_convention_is_target_by_source():
  """Λ^2[j, i] = Σ_m G^2[j, m] G^1[m, i]: a chain 2 → 1 → 0 (target ← source)
  becomes the two-hop link 2 ← 0."""
  graphs = np.zeros((1, 4, 1, 3, 3), np.float32)
  graphs[0, 0, 0, 1, 0] = 1.0   # layer 1: position 1 reads position 0
  graphs[0, 1, 0, 2, 1] = 1.0   # layer 2: position 2 reads position 1
  fw, _ = graph_candidates(graphs, 2)
  names = candidate_names(2, 1)
  assert names == ["G1/h0", "G2/h0", "Λ2/h0"]
  lam = np.asarray(fw)[0, names.index("Λ2/h0")]
  expected = np.zeros((3, 3), np.float32)
  expected[2, 0] = 1.0
  np.testing.assert_array_equal(lam, expected)


def test_wrong_layer_count_is_rejected():
  with pytest.raises(ValueError, match="2L=6"):
    graph_candidates(np.zeros((1, 4, 2, 3, 3), np.float32), 3)


@pytest.mark.parametrize("num_layers", [1, 3])
def test_propagated_candidates_are_the_candidates_times_masked_features(num_layers):
  """C_c H from the chain G^l (Λ^{l−1} H) equals the formed candidates (with
  padding rows and columns zeroed) times H zeroed at padding, whatever the
  padding entries of the graphs and of H hold."""
  rng = np.random.default_rng(4)
  batch, heads, length, dim = 2, 3, 6, 5
  graphs = random_graphs(rng, batch, num_layers, heads, length)
  mask = np.array([[1] * length, [1] * 4 + [0] * (length - 4)], bool)
  h = rng.standard_normal((batch, length, dim)).astype(np.float32)
  pair = mask[:, :, None] & mask[:, None, :]
  clean = np.where(pair[:, None, None], graphs, 0)
  fw, bw = graph_candidates(clean, num_layers)
  h_clean = np.where(mask[:, :, None], h, 0)
  noisy = np.where(pair[:, None, None], graphs,
                   rng.uniform(0, 9, graphs.shape).astype(np.float32))
  h_noisy = np.where(mask[:, :, None], h, 1e3)
  got_fw, got_bw = propagated_candidates(noisy, h_noisy, mask, num_layers)
  count = (2 * num_layers - 1) * heads
  assert got_fw.shape == got_bw.shape == (batch, count, length, dim)
  for got, formed in ((got_fw, fw), (got_bw, bw)):
    expected = np.einsum("bcts,bsd->bctd", np.asarray(formed, np.float64), h_clean)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(got)[1, :, 4:], 0.0)   # padding targets


def test_propagated_candidates_read_half_precision_graphs_in_float32():
  rng = np.random.default_rng(6)
  graphs = random_graphs(rng, 1, 2, 2, 4).astype(np.float16)
  h = rng.standard_normal((1, 4, 3)).astype(np.float32)
  mask = np.ones((1, 4), bool)
  got, _ = propagated_candidates(graphs, h, mask, 2)
  assert got.dtype == np.float32
  fw, _ = graph_candidates(graphs.astype(np.float32), 2)
  np.testing.assert_allclose(got, np.einsum("bcts,bsd->bctd", fw, h), rtol=1e-5,
                             atol=1e-6)
  with pytest.raises(ValueError, match="2L=6"):
    propagated_candidates(graphs, h, mask, 3)
