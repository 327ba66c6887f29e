"""The whole pretraining model: shapes, causality, padding, parameter count."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glomo_jax import GLoMo, ModelConfig
from conftest import init_model


def direction_outputs(model, variables, emb, which, train=False):
  """(graphs [B, L, K, T, T], stacked features [L, B, T, d]) of one direction
  on embeddings in that direction's reading order."""
  def f(m, e):
    g, feats = m._direction(which, e, None, train, True)
    return g, jnp.stack(feats)
  return model.apply(variables, emb, method=f)


@pytest.mark.parametrize("overrides", [
    dict(),                                        # authors' layout, BN eval mode
    dict(norm="layer", composition="residual"),
    dict(decoupled=False, key_layers=0, query_layers=0),
    dict(sparsity="softmax", threshold="scalar"),
    dict(distance_prior=3, distance_prior_init=0.7),   # beyond the paper
])
def test_no_output_at_t_depends_on_a_later_token(overrides):
  config = ModelConfig.tiny(**overrides)
  model, variables, tokens = init_model(config, batch=1, length=7)
  emb = model.apply(variables, tokens, method=GLoMo.embed)
  for which in ("fw", "bw"):
    jac_g, jac_f = jax.jit(jax.jacrev(lambda e: direction_outputs(model, variables, e, which)))(emb)
    # jac_g: [B, L, K, T(target j), T(source i), B, T(input s), d]
    dep_g = np.abs(np.asarray(jac_g)).sum(axis=(0, 1, 2, 4, 5, 7))     # [j, s]
    dep_f = np.abs(np.asarray(jac_f)).sum(axis=(0, 1, 3, 4, 6))        # [t, s]
    later = np.triu_indices(7, 1)
    assert np.all(dep_g[later] == 0), f"{which} graph row depends on a later token"
    assert np.all(dep_f[later] == 0), f"{which} feature depends on a later token"
    assert dep_f[3, 2] > 0 and dep_g[3, 1] > 0    # and earlier tokens do matter


def test_graph_rows_change_only_with_earlier_tokens_in_original_order():
  config = ModelConfig.tiny()
  model, variables, tokens = init_model(config, batch=2, length=9)
  g = np.asarray(model.apply(variables, tokens, method=GLoMo.graphs))
  t = 4
  changed = tokens.at[:, t].set((tokens[:, t] + 1) % config.vocab_size)
  g2 = np.asarray(model.apply(variables, changed, method=GLoMo.graphs))
  L = config.num_graph_layers
  # forward graphs: rows j < t are unaffected by a change at t (row t's query
  # reads token t itself); backward graphs: rows j > t are unaffected
  np.testing.assert_array_equal(g[:, :L, :, :t], g2[:, :L, :, :t])
  np.testing.assert_array_equal(g[:, L:, :, t + 1:], g2[:, L:, :, t + 1:])
  assert not np.allclose(g[:, :L, :, t:], g2[:, :L, :, t:])
  assert not np.allclose(g[:, L:, :, :t + 1], g2[:, L:, :, :t + 1])


def test_graphs_shape_triangularity_and_row_sums():
  config = ModelConfig.tiny()
  model, variables, tokens = init_model(config, batch=3, length=11)
  g = np.asarray(model.apply(variables, tokens, method=GLoMo.graphs))
  L, K = config.num_graph_layers, config.num_heads
  assert g.shape == (3, 2 * L, K, 11, 11)
  assert np.all(g >= 0)
  np.testing.assert_array_equal(np.triu(g[:, :L]), 0.0)       # forward: i < j only
  np.testing.assert_array_equal(np.tril(g[:, L:]), 0.0)       # backward: i > j only
  sums = g.sum(-1)
  assert np.all(np.isclose(sums, 1.0, atol=1e-5) | (sums == 0.0))
  np.testing.assert_array_equal(sums[:, :L, :, 0], 0.0)        # nothing before position 0
  np.testing.assert_array_equal(sums[:, L:, :, -1], 0.0)       # nothing after the end
  assert np.mean(np.isclose(sums, 1.0, atol=1e-5)) > 0.25   # random weights: many rows survive


