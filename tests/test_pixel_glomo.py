"""PixelGLoMo: the 3×3 window, raster causality of graphs and features, the loss
against a plain recomputation, and a few training steps."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from glomo_jax.config import ModelConfig
from glomo_jax.images import PixelGLoMo, quantise, window_targets
from glomo_jax.models.feature_predictor import FeaturePredictor
from glomo_jax.models.graph_predictor import GraphPredictor

H, W = 4, 5
CONFIG = ModelConfig.tiny(vocab_size=16, decoder_layers=1)


def images(seed, batch=2):
  return np.random.default_rng(seed).integers(0, 256, (batch, H, W, 3)).astype(np.uint8)


def test_window_is_right_neighbour_then_the_three_below():
  at, valid = window_targets(3, 4, np.array([0, 3, 5, 9, 11]))
  at, valid = np.asarray(at), np.asarray(valid)
  # (0,0): right 1, below-left outside, below 4, below-right 5
  np.testing.assert_array_equal(valid[0], [True, False, True, True])
  np.testing.assert_array_equal(at[0][valid[0]], [1, 4, 5])
  # (0,3), last column: no right, below-left 6, below 7, no below-right
  np.testing.assert_array_equal(valid[1], [False, True, True, False])
  np.testing.assert_array_equal(at[1][valid[1]], [6, 7])
  np.testing.assert_array_equal(at[2][valid[2]], [6, 8, 9, 10])       # (1,1): inside
  np.testing.assert_array_equal(valid[3], [True, False, False, False])  # last row
  assert at[3][0] == 10
  assert not valid[4].any()                                           # last pixel


def test_quantise_levels():
  v = np.array([0, 15, 16, 255], np.uint8)
  np.testing.assert_array_equal(quantise(v, 16), [0, 0, 1, 15])
  np.testing.assert_array_equal(quantise(v, 256), v)


@pytest.mark.parametrize("norm", ["batch", "layer"])
def test_graph_rows_and_features_never_depend_on_later_pixels(norm):
  """Jacobians over continuous pixel embeddings: graph row t and feature F^l_t
  of the pixel predictor depend on no pixel after t in raster order."""
  config = CONFIG.replace(norm=norm)
  graph = GraphPredictor(config, image_shape=(H, W))
  feats = FeaturePredictor(config)
  x = np.random.default_rng(0).standard_normal((1, H * W, config.dim)).astype(np.float32)
  gv = graph.init(jax.random.PRNGKey(0), x, None, False)
  g = graph.apply(gv, x, None, False)
  fv = feats.init(jax.random.PRNGKey(1), x, g)
  t_idx, s_idx = np.indices((H * W, H * W))
  later = s_idx > t_idx

  jac = np.asarray(jax.jit(jax.jacobian(lambda x: graph.apply(gv, x, None, False)))(x))
  dep = np.abs(jac[0]).sum(axis=(0, 1, 3, 4, 6))          # [target t, input s]
  assert np.all(dep[later] == 0) and dep[~later].sum() > 0
  rows = np.asarray(g)[0].sum(-1)
  assert np.all((np.abs(rows - 1) < 1e-5) | (rows == 0))

  def features(x):
    return feats.apply(fv, x, graph.apply(gv, x, None, False))[-1]
  jac = np.abs(np.asarray(jax.jit(jax.jacobian(features))(x))[0]).sum(axis=(1, 2, 4))  # [t, s]
  assert np.all(jac[later] == 0)


def test_graphs_are_causal_both_ways_and_rows_sum_to_one_or_zero():
  model = PixelGLoMo(CONFIG, (H, W))
  x = images(1)
  variables = model.init(jax.random.PRNGKey(0), x, train=False)
  g = np.asarray(model.apply(variables, x, method=PixelGLoMo.graphs))
  L = CONFIG.num_graph_layers
  assert g.shape == (2, 2 * L, CONFIG.num_heads, H * W, H * W)
  lower = np.tril(np.ones((H * W, H * W), bool), -1)
  assert np.all(g[:, :L][..., ~lower] == 0)
  assert np.all(g[:, L:][..., ~lower.T] == 0)
  sums = g.sum(-1)
  assert np.all((np.abs(sums - 1) < 1e-5) | (sums == 0))
  # changing pixel s leaves the forward rows before s and backward rows after s
  s = 7
  y = x.copy()
  y[:, s // W, s % W] = 255 - y[:, s // W, s % W]
  g2 = np.asarray(model.apply(variables, y, method=PixelGLoMo.graphs))
  np.testing.assert_array_equal(g2[:, :L, :, :s], g[:, :L, :, :s])
  np.testing.assert_array_equal(g2[:, L:, :, s + 1:], g[:, L:, :, s + 1:])
  assert np.abs(g2[:, :L, :, s:] - g[:, :L, :, s:]).max() > 0


def test_loss_is_the_windows_mean_cross_entropy():
  """The split top layer, tied channel outputs and window weights equal a
  plain recomputation from every row's features."""
  model = PixelGLoMo(CONFIG, (H, W))
  x = images(2)
  variables = model.init(jax.random.PRNGKey(0), x, train=False)
  pos = (jnp.array([0, 4, 9, 13, 18]), jnp.array([1, 3, 5, 15, 17]))
  loss, metrics = model.apply(variables, x, train=False, positions=pos)
  bound = model.bind(variables)
  levels = np.asarray(quantise(x, CONFIG.vocab_size)).reshape(2, H * W, 3)
  table = np.asarray(variables["params"]["embedding"])
  per_dir, count = [], 0
  for i, which in enumerate(("fw", "bw")):
    seq = levels if which == "fw" else levels[:, ::-1]
    emb = table[0][seq[..., 0]] + table[1][seq[..., 1]] + table[2][seq[..., 2]]
    graph = getattr(bound, f"graph_{which}")
    feats = getattr(bound, f"features_{which}")
    top = feats(jnp.asarray(emb), graph(jnp.asarray(emb), None, False))[-1]
    at, valid = (np.asarray(a) for a in window_targets(H, W, pos[i]))
    h0 = np.asarray(top)[:, np.asarray(pos[i])]
    inputs = np.zeros((2, len(at), 4, CONFIG.dim), np.float32)
    for k in range(1, 4):
      inputs[:, :, k] = np.where(valid[None, :, k - 1, None], emb[:, at[:, k - 1]], 0)
    out = np.asarray(getattr(bound, f"decoder_{which}")(jnp.asarray(h0),
                                                         jnp.asarray(inputs)))
    total = 0.0
    for ch in range(3):
      logits = out @ table[ch].T                                  # [B, n, 4, V]
      logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
      picked = np.take_along_axis(logp, seq[:, at, ch][..., None], -1)[..., 0]
      total += -(picked * valid[None]).sum()
    n = 3 * 2 * valid.sum()
    per_dir.append(total / n)
    count += n
  np.testing.assert_allclose(metrics["loss_fw"], per_dir[0], rtol=1e-5)
  np.testing.assert_allclose(metrics["loss_bw"], per_dir[1], rtol=1e-5)
  np.testing.assert_allclose(loss, 0.5 * (per_dir[0] + per_dir[1]), rtol=1e-5)
  assert metrics["values"] == count


