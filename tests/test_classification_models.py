"""Task models: padding-safe blocks, ESIM alignment, and every GLoMo variant of
the IMDB classifier and ESIM (overfits a fixed batch, padding never leaks, the
graphs get no gradient). Uses the real `glomo_jax.transfer.layer.GraphTransfer`."""
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import tensorflow_datasets as tfds

from glomo_jax import tuning
from glomo_jax.text import batching, layers, readers
from glomo_jax.classification.esim import ESIM, soft_align
from glomo_jax.classification.text_classifier import TextClassifier
from glomo_jax.transfer.layer import GraphTransfer
from glomo_jax.transfer.options import TEXT_VARIANTS, TransferOptions

VOCAB, L, K = 40, 2, 2
# XLA:CPU options for this file's many whole-model compiles: less LLVM
# optimisation and the classic fusion emitters compile ~4x faster (same math,
# equal up to float rounding).
FAST = tuning.FAST_COMPILE_OPTIONS


def random_graphs(rng, mask, num_layers=L, heads=K, garbage=False):
  """Valid predictor-like graphs [B, 2L, K, T, T]: the L forward layers strictly
  lower-triangular (causal), the L backward ones strictly upper-triangular,
  rows over real sources summing to 1 (0 for the first / last word), zero rows
  and columns at padding. garbage=True fills the padding rows and columns with
  random positive values (which must be ignored)."""
  b, t = mask.shape
  s = rng.uniform(0.1, 1.0, (b, 2 * num_layers, heads, t, t))
  causal = np.tril(np.ones((t, t), bool), -1)
  allowed = np.concatenate([np.broadcast_to(causal, (num_layers, t, t)),
                            np.broadcast_to(causal.T, (num_layers, t, t))])[None, :, None]
  pair = (mask[:, :, None] & mask[:, None, :])[:, None, None]
  g = np.where(allowed & pair, s, 0.0)
  total = g.sum(-1, keepdims=True)
  g = g / np.where(total > 0, total, 1.0)
  if garbage:
    g = np.where(pair, g, rng.uniform(0.1, 1.0, g.shape))
  return g.astype(np.float32)


def padded_batch(rng, lengths, width):
  """ids int32 [B, width] (0 after each length) and mask [B, width]."""
  mask = np.arange(width)[None] < np.asarray(lengths)[:, None]
  ids = rng.integers(2, VOCAB, (len(lengths), width)).astype(np.int32)
  return np.where(mask, ids, 0).astype(np.int32), mask


def with_garbage(rng, ids, mask, vocab_size=VOCAB):
  """The same texts with random word ids at the padding positions."""
  return np.where(mask, ids, rng.integers(2, vocab_size, ids.shape)).astype(np.int32)


@pytest.fixture(scope="module")
def mock_tasks():
  """{'imdb': (TaskData, Vocabulary), 'mnli': ...} from tfds.testing.mock_data."""
  out = {}
  with tfds.testing.mock_data(num_examples=8):
    for task in ("imdb", "mnli"):
      data = readers.load_task(task, "tfds", val_fraction=0.25, tfds_reader="data_source")
      out[task] = (data, data.build_vocabulary())
  return out


def mock_batch(rng, data, vocab):
  """A training batch of 3 mock examples, each twice: as is, then with garbage
  in its padding (ids, and graph entries at padding rows/columns). Lengths are
  rounded up to 8 so that every text has padding."""
  batch = batching.make_batch(data["train"], [0, 1, 2], vocab, length_multiple=8)
  inputs, graphs = {}, {}
  for f in data.text_fields:
    ids, mask = batch[f], batch[f + "_mask"]
    g = random_graphs(rng, mask)
    pair = (mask[:, :, None] & mask[:, None, :])[:, None, None]
    noisy = np.where(pair, g, random_graphs(rng, mask, garbage=True))
    inputs[f] = np.concatenate([ids, with_garbage(rng, ids, mask, len(vocab))])
    inputs[f + "_mask"] = np.concatenate([mask, mask])
    graphs[f + "_graphs"] = np.concatenate([g, noisy])
  labels = jnp.asarray(np.concatenate([batch["label"], batch["label"]]))
  return inputs, graphs, labels