def test_padding_neither_sends_nor_receives_and_adds_no_loss():
  config = ModelConfig.tiny()
  model, variables, tokens = init_model(config, batch=2, length=10)
  mask = jnp.array([[1] * 10, [1] * 6 + [0] * 4])
  g = np.asarray(model.apply(variables, tokens, mask, method=GLoMo.graphs))
  np.testing.assert_array_equal(g[1, :, :, 6:, :], 0.0)     # padding targets receive nothing
  np.testing.assert_array_equal(g[1, :, :, :, 6:], 0.0)     # padding sources send nothing
  other = tokens.at[1, 6:].set(7)
  run = lambda tok: model.apply(variables, tok, mask, train=True, mutable=["batch_stats"])[0]
  (l1, m1), (l2, _) = run(tokens), run(other)
  np.testing.assert_allclose(l1, l2, rtol=1e-6)
  D = config.context_length
  # a target counts when its start t (< T - D) and the target t + k are real,
  # in each direction's reading order
  m = np.asarray(mask)
  expected = sum(int(row[t] and row[t + k]) for rows in (m, m[:, ::-1]) for row in rows
                 for t in range(10 - D) for k in range(1, D + 1))
  assert float(m1["tokens"]) == expected == 63
  g_unmasked = np.asarray(model.apply(variables, other, method=GLoMo.graphs))
  np.testing.assert_allclose(g[0], g_unmasked[0], rtol=1e-5, atol=1e-7)


def test_loss_is_half_forward_plus_backward():
  config = ModelConfig.tiny(sample_positions=4)
  model, variables, tokens = init_model(config)
  (loss, m), _ = model.apply(variables, tokens, train=True, rngs={"sample": jax.random.PRNGKey(3)},
                             mutable=["batch_stats"])
  np.testing.assert_allclose(loss, 0.5 * (m["loss_fw"] + m["loss_bw"]), rtol=1e-6)
  assert float(m["tokens"]) == 2 * 2 * 4 * config.context_length
  assert 0.5 * np.log(config.vocab_size) < float(loss) < 2 * np.log(config.vocab_size)


def test_sampled_positions_come_from_the_sample_rng_and_explicit_positions_agree():
  config = ModelConfig.tiny(sample_positions=3)
  model, variables, tokens = init_model(config)
  run = lambda **kw: model.apply(variables, tokens, train=True, mutable=["batch_stats"], **kw)[0][0]
  a = run(rngs={"sample": jax.random.PRNGKey(1)})
  b = run(rngs={"sample": jax.random.PRNGKey(1)})
  c = run(rngs={"sample": jax.random.PRNGKey(2)})
  assert a == b and a != c
  pos = model.apply(variables, tokens.shape[1], method=GLoMo.draw_positions,
                    rngs={"sample": jax.random.PRNGKey(1)})
  np.testing.assert_allclose(run(positions=pos), a, rtol=1e-6)
  T, D = tokens.shape[1], config.context_length
  assert all(int(p.min()) >= 0 and int(p.max()) < T - D for p in pos)


def full_rows_loss(model, variables, tokens, mask, positions):
  """The loss computed the plain way: every row of every layer's graph and
  every position's features, then the decoder start states gathered."""
  from glomo_jax.models.context_decoder import context_inputs, context_targets  # noqa: PLC0415
  from glomo_jax.ops.chunked_cross_entropy import tied_softmax_cross_entropy  # noqa: PLC0415

  def f(m, tokens, mask):
    c = m.config
    emb = m.embed(tokens)
    seqs = {"fw": (emb, tokens, mask),
            "bw": (jnp.flip(emb, 1), jnp.flip(tokens, 1), jnp.flip(mask, 1))}
    hidden, targets, weights = [], [], []
    for i, which in enumerate(("fw", "bw")):
      e, tok, msk = seqs[which]
      _, feats = m._direction(which, e, msk, True, True)
      tgt, w = context_targets(tok, msk, positions[i], c.context_length)
      inputs = context_inputs(e, positions[i], c.context_length)
      decoder = m.decoder_fw if which == "fw" else m.decoder_bw
      hidden.append(decoder(feats[-1][:, positions[i]], inputs, True).reshape(-1, c.dim))
      targets.append(tgt.reshape(-1))
      w = w.reshape(-1).astype(jnp.float64)
      weights.append(w / (2 * jnp.maximum(jnp.sum(w), 1.0)))
    loss, _ = tied_softmax_cross_entropy(jnp.concatenate(hidden), m.embedding,
                                         jnp.concatenate(targets),
                                         jnp.concatenate(weights), 7)
    return loss
  return model.apply(variables, tokens, mask, method=f, mutable=["batch_stats"])[0]


