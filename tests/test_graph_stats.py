"""glomo_jax.eval.graph_stats: hand-computed cases, padding, batch and head
alignment, the uniform reference; the experiments.graph_stats entry point on
a tiny export."""
import functools
import json
import math

import numpy as np
import pytest

from glomo_jax.eval.graph_stats import graph_statistics, uniform_reference

LN = math.log


def chain_graphs(w=5, n=4):
  """[1, 2, 1, w, w] (L = 1): forward layer = each real word reads the
  previous one (row 0 empty); backward layer = each real word reads itself.
  Padding rows hold junk that must not be counted."""
  g = np.zeros((1, 2, 1, w, w))
  for j in range(1, n):
    g[0, 0, 0, j, j - 1] = 1.0
  for j in range(n):
    g[0, 1, 0, j, j] = 1.0
  g[0, :, 0, n:, 0] = 1.0
  mask = np.arange(w)[None] < n
  return g, mask


def test_one_hot_graphs_hand_computed():
  g, mask = chain_graphs()
  previous, itself = graph_statistics(g, mask, self_loops=True)
  # forward rows 1..3 may read words 0..j: uniform would spread over j + 1
  assert previous == pytest.approx({
      "empty": 0.25, "entropy": 0.0, "self": 0.0, "adjacent": 1.0, "distance": 1.0,
      "entropy_gap": (LN(2) + LN(3) + LN(4)) / 3, "uniform_distance": (0.5 + 1 + 1.5) / 3,
      "rows": 3})
  # backward rows 0..3 may read words j..3
  assert itself == pytest.approx({
      "empty": 0.0, "entropy": 0.0, "self": 1.0, "adjacent": 0.0, "distance": 0.0,
      "entropy_gap": (LN(4) + LN(3) + LN(2)) / 4, "uniform_distance": (1.5 + 1 + 0.5) / 4,
      "rows": 4})
  # without self-loops (the default) forward row j may read words 0..j − 1
  strict, _ = graph_statistics(g, mask)
  assert strict["entropy_gap"] == pytest.approx((LN(1) + LN(2) + LN(3)) / 3)
  assert strict["uniform_distance"] == pytest.approx((1 + 1.5 + 2) / 3)


def test_spread_row_entropy_and_distance():
  g = np.zeros((1, 2, 1, 3, 3))
  g[0, 0, 0, 2] = [0.5, 0.25, 0.25]    # forward row 2 reads words 0, 1, 2
  s = graph_statistics(g, np.ones((1, 3), bool), self_loops=True)[0]
  entropy = -(0.5 * LN(0.5) + 2 * 0.25 * LN(0.25))
  assert s["empty"] == pytest.approx(2 / 3) and s["rows"] == 1
  assert s["entropy"] == pytest.approx(entropy)
  assert s["entropy_gap"] == pytest.approx(LN(3) - entropy)
  assert s["distance"] == pytest.approx(0.5 * 2 + 0.25 * 1)
  assert s["uniform_distance"] == pytest.approx(1.0)
  assert s["self"] == pytest.approx(0.25) and s["adjacent"] == pytest.approx(0.25)


def test_batch_and_heads_pool_rows_of_every_example():
  """B = 2 texts of different lengths × K = 2 heads: every statistic is the
  row-weighted mean of the single (text, head) statistics."""
  rng = np.random.default_rng(0)
  w, lengths = 6, (6, 3)
  mask = np.arange(w)[None] < np.array(lengths)[:, None]
  g = np.zeros((2, 2, 2, w, w))
  for b, n in enumerate(lengths):
    for layer in range(2):
      for k in range(2):
        for j in range(n):
          src = np.arange(0, j + 1) if layer == 0 else np.arange(j, n)
          if rng.random() < 0.2:
            continue                      # an empty row
          p = rng.random(len(src))
          g[b, layer, k, j, src] = p / p.sum()
  pooled = graph_statistics(g, mask, self_loops=True)
  for layer in range(2):
    parts = [graph_statistics(g[b:b + 1, :, k:k + 1], mask[b:b + 1], self_loops=True)[layer]
             for b in range(2) for k in range(2)]
    rows = sum(p["rows"] for p in parts)
    assert pooled[layer]["rows"] == rows
    for key in ("entropy", "entropy_gap", "self", "adjacent", "distance", "uniform_distance"):
      want = sum(p[key] * p["rows"] for p in parts) / rows
      assert pooled[layer][key] == pytest.approx(want), key
    assert pooled[layer]["empty"] == pytest.approx(1 - rows / (2 * sum(lengths)))