# --- blocks -----------------------------------------------------------------------

def test_masked_softmax_and_pooling_ignore_padding():
  scores = jnp.array([[1.0, 2.0, 50.0], [3.0, -1.0, 7.0], [0.0, 0.0, 0.0]])
  mask = jnp.array([[True, True, False], [True, False, False], [False, False, False]])
  w = layers.masked_softmax(scores, mask)
  np.testing.assert_allclose(w[0], [1 / (1 + np.e), np.e / (1 + np.e), 0], rtol=1e-6)
  np.testing.assert_allclose(w[1], [1, 0, 0])
  np.testing.assert_array_equal(w[2], [0, 0, 0])  # nothing valid: zeros, not NaN
  h = jnp.array([[[1.0, -5.0], [3.0, -1.0], [100.0, 100.0]]])
  pooled = layers.masked_pool(h, jnp.array([[True, True, False]]), ("max", "mean"))
  np.testing.assert_allclose(pooled, [[3.0, -1.0, 2.0, -3.0]])
  empty = layers.masked_pool(h, jnp.zeros((1, 3), bool))
  np.testing.assert_array_equal(empty, np.zeros((1, 4)))


def _flax_to_ours(cell, fw, bw):
  """Our BiRNN params from flax GRUCell / OptimizedLSTMCell params."""
  out = {}
  for name, p in (("forward", fw), ("backward", bw)):
    if cell == "gru":
      out[f"{name}_input"] = {
          "kernel": jnp.concatenate([p[g]["kernel"] for g in ("ir", "iz", "in")], -1),
          "bias": jnp.concatenate([p[g]["bias"] for g in ("ir", "iz", "in")])}
      out[f"{name}_hidden"] = jnp.concatenate([p[g]["kernel"] for g in ("hr", "hz", "hn")],
                                              -1)
      zero = jnp.zeros_like(p["hn"]["bias"])
      out[f"{name}_hidden_bias"] = jnp.concatenate([zero, zero, p["hn"]["bias"]])
    else:
      gates = ("i", "f", "g", "o")
      out[f"{name}_input"] = {
          "kernel": jnp.concatenate([p["i" + g]["kernel"] for g in gates], -1),
          "bias": jnp.concatenate([p["h" + g]["bias"] for g in gates])}
      out[f"{name}_hidden"] = jnp.concatenate([p["h" + g]["kernel"] for g in gates], -1)
  return out


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_birnn_equals_flax_rnn_with_the_same_weights(cell):
  make = nn.GRUCell if cell == "gru" else nn.OptimizedLSTMCell
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.standard_normal((3, 6, 5)), jnp.float32)
  mask = np.arange(6)[None] < np.array([[6], [3], [1]])
  lengths = jnp.asarray(mask.sum(1))
  reference = nn.Bidirectional(nn.RNN(make(4)), nn.RNN(make(4)))

  @functools.partial(jax.jit, compiler_options=FAST)
  def run(x, mask):
    ref_vars = reference.init(jax.random.PRNGKey(1), x, seq_lengths=lengths)
    p = ref_vars["params"]
    ours = _flax_to_ours(cell, p["forward_rnn"]["cell"], p["backward_rnn"]["cell"])
    return (reference.apply(ref_vars, x, seq_lengths=lengths),
            layers.BiRNN(4, cell).apply({"params": ours}, x, mask))
  expected, got = run(x, mask)
  assert got.shape == (3, 6, 8)
  np.testing.assert_allclose(np.asarray(got)[mask], np.asarray(expected)[mask],
                             rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(np.asarray(got)[~mask], 0.0)


def test_self_attention_is_masked_and_skips_the_diagonal():
  rng = np.random.default_rng(1)
  h = jnp.asarray(rng.standard_normal((2, 5, 6)), jnp.float32)
  mask = np.arange(5)[None] < np.array([[5], [3]])
  module = layers.SelfAttention()

  @functools.partial(jax.jit, compiler_options=FAST)
  def run(h, h2):
    params = module.init(jax.random.PRNGKey(0), h, mask)
    out, state = module.apply(params, h, mask, mutable=["intermediates"])
    return out, state["intermediates"]["attention"][0], module.apply(params, h2, mask)
  h2 = h.at[1, 3:].set(1e3)  # whatever sits at padding must not matter
  out, a, out2 = run(h, h2)
  a = np.asarray(a)
  np.testing.assert_allclose(a.sum(-1)[mask], 1.0, rtol=1e-5)
  assert np.all(a[:, np.arange(5), np.arange(5)] == 0)
  assert np.all(a[1][:, 3:] == 0) and np.all(a[1][3:] == 0)
  np.testing.assert_allclose(out2[1, :3], out[1, :3], rtol=1e-6)
  np.testing.assert_array_equal(out[1, 3:], 0.0)


def test_soft_align_rows_sum_to_one_over_valid_positions():
  rng = np.random.default_rng(2)
  a = jnp.asarray(rng.standard_normal((2, 4, 3)), jnp.float32)
  b = jnp.asarray(rng.standard_normal((2, 5, 3)), jnp.float32)
  am = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], bool)
  bm = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
  a_t, b_t, att_a, att_b = map(np.asarray, soft_align(a, am, b, bm))
  np.testing.assert_allclose(att_a.sum(-1)[am], 1.0, rtol=1e-6)
  np.testing.assert_allclose(att_b.sum(-1)[bm], 1.0, rtol=1e-6)
  assert np.all(att_a[0, :, 3:] == 0) and np.all(att_a[1, 2:] == 0)
  assert np.all(att_b[1, :, 2:] == 0) and np.all(att_b[0, 3:] == 0)
  e = np.einsum("id,jd->ij", np.asarray(a[1, :2]), np.asarray(b[1]))  # by hand
  w = np.exp(e - e.max(1, keepdims=True))
  w /= w.sum(1, keepdims=True)
  np.testing.assert_allclose(a_t[1, :2], w @ np.asarray(b[1]), rtol=1e-5)
  w_b = np.exp(e - e.max(0, keepdims=True))
  w_b /= w_b.sum(0, keepdims=True)
  np.testing.assert_allclose(b_t[1], w_b.T @ np.asarray(a[1, :2]), rtol=1e-5)