# every option that changes the top layer's path, each in one of three configs
@pytest.mark.parametrize("overrides", [
    dict(),
    dict(composition="residual", norm="layer", sparsity="softmax"),
    # the scalar threshold needs squared_relu sparsity (a softmax ignores it)
    dict(num_graph_layers=1, decoupled=False, key_layers=0, query_layers=0, threshold="scalar"),
])
def test_top_layer_at_the_start_rows_only_equals_every_row(overrides):
  """The loss computes the top layer only at the decoder start positions
  (GraphPredictor.split_graphs) and decodes the windows from the sequence
  (ContextDecoder.decode_windows); value and gradient equal the plain way."""
  check_loss_equals_plain_way(
      ModelConfig.tiny(dtype="float64", param_dtype="float64", **overrides),
      (jnp.asarray([0, 5, 5, 8, 2]), jnp.asarray([7, 1, 1, 0, 8])))


def test_every_position_loss_equals_plain_way():
  """Every start position: the decoder's first-layer gates come once per
  sequence position (9 windows × 2 read steps > 12 positions)."""
  check_loss_equals_plain_way(ModelConfig.tiny(dtype="float64", param_dtype="float64"),
                              (jnp.arange(9), jnp.arange(9)))


def check_loss_equals_plain_way(config, positions):
  with jax.enable_x64(True):
    model, variables, tokens = init_model(config, batch=3, length=12)
    mask = jnp.ones(tokens.shape, bool).at[1, 9:].set(False).at[2, :2].set(False)
    params = variables["params"]
    rest = {k: v for k, v in variables.items() if k != "params"}

    def ours(p):
      (loss, _), _ = model.apply({"params": p, **rest}, tokens, mask, train=True,
                                 positions=positions, mutable=["batch_stats"])
      return loss
    plain = lambda p: full_rows_loss(model, {"params": p, **rest}, tokens, mask, positions)
    value, grads = jax.jit(jax.value_and_grad(ours))(params)   # jitted: one compile each
    ref_value, ref_grads = jax.jit(jax.value_and_grad(plain))(params)
    np.testing.assert_allclose(value, ref_value, rtol=1e-12)
    for (path, g), r in zip(jax.tree_util.tree_leaves_with_path(grads),
                            jax.tree_util.tree_leaves(ref_grads)):
      np.testing.assert_allclose(g, r, rtol=1e-9, atol=1e-12, err_msg=jax.tree_util.keystr(path))
    assert any(np.abs(np.asarray(g)).max() > 0 for g in jax.tree_util.tree_leaves(grads))


def test_train_mode_updates_batch_stats_and_eval_mode_does_not_need_mutable():
  config = ModelConfig.tiny()
  model, variables, tokens = init_model(config)
  (_, _), upd = model.apply(variables, tokens, train=True, mutable=["batch_stats"])
  before = jax.tree_util.tree_leaves(variables["batch_stats"])
  after = jax.tree_util.tree_leaves(upd["batch_stats"])
  assert any(not np.allclose(a, b) for a, b in zip(before, after))
  loss, _ = model.apply(variables, tokens, train=False)
  assert np.isfinite(loss)