def test_uniform_reference_hand_computed():
  _, mask = chain_graphs(w=5, n=4)
  for s in uniform_reference(mask, self_loops=True).values():   # rows with 1 … 4 words
    assert s["empty"] == 0.0 and s["rows"] == 4 and s["entropy_gap"] == pytest.approx(0)
    assert s["entropy"] == pytest.approx((LN(2) + LN(3) + LN(4)) / 4)
    assert s["distance"] == pytest.approx((0 + 0.5 + 1 + 1.5) / 4)
    assert s["distance"] == pytest.approx(s["uniform_distance"])
    assert s["self"] == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4) / 4)
    assert s["adjacent"] == pytest.approx((0 + 1 / 2 + 1 / 3 + 1 / 4) / 4)
  for s in uniform_reference(mask).values():   # rows with 0, 1, 2, 3 allowed words
    assert s["empty"] == 0.25 and s["rows"] == 3 and s["self"] == 0.0
    assert s["distance"] == pytest.approx((1 + 1.5 + 2) / 3)


def test_bad_shapes_are_named():
  g, mask = chain_graphs()
  with pytest.raises(ValueError, match=r"\[B, 2L, K, W, W\]"):
    graph_statistics(g[0], mask)
  with pytest.raises(ValueError, match=r"\[B, 2L, K, W, W\]"):
    graph_statistics(g[:, :1], mask)           # an odd number of layers
  with pytest.raises(ValueError, match="mask must be"):
    graph_statistics(g, mask[:, :3])


def test_entry_point_on_a_tiny_export(tmp_path):
  from glomo_jax import ModelConfig  # noqa: PLC0415
  from glomo_jax.data.tokenizer import train_tokenizer  # noqa: PLC0415
  from glomo_jax.export import export_graph_predictor  # noqa: PLC0415
  from experiments.graph_stats import statistics_table  # noqa: PLC0415
  from conftest import random_variables  # noqa: PLC0415
  from test_graphs_predictor import SENTENCES as sentences  # noqa: PLC0415
  config = ModelConfig.tiny()
  tokenizer = train_tokenizer(sentences, 30, str(tmp_path / "tok") + "/")
  export = export_graph_predictor(str(tmp_path / "export"), config,
                                  random_variables(config, graphs_only=True), tokenizer)
  data = tmp_path / "texts.jsonl"
  # as written: capitals and no space before the full stop, unlike the words
  data.write_text("".join(json.dumps({"premise": s.capitalize().replace(" .", ".")}) + "\n"
                          for s in sentences))
  table = statistics_table(export, str(data), "premise", num=5, max_words=8, batch_size=2)
  lines = table.splitlines()
  assert lines[0].startswith("5 texts") and len(lines) == 3 + 2 * config.num_graph_layers + 2
  # the uniform rows: the last word's backward row is empty, nobody reads itself
  assert lines[-1].startswith("| uniform, backward |") and " | 0.00 | 0.000 | " in lines[-1]
  assert "read the raw texts" in lines[0]
  words = statistics_table(export, str(data), "premise", num=5, max_words=8, batch_size=2,
                           read="words")
  assert "read the words" in words and words.splitlines()[1:] != lines[1:]
  with pytest.raises(ValueError, match="no field 'hypothesis'"):
    statistics_table(export, str(data), "hypothesis", num=5, max_words=8)


def test_row_health_hand_computed():
  from glomo_jax.eval import row_health  # noqa: PLC0415
  live = np.array([[3, 0], [2, 2], [1, 1], [0, 0]])       # [2L=4, K=2] over 4 real rows
  h = row_health(live, 4)
  assert h == {"empty_rows_fw1": 0.625, "dead_heads_fw1": 1.0, "empty_rows_fw2": 0.5,
               "dead_heads_fw2": 0.0, "empty_rows_bw1": 0.75, "dead_heads_bw1": 0.0,
               "empty_rows_bw2": 1.0, "dead_heads_bw2": 2.0}
  with pytest.raises(ValueError, match=r"\[2L, K\]"):
    row_health(live[:3], 4)


def test_pretraining_eval_step_counts_the_live_rows_of_real_tokens():
  import jax  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415
  import optax  # noqa: PLC0415
  from glomo_jax import GLoMo, ModelConfig  # noqa: PLC0415
  from glomo_jax.pretraining import GLoMoObjective  # noqa: PLC0415
  config = ModelConfig.tiny()
  objective = GLoMoObjective(config, 12, optax.sgd(1.0))
  # jitted: eagerly, every op of the model compiles on its own
  variables = jax.jit(objective.init_variables)(jax.random.PRNGKey(0))
  tokens = jax.random.randint(jax.random.PRNGKey(1), (3, 12), 4, config.vocab_size)
  mask = jnp.ones((3, 12), jnp.int32).at[1, 7:].set(0)
  out = jax.jit(objective.eval_step)(variables, {"tokens": tokens, "mask": mask})
  graphs = np.asarray(jax.jit(functools.partial(
      GLoMo(config.replace(sample_positions=0)).apply, method=GLoMo.graphs))(
      variables, tokens, mask))                               # [B, 2L, K, T, T]
  live = (graphs.sum(-1) > 0.5) & np.asarray(mask, bool)[:, None, None, :]
  np.testing.assert_array_equal(out["live_rows"], live.sum((0, 3)))
  assert out["real_rows"] == 31 and "graphs" not in out
  assert 0 < np.asarray(out["live_rows"]).sum() < 31 * graphs.shape[1] * graphs.shape[2]