# --- whole models, every variant ---------------------------------------------------

def text_model(variant, **kw):
  kw.setdefault("vocab_size", VOCAB)
  return TextClassifier(embed_dim=8, hidden=8, variant=variant,
                        transfer=TransferOptions(num_layers=L, features=6), dropout_rate=0.0,
                        **kw)


def esim_model(variant, **kw):
  kw.setdefault("vocab_size", VOCAB)
  return ESIM(embed_dim=8, hidden=8, variant=variant,
              transfer=TransferOptions(num_layers=L, features=6), dropout_rate=0.0, **kw)


def imdb_inputs(rng, lengths, width):
  ids, mask = padded_batch(rng, lengths, width)
  return {"text": ids, "text_mask": mask}, {"text_graphs": random_graphs(rng, mask)}


def esim_inputs(rng, lengths_a, lengths_b, width_a, width_b):
  pa, pm = padded_batch(rng, lengths_a, width_a)
  hb, hm = padded_batch(rng, lengths_b, width_b)
  ga, gb = random_graphs(rng, pm), random_graphs(rng, hm)
  return ({"premise": pa, "premise_mask": pm, "hypothesis": hb, "hypothesis_mask": hm},
          {"premise_graphs": ga, "hypothesis_graphs": gb})


def overfit(model, inputs, graphs, labels, steps=15, learning_rate=0.03):
  """Init + `steps` Adam steps on one batch, as one jitted program.

  Returns (losses [steps], logits [steps, B, C], d loss / d graphs per step).
  """
  use_graphs = model.variant in ("embeddings", "rnn")
  graphs = graphs if use_graphs else {}

  @functools.partial(jax.jit, compiler_options=FAST)
  def run(key, inputs, graphs):
    params = model.init(key, **inputs, **graphs)["params"]
    opt = optax.adam(learning_rate)

    def loss_fn(p, g):
      logits = model.apply({"params": p}, **inputs, **g, train=True,
                           rngs={"dropout": key})
      loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
      return loss, logits

    def body(carry, _):
      p, state = carry
      (loss, logits), (grads, graph_grads) = jax.value_and_grad(
          loss_fn, argnums=(0, 1), has_aux=True)(p, graphs)
      updates, state = opt.update(grads, state, p)
      return (optax.apply_updates(p, updates), state), (loss, logits, graph_grads)

    _, out = jax.lax.scan(body, (params, opt.init(params)), None, length=steps)
    return out
  return run(jax.random.PRNGKey(0), inputs, graphs)


