"""Graph transfer over pixels: raster layout (a one-hot graph copies the right
pixel), block upsampling, variants, and no gradient into the graphs."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glomo_jax.images.data import downsample
from glomo_jax.images.pixel_transfer import GLoMoResNet, PixelTransferInput, normalise
from glomo_jax.transfer import propagated_candidates
from glomo_jax.transfer.options import TransferOptions

B, H, W, L, K = 2, 4, 6, 2, 2


def images(seed=0, size=(H, W)):
  return np.random.default_rng(seed).integers(0, 256, (B, *size, 3)).astype(np.uint8)


def test_a_one_hot_graph_copies_the_pixel_above_in_raster_layout():
  """Row t = r·W + c of a graph reading source t − W makes HM at (r, c) the
  pixel (r − 1, c): the image shifted down one row (row 0 reads nothing)."""
  x = np.asarray(normalise(images()))
  n = H * W
  above = np.zeros((n, n), np.float32)
  for t in range(W, n):
    above[t, t - W] = 1.0
  graphs = np.broadcast_to(above, (B, 2 * L, K, n, n))
  fw, _ = propagated_candidates(graphs, x.reshape(B, n, 3), np.ones((B, n), bool), L)
  copied = np.asarray(fw)[:, 0].reshape(B, H, W, 3)                  # G^1, head 0
  np.testing.assert_allclose(copied[:, 1:], x[:, :-1], rtol=1e-6)
  np.testing.assert_array_equal(copied[:, 0], 0.0)


def test_the_module_puts_the_copied_pixel_at_the_right_place():
  """Through PixelTransferInput: free mixture weights on candidate 0 (G^1,
  head 0) and a fusion that passes HM_1 (gate open, linear = identity on the
  HM_1 block): the gated features at (r, c) are the pixel (r − 1, c)."""
  n = H * W
  above = np.zeros((n, n), np.float32)
  for t in range(W, n):
    above[t, t - W] = 1.0
  graphs = np.broadcast_to(above, (B, 2 * L, K, n, n)).copy()
  module = PixelTransferInput("glomo",
                              TransferOptions(num_layers=L, conditioned=False, features=3))
  x = images(8)
  variables = module.init(jax.random.PRNGKey(0), x, graphs)
  p = jax.tree_util.tree_map(np.array, variables["params"])["transfer"]
  for mix in ("mixture_fw", "mixture_bw"):
    p[mix]["logits"][:] = 0.0
    p[mix]["logits"][:, 0] = 50.0                   # every mixture = candidate 0
  p["fusion"]["gate"]["kernel"][:] = 0.0
  p["fusion"]["gate"]["bias"][:] = 50.0             # σ = 1
  p["fusion"]["linear"]["kernel"][:] = 0.0
  p["fusion"]["linear"]["kernel"][3:6] = np.eye(3)  # x = [H ; HM_fw1 ; …]: take HM_fw1
  p["fusion"]["linear"]["bias"][:] = 0.0
  out = np.asarray(module.apply({"params": {"transfer": p}}, x, graphs))
  h = np.asarray(normalise(x))
  np.testing.assert_allclose(out[:, 1:, :, 3:], h[:, :-1], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(out[:, 0, :, 3:], 0.0, atol=1e-5)


def test_graphs_at_half_resolution_give_features_shared_by_2x2_blocks():
  module = PixelTransferInput("glomo", TransferOptions(num_layers=L, features=5),
                              graph_downsample=2)
  n = (H // 2) * (W // 2)
  g = np.random.default_rng(1).uniform(0, 1, (B, 2 * L, K, n, n)).astype(np.float32)
  g = np.tril(g, -1) / np.maximum(np.tril(g, -1).sum(-1, keepdims=True), 1e-9)
  x = images(2)
  variables = module.init(jax.random.PRNGKey(0), x, g)
  out = np.asarray(module.apply(variables, x, g))
  assert out.shape == (B, H, W, 3 + 5)
  np.testing.assert_allclose(out[..., :3], normalise(x), rtol=1e-6)
  gated = out[..., 3:]
  np.testing.assert_array_equal(gated[:, 0::2, 0::2], gated[:, 1::2, 1::2])
  np.testing.assert_array_equal(gated[:, 0::2, 0::2], gated[:, 0::2, 1::2])
  assert np.abs(gated[:, 0, 0] - gated[:, 2, 4]).max() > 0        # blocks differ
  with pytest.raises(ValueError, match="3×3 = 9 pixels"):
    PixelTransferInput("glomo", TransferOptions(num_layers=L), graph_downsample=2).init(
        jax.random.PRNGKey(0), images(0, (6, 6)), g)


@pytest.mark.parametrize("variant", ["baseline", "uniform", "glomo"])
def test_variants_train_and_the_graphs_get_no_gradient(variant):
  model = GLoMoResNet(variant, depth=18, width=4, transfer=TransferOptions(num_layers=L),
                      graph_downsample=1)
  x = images(3)
  n = H * W
  g = np.tril(np.ones((B, 2 * L, K, n, n), np.float32), -1)
  g = g / np.maximum(g.sum(-1, keepdims=True), 1)
  graphs = g if variant == "glomo" else None
  variables = model.init(jax.random.PRNGKey(0), x, graphs)
  names = set(variables["params"]["input"]) if "input" in variables["params"] else set()
  assert names == ({"transfer"} if variant != "baseline" else set())

  def loss(params, graphs):
    logits, _ = model.apply({"params": params, "batch_stats": variables["batch_stats"]},
                            x, graphs, train=True, mutable=["batch_stats"])
    return jnp.sum(logits ** 2)
  if variant == "glomo":
    _, d_graphs = jax.jit(jax.grad(loss, argnums=(0, 1)))(variables["params"], graphs)
    np.testing.assert_array_equal(d_graphs, 0.0)
  value = loss(variables["params"], graphs)
  assert np.isfinite(value)
  with pytest.raises(ValueError, match="unknown variant"):
    GLoMoResNet("pixels").init(jax.random.PRNGKey(0), x)


def test_graphs_computed_in_chunks_equal_graphs_given_whole():
  """graph_fn on chunks of 1 image (lax.map) = the same graphs passed in."""
  n = (H // 2) * (W // 2)
  rng = np.random.default_rng(4)
  weights = rng.uniform(0, 1, (2 * L, K, n, n)).astype(np.float32)

  def graph_fn(small):                       # any function of the downsampled images
    scale = small.astype(jnp.float32).mean(axis=(1, 2, 3))[:, None, None, None, None]
    g = jnp.tril(weights * (1 + scale / 255), -1)
    return g / jnp.maximum(g.sum(-1, keepdims=True), 1e-9)
  x = images(6)
  whole = graph_fn(downsample(jnp.asarray(x), 2))
  module = PixelTransferInput("glomo", TransferOptions(num_layers=L, features=4),
                              graph_downsample=2, graph_chunk=1)
  variables = module.init(jax.random.PRNGKey(0), x, whole)
  given = module.apply(variables, x, whole)
  chunked = jax.jit(lambda v, x: module.apply(v, x, graph_fn=graph_fn))(variables, x)
  np.testing.assert_allclose(chunked, given, rtol=1e-5, atol=1e-6)
