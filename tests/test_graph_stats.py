"""glomo_jax.eval.graph_stats: hand-computed cases, padding, the uniform
reference; the experiments.graph_stats entry point on a tiny export."""
import json
import math

import numpy as np
import pytest

from glomo_jax.eval.graph_stats import graph_statistics, uniform_reference


def chain_graphs(w=5, n=4):
  """[1, 2, 1, w, w]: layer 0 = each real word reads the previous one (row 0
  empty); layer 1 = each real word reads itself. Padding rows hold junk."""
  g = np.zeros((1, 2, 1, w, w))
  for j in range(1, n):
    g[0, 0, 0, j, j - 1] = 1.0
  for j in range(n):
    g[0, 1, 0, j, j] = 1.0
  g[0, :, 0, n:, 0] = 1.0            # padding rows: must not be counted
  mask = np.arange(w)[None] < n
  return g, mask


def test_one_hot_graphs_hand_computed():
  g, mask = chain_graphs()
  previous, itself = graph_statistics(g, mask)
  assert previous == pytest.approx({"empty": 0.25, "entropy": 0.0, "self": 0.0,
                                    "adjacent": 1.0, "distance": 1.0, "rows": 3})
  assert itself == pytest.approx({"empty": 0.0, "entropy": 0.0, "self": 1.0,
                                  "adjacent": 0.0, "distance": 0.0, "rows": 4})


def test_spread_row_entropy_and_distance():
  g = np.zeros((1, 1, 1, 3, 3))
  g[0, 0, 0, 2] = [0.5, 0.25, 0.25]    # row 2 reads words 0, 1, 2
  (s,) = graph_statistics(g, np.ones((1, 3), bool))
  assert s["empty"] == pytest.approx(2 / 3)
  assert s["entropy"] == pytest.approx(-(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25)))
  assert s["distance"] == pytest.approx(0.5 * 2 + 0.25 * 1)
  assert s["self"] == pytest.approx(0.25) and s["adjacent"] == pytest.approx(0.25)


def test_uniform_reference_hand_computed():
  _, mask = chain_graphs(w=5, n=4)
  ref = uniform_reference(mask)
  for s in ref.values():   # rows with 1, 2, 3 sources; one row has none
    assert s["empty"] == pytest.approx(0.25) and s["rows"] == 3
    assert s["entropy"] == pytest.approx((0 + math.log(2) + math.log(3)) / 3)
    assert s["distance"] == pytest.approx((1 + 1.5 + 2) / 3)
    assert s["adjacent"] == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)
    assert s["self"] == 0.0


def test_bad_shapes_are_named():
  g, mask = chain_graphs()
  with pytest.raises(ValueError, match=r"\[B, 2L, K, W, W\]"):
    graph_statistics(g[0], mask)
  with pytest.raises(ValueError, match="mask must be"):
    graph_statistics(g, mask[:, :3])


def test_entry_point_on_a_tiny_export(tmp_path):
  from glomo_jax import ModelConfig  # noqa: PLC0415
  from glomo_jax.data.tokenizer import train_tokenizer  # noqa: PLC0415
  from glomo_jax.export import export_graph_predictor  # noqa: PLC0415
  from experiments.graph_stats import statistics_table  # noqa: PLC0415
  from conftest import random_variables  # noqa: PLC0415
  from test_transfer_predictor import SENTENCES as sentences  # noqa: PLC0415
  config = ModelConfig.tiny()
  tokenizer = train_tokenizer(sentences, 30, str(tmp_path / "tok") + "/")
  export = export_graph_predictor(str(tmp_path / "export"), config,
                                  random_variables(config, graphs_only=True), tokenizer)
  data = tmp_path / "texts.jsonl"
  data.write_text("".join(json.dumps({"premise": s}) + "\n" for s in sentences))
  table = statistics_table(export, str(data), "premise", num=5, max_words=8, batch_size=2)
  lines = table.splitlines()
  assert lines[0].startswith("5 texts") and len(lines) == 3 + 2 * config.num_graph_layers + 2
  from glomo_jax.tasks.words import tokenize  # noqa: PLC0415
  words = sum(min(len(tokenize(t)), 8) for t in sentences[-5:])
  # the last word of each text has no later word: empty rows 5 / words
  assert lines[-1].startswith(f"| uniform, later words | {5 / words:.3f} |"), lines[-1]
  with pytest.raises(ValueError, match="no field 'hypothesis'"):
    statistics_table(export, str(data), "hypothesis", num=5, max_words=8)