def _check_overfit(losses, logits, graph_grads, labels, half):
  losses = np.asarray(losses)
  assert np.all(np.isfinite(losses))
  assert losses[-1] < 0.3 * losses[0], losses  # fits the fixed batch
  assert np.all(np.argmax(logits[-1], -1) == labels)
  # rows half: are the same texts with garbage in the padding: identical outputs
  np.testing.assert_allclose(logits[:, half:], logits[:, :half], rtol=1e-4, atol=1e-5)
  for g in jax.tree_util.tree_leaves(graph_grads):  # graphs are inputs, frozen
    np.testing.assert_array_equal(np.asarray(g), 0.0)


@pytest.mark.parametrize("variant", TEXT_VARIANTS)
def test_one_text_variant_overfits_mock_data_and_ignores_padding(variant, mock_tasks):
  data, vocab = mock_tasks["imdb"]
  inputs, graphs, labels = mock_batch(np.random.default_rng(3), data, vocab)
  model = text_model(variant, vocab_size=len(vocab))
  losses, logits, graph_grads = overfit(model, inputs, graphs, labels)
  _check_overfit(losses, logits, graph_grads, labels, 3)


@pytest.mark.parametrize("variant", TEXT_VARIANTS)
def test_esim_variant_overfits_mock_data_and_ignores_padding(variant, mock_tasks):
  data, vocab = mock_tasks["mnli"]
  inputs, graphs, labels = mock_batch(np.random.default_rng(4), data, vocab)
  model = esim_model(variant, vocab_size=len(vocab))
  losses, logits, graph_grads = overfit(model, inputs, graphs, labels)
  _check_overfit(losses, logits, graph_grads, labels, 3)


def _perturbed(variables, scale=0.3):
  """Variables plus noise: non-zero biases, so that an RNN step over padding
  (zero inputs) would change its state and show up as a leak."""
  leaves, tree = jax.tree_util.tree_flatten(variables)
  keys = jax.random.split(jax.random.PRNGKey(42), len(leaves))
  return jax.tree_util.tree_unflatten(tree, [
      x + scale * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys)])


def _pad_more(inputs, graphs, extra):
  """Appends `extra` padding positions to every text (and graph)."""
  out, g_out = {}, {}
  for name, value in inputs.items():
    out[name] = np.pad(value, [(0, 0), (0, extra)])
  for name, g in graphs.items():
    g_out[name] = np.pad(g, [(0, 0)] * 3 + [(0, extra), (0, extra)])
  return out, g_out


def test_imdb_outputs_do_not_depend_on_the_padded_length():
  rng = np.random.default_rng(5)
  model = text_model("rnn")
  inputs, graphs = imdb_inputs(rng, [5, 2, 1], 5)

  @functools.partial(jax.jit, compiler_options=FAST)
  def run(short, long):
    variables = _perturbed(model.init(jax.random.PRNGKey(1), **short[0], **short[1]))
    return (variables["params"], model.apply(variables, **short[0], **short[1]),
            model.apply(variables, **long[0], **long[1]))
  params, short, longer = run((inputs, graphs), _pad_more(inputs, graphs, 6))
  np.testing.assert_allclose(longer, short, rtol=1e-4, atol=1e-5)
  assert "rnn_1" in params and "transfer" in params