def test_backward_direction_is_the_forward_one_on_the_rotated_image():
  """With the backward parts' variables set to the forward ones, the
  backward loss of an image is the forward loss of the image rotated by 180°
  (reversed raster order), at the same start positions."""
  model = PixelGLoMo(CONFIG, (H, W))
  x = images(7)
  variables = model.init(jax.random.PRNGKey(0), x, train=False)
  tied = jax.tree_util.tree_map(lambda a: a, variables)
  tied = {c: dict(v) for c, v in tied.items()}
  for collection in tied.values():
    for part in ("graph", "features", "decoder"):
      if f"{part}_fw" in collection:
        collection[f"{part}_bw"] = collection[f"{part}_fw"]
  pos = jnp.array([0, 3, 6, 11, 14])
  _, m = model.apply(tied, x, train=False, positions=(pos, pos))
  _, rotated = model.apply(tied, x[:, ::-1, ::-1], train=False, positions=(pos, pos))
  np.testing.assert_allclose(m["loss_bw"], rotated["loss_fw"], rtol=1e-6)
  np.testing.assert_allclose(m["loss_fw"], rotated["loss_bw"], rtol=1e-6)
  assert abs(float(m["loss_fw"]) - float(m["loss_bw"])) > 1e-4   # not trivially equal


def test_a_few_steps_lower_the_loss_and_other_sizes_reuse_the_variables():
  config = CONFIG.replace(sample_positions=6)
  model = PixelGLoMo(config, (H, W))
  r, c = np.indices((H, W))
  x = np.stack([np.stack([(r * 60 + c * 30 + 70 * b + 20 * ch) % 256 for ch in range(3)], -1)
                for b in range(4)]).astype(np.uint8)              # smooth, predictable
  variables = model.init({"params": jax.random.PRNGKey(0), "sample": jax.random.PRNGKey(1)},
                         x, train=False)
  tx = optax.adam(1e-2)
  params, stats = variables["params"], variables["batch_stats"]
  opt = tx.init(params)

  @jax.jit
  def step(params, stats, opt, key):
    def loss(p):
      (value, _), updates = model.apply({"params": p, "batch_stats": stats}, x, train=True,
                                        rngs={"sample": key}, mutable=["batch_stats"])
      return value, updates["batch_stats"]
    (value, stats), grads = jax.value_and_grad(loss, has_aux=True)(params)
    updates, opt = tx.update(grads, opt)
    return optax.apply_updates(params, updates), stats, opt, value
  values = []
  for i in range(30):
    params, stats, opt, value = step(params, stats, opt, jax.random.PRNGKey(i))
    values.append(float(value))
  assert np.isfinite(values).all()
  assert np.mean(values[-5:]) < np.mean(values[:5]) - 0.5
  bigger = PixelGLoMo(config, (6, 7))
  g = bigger.apply({"params": params, "batch_stats": stats},
                   np.zeros((1, 6, 7, 3), np.uint8), method=PixelGLoMo.graphs)
  assert g.shape[-2:] == (42, 42)


def test_bad_images_are_rejected():
  model = PixelGLoMo(CONFIG, (H, W))
  variables = model.init(jax.random.PRNGKey(0), images(0), train=False)
  with pytest.raises(ValueError, match="uint8"):
    model.apply(variables, images(0).astype(np.float32), train=False)
  with pytest.raises(ValueError, match="built for 4×5"):
    model.apply(variables, np.zeros((1, 5, 5, 3), np.uint8), train=False)
  with pytest.raises(ValueError, match="decoupled"):
    PixelGLoMo(CONFIG.replace(decoupled=False), (H, W)).init(
        jax.random.PRNGKey(0), images(0), train=False)