def test_jit_value_and_grad_on_cpu():
  config = ModelConfig.tiny(sample_positions=5)
  model, variables, tokens = init_model(config)

  @jax.jit
  def step(params, stats, tokens, key):
    def loss_fn(p):
      (loss, metrics), upd = model.apply({"params": p, "batch_stats": stats}, tokens,
                                         train=True, rngs={"sample": key},
                                         mutable=["batch_stats"])
      return loss, (metrics, upd)
    return jax.value_and_grad(loss_fn, has_aux=True)(params)

  (loss, (metrics, upd)), grads = step(variables["params"], variables["batch_stats"], tokens,
                                       jax.random.PRNGKey(0))
  assert np.isfinite(loss)
  leaves = jax.tree_util.tree_leaves(grads)
  assert all(np.all(np.isfinite(g)) for g in leaves)
  assert sum(float(jnp.abs(g).sum()) > 0 for g in leaves) == len(leaves)


def test_bfloat16_compute_keeps_float32_params_graphs_and_loss():
  """Mixed precision: bfloat16 matmuls, float32 parameters, gradients, graph
  normalisation and loss; the loss stays close to the float32 model's."""
  config = ModelConfig.tiny(sample_positions=5)
  model, variables, tokens = init_model(config)
  low = GLoMo(config.replace(dtype="bfloat16"))
  positions = (jnp.arange(5), jnp.arange(5) + 1)

  def loss_and_grads(m):
    def f(p):
      (loss, _), _ = m.apply({**variables, "params": p}, tokens, train=True,
                             positions=positions, mutable=["batch_stats"])
      return loss
    return jax.jit(jax.value_and_grad(f))(variables["params"])

  (loss32, g32), (loss16, g16) = loss_and_grads(model), loss_and_grads(low)
  assert loss16.dtype == jnp.float32
  assert all(g.dtype == jnp.float32 for g in jax.tree_util.tree_leaves(g16))
  np.testing.assert_allclose(loss16, loss32, rtol=2e-2)
  graphs = low.apply(variables, tokens, method=GLoMo.graphs)
  assert graphs.dtype == jnp.float32
  sums = np.asarray(graphs.sum(-1))
  assert np.all((np.abs(sums - 1) < 1e-5) | (sums == 0)) and (sums > 0.5).mean() > 0.3
  # Gradients point the same way. Conv biases before BatchNorm have a zero
  # gradient in exact arithmetic (rounding noise only): left out. The
  # bfloat16 GEMM operands really are rounded (8-bit mantissa), so the tiny,
  # cancelling gradients of this random model's graph predictor (e.g. the
  # threshold bias, a sum of ± terms over positions) agree only roughly;
  # a sign error or a lost term would still show.
  pairs = [(a, b) for a, b in zip(jax.tree_util.tree_leaves(g32), jax.tree_util.tree_leaves(g16))
           if float(jnp.linalg.norm(a)) > 1e-6]
  cosine = lambda a, b: float(jnp.vdot(a, b) / (jnp.linalg.norm(a) * jnp.linalg.norm(b)))
  cos = [cosine(a, b) for a, b in pairs]
  assert len(pairs) > 20 and min(cos) > 0.5 and np.median(cos) > 0.99
  flat = lambda i: jnp.concatenate([p[i].ravel() for p in pairs])
  assert cosine(flat(0), flat(1)) > 0.9999


def expected_param_count(c: ModelConfig) -> int:
  d, K, H, L, V, k = c.dim, c.num_heads, c.head_dim, c.num_graph_layers, c.vocab_size, c.kernel_size
  conv_block = k * d * d + d + 2 * d                       # conv weight, bias, BN scale/bias
  graph = (c.key_layers + c.query_layers) * conv_block
  graph += 2 * L * (d * K * H + K * H)                     # key and query projections
  graph += L * (H + 1)                                     # per-query threshold w, c
  gru_cell = 2 * d * 3 * d + 3 * d + d * 3 * d + 3 * d     # input [m*h; m] (2d) -> 3d gates
  decoder = c.decoder_layers * (2 * (d * 3 * d) + 2 * 3 * d)
  return V * d + 2 * (graph + gru_cell + decoder)