def test_esim_outputs_do_not_depend_on_the_padded_length_and_align_sums_to_one():
  rng = np.random.default_rng(6)
  model = esim_model("rnn")
  inputs, graphs = esim_inputs(rng, [6, 2, 4], [3, 5, 1], 6, 5)

  @functools.partial(jax.jit, compiler_options=FAST)
  def run(short, long):
    variables = _perturbed(model.init(jax.random.PRNGKey(1), **short[0], **short[1]))
    apply = lambda i, g: model.apply(variables, **i, **g,  # noqa: E731
                                     mutable=["intermediates"])
    return variables, apply(*short), apply(*long)
  variables, (short, state), (longer, state_long) = run(
      (inputs, graphs), _pad_more(inputs, graphs, 4))
  np.testing.assert_allclose(longer, short, rtol=1e-4, atol=1e-5)
  att = np.asarray(state["intermediates"]["attention_premise"][0])  # [B, Ta, Tb]
  pm, hm = inputs["premise_mask"], inputs["hypothesis_mask"]
  np.testing.assert_allclose(att.sum(-1)[pm], 1.0, rtol=1e-5)
  assert np.all(att.sum(-1)[~pm] == 0)
  assert np.all(att.transpose(0, 2, 1)[~hm] == 0)  # no weight on padding words
  att_long = np.asarray(state_long["intermediates"]["attention_premise"][0])
  np.testing.assert_allclose(att_long[:, :6, :5], att, rtol=1e-4, atol=1e-6)
  assert set(variables["params"]) >= {"encoder", "encoder_2", "transfer",
                                       "composition", "self_attention"}


def test_variant_and_graph_checks():
  rng = np.random.default_rng(7)
  inputs, graphs = imdb_inputs(rng, [3, 2], 4)
  key = jax.random.PRNGKey(0)
  with pytest.raises(ValueError, match="needs text graphs"):
    text_model("embeddings").init(key, **inputs)
  bad = {"text_graphs": graphs["text_graphs"][:, :, :, :3, :3]}
  with pytest.raises(ValueError, match=r"text graphs have shape"):
    text_model("embeddings").init(key, **inputs, **bad)
  with pytest.raises(ValueError, match="unknown variant"):
    text_model("elmo").init(key, **inputs)
  with pytest.raises(ValueError, match="rnn_layers >= 2"):
    text_model("rnn", rnn_layers=1).init(key, **inputs, **graphs)
  assert TransferOptions(num_layers=L).layer("uniform").__class__ is GraphTransfer
  assert TransferOptions().layer("baseline") is None


def test_frozen_embeddings_get_no_gradient_and_glove_init_is_used():
  table = np.random.default_rng(8).standard_normal((VOCAB, 8)).astype(np.float32)
  ids = jnp.array([[3, 5, 0]])
  grads = {}
  for freeze in (False, True):
    module = layers.WordEmbedding(VOCAB, 8, layers.embedding_initializer(table), freeze)
    params = module.init(jax.random.PRNGKey(0), ids)["params"]
    np.testing.assert_array_equal(params["embedding"], table)
    grads[freeze] = jax.grad(lambda p: module.apply({"params": p}, ids).sum())(
        params)["embedding"]
  assert np.abs(np.asarray(grads[False])[[3, 5, 0]]).sum() > 0
  np.testing.assert_array_equal(np.asarray(grads[True]), 0.0)
  with pytest.raises(ValueError, match="embedding matrix is"):
    layers.WordEmbedding(VOCAB, 8, layers.embedding_initializer(table[:5])).init(
        jax.random.PRNGKey(0), ids)


def test_esim_baseline_of_the_rnn_variants_depth():
  """rnn_layers=2 without graphs: the same two input-encoding BiLSTMs as the
  'rnn' variant (same shapes), only the transfer between them missing."""
  rng = np.random.default_rng(7)
  inputs, graphs = esim_inputs(rng, [4, 2], [3, 5], 4, 5)
  shapes = lambda model, **extra: jax.tree_util.tree_map(  # noqa: E731
      lambda x: x.shape, jax.eval_shape(lambda: model.init(
          jax.random.PRNGKey(0), **inputs, **extra))["params"])
  deep = shapes(esim_model("baseline", rnn_layers=2))
  rnn = shapes(esim_model("rnn"), **graphs)
  assert set(rnn) - set(deep) == {"transfer"} and deep["encoder"] == rnn["encoder"]
  assert deep["encoder_2"] != rnn["encoder_2"]    # it reads 2H, not [2H ; gated]
  assert "encoder_2" not in shapes(esim_model("baseline"))
  with pytest.raises(ValueError, match="needs 2|1 or 2"):
    shapes(esim_model("rnn", rnn_layers=1), **graphs)