def test_locality_sums_equal_the_numpy_statistics():
  """`eval.locality` (jitted sums) against `graph_statistics` on random
  causal graphs with padding and empty rows: the previous/next-unit weight
  is the 'adjacent' weight of a one-sided graph."""
  import jax.numpy as jnp  # noqa: PLC0415
  from glomo_jax.eval.locality import locality_metrics, locality_sums  # noqa: PLC0415
  rng = np.random.default_rng(0)
  b, layers, heads, t = 3, 2, 2, 7
  mask = np.ones((b, t), bool)
  mask[1, 5:] = False
  mask[2, 3:] = False
  lower = np.tril(np.ones((t, t)), -1)
  raw = rng.uniform(size=(b, 2 * layers, heads, t, t)) ** 4
  raw[:, :layers] *= lower
  raw[:, layers:] *= lower.T
  raw *= (mask[:, None, None, :, None] & mask[:, None, None, None, :])
  raw[0, 1, 0, 3] = 0.0                             # an empty row
  raw[:, 3, 1] = 0.0                                # a dead head
  graphs = raw / np.maximum(raw.sum(-1, keepdims=True), 1e-30)
  sums = {k: np.asarray(v) for k, v in locality_sums(jnp.asarray(graphs, jnp.float32),
                                                      jnp.asarray(mask)).items()}
  stats = graph_statistics(graphs, mask)
  for layer in range(2 * layers):
    s = stats[layer]
    assert sums["rows"][layer] == s["rows"]
    np.testing.assert_allclose(sums["near"][layer] / s["rows"], s["adjacent"], rtol=1e-5)
    np.testing.assert_allclose(sums["distance"][layer] / s["rows"], s["distance"], rtol=1e-5)
    np.testing.assert_allclose(sums["distance_uniform"][layer] / s["rows"],
                               s["uniform_distance"], rtol=1e-5)
  # the uniform row's previous-unit weight is 1 / (number of allowed sources)
  count = np.arange(t)[None, :] * mask                     # forward: j real sources before
  live = graphs[:, 0].sum(-1) > 0.5                        # [B, K, T]
  expected = ((live & mask[:, None]) / np.maximum(count, 1)[:, None]).sum()
  np.testing.assert_allclose(sums["near_uniform"][0], expected, rtol=1e-5)
  metrics = locality_metrics(sums)
  np.testing.assert_allclose(metrics["near_fw1"], stats[0]["adjacent"], rtol=1e-5)
  assert "near_bw2" in metrics and len(metrics) == 4 * 2 * layers


def test_eval_step_counts_live_rows_with_batch_statistics_too():
  import jax  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415
  import optax  # noqa: PLC0415
  from glomo_jax import GLoMo, ModelConfig  # noqa: PLC0415
  from glomo_jax.pretraining import GLoMoObjective  # noqa: PLC0415
  config = ModelConfig.tiny()
  objective = GLoMoObjective(config, 12, optax.sgd(1.0))
  variables = objective.init_variables(jax.random.PRNGKey(0))
  tokens = jax.random.randint(jax.random.PRNGKey(1), (3, 12), 4, config.vocab_size)
  mask = jnp.ones((3, 12), jnp.int32).at[1, 7:].set(0)
  out = objective.eval_step(variables, {"tokens": tokens, "mask": mask})
  graphs, _ = GLoMo(config).apply(variables, tokens, mask, train=True, method=GLoMo.graphs,
                                  mutable=["batch_stats"])
  live = (np.asarray(graphs).sum(-1) > 0.5) & np.asarray(mask, bool)[:, None, None, :]
  np.testing.assert_array_equal(out["live_rows_batch_stats"], live.sum((0, 3)))
  assert set(out["locality"]) == {"rows", "near", "distance", "near_uniform",
                                  "distance_uniform"}
  layer_norm = GLoMoObjective(config.replace(norm="layer"), 12, optax.sgd(1.0))
  out = layer_norm.eval_step(layer_norm.init_variables(jax.random.PRNGKey(0)),
                             {"tokens": tokens, "mask": mask})
  assert "live_rows_batch_stats" not in out