def test_paper_preset_matches_the_authors_run_and_its_parameter_count():
  c = ModelConfig.paper()
  assert (c.dim, c.num_heads, c.head_dim, c.num_graph_layers, c.key_layers, c.query_layers,
          c.kernel_size, c.context_length, c.decoder_layers, c.threshold, c.sparsity,
          c.composition, c.decoupled, c.sample_positions) == (
              512, 8, 256, 3, 4, 4, 3, 3, 2, "query", "squared_relu", "gru", True, 20)
  shapes = jax.eval_shape(lambda: GLoMo(c).init(jax.random.PRNGKey(0),
                                                jnp.zeros((1, 8), jnp.int32)))
  n = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(shapes["params"]))
  assert n == expected_param_count(c)
  # the same count written out: 51.2M embedding + 2 × 18,122,499 per-direction weights
  assert n == 51_200_000 + 2 * 18_122_499


def test_bad_inputs_are_clear_errors():
  config = ModelConfig.tiny()
  model, variables, tokens = init_model(config)
  with pytest.raises(ValueError, match=r"\[batch, T\]"):
    model.apply(variables, tokens[0], method=GLoMo.graphs)
  with pytest.raises(ValueError, match="integer"):
    model.apply(variables, tokens.astype(jnp.float32), method=GLoMo.graphs)
  with pytest.raises(ValueError, match="mask"):
    model.apply(variables, tokens, jnp.ones((2, 3)), method=GLoMo.graphs)
  with pytest.raises(ValueError, match="too short"):
    model.apply(variables, tokens[:, :3], train=False)


def test_config_typos_and_bad_values_are_clear_errors():
  with pytest.raises(ValueError, match="sparsity"):
    ModelConfig(sparsity="sparse")
  with pytest.raises(ValueError, match="divisible"):
    ModelConfig(dim=10, num_heads=4)
  with pytest.raises(ValueError, match="ModelConfig: unknown fields"):
    ModelConfig.from_dict({"dimm": 3})
  assert ModelConfig.from_dict(ModelConfig.tiny().to_dict()) == ModelConfig.tiny()


def test_dropout_draws_masks_in_training_only():
  """dropout > 0: training needs a 'dropout' rng and the loss moves with it;
  evaluation is deterministic and needs none."""
  config = ModelConfig.tiny(dropout=0.3)
  model, variables, tokens = init_model(config)
  def train_loss(seed):
    (loss, _), _ = model.apply(variables, tokens, train=True, mutable=["batch_stats"],
                               rngs={"dropout": jax.random.PRNGKey(seed)})
    return float(loss)
  assert train_loss(0) == train_loss(0) != train_loss(1)
  a, _ = model.apply(variables, tokens, train=False)
  b, _ = model.apply(variables, tokens, train=False)
  assert float(a) == float(b) and np.isfinite(float(a))


def test_affinity_scores_split_batch_is_the_same_product():
  """s_ji = q_j · k_i against NumPy; the half-batch split used on one CPU
  device gives the same scores, the same gradients and the same loss."""
  from glomo_jax.models import graph_predictor
  rng = np.random.default_rng(0)
  q = jnp.asarray(rng.normal(size=(3, 2, 4, 5, 6)), jnp.float32)   # [B, L, K, R, H]
  k = jnp.asarray(rng.normal(size=(3, 2, 4, 7, 6)), jnp.float32)   # [B, L, K, T, H]
  want = np.einsum("blkjh,blkih->blkji", np.asarray(q, np.float64), np.asarray(k, np.float64))
  for split in (False, True):
    got = graph_predictor.affinity_scores(q, k, jnp.float32, split_batch=split)
    assert got.shape == (3, 2, 4, 5, 7)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  w = jnp.asarray(rng.normal(size=want.shape), jnp.float32)
  grads = [jax.grad(lambda a, b, s=s: jnp.sum(
      w * graph_predictor.affinity_scores(a, b, jnp.float32, split_batch=s)), (0, 1))(q, k)
      for s in (False, True)]
  for a, b in zip(*grads):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)

  config = ModelConfig.tiny(sample_positions=0)
  _, variables, tokens = init_model(config, batch=3)
  losses = [float(GLoMo(config, split_batch_scores=split).apply(variables, tokens, train=False)[0])
            for split in (False, True)]
  np.testing.assert_allclose(losses[0], losses[1], rtol=1e-6)
