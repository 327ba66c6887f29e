"""train_classifier: learns a tiny task, early stopping, frozen embeddings,
graphs from a real (tiny, exported) predictor on the fly, memoised, and from
the on-disk cache."""
import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glomo_jax import GLoMo, ModelConfig
from glomo_jax.data.tokenizer import train_tokenizer
from glomo_jax.export import export_graph_predictor, load_graph_predictor
from glomo_jax.tasks import (ESIM, GraphCache, IMDBClassifier, datasets,
                             embedding_initializer, embedding_matrix, evaluate,
                             load_task, predictor_graph_fn, train_classifier)
from glomo_jax.tasks.train import fit_graphs, precomputed_graphs
from glomo_jax.transfer.align import word_graphs
from conftest import random_variables, write_jsonl

FAST = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}
FILLER = "the a movie film plot actor scene story one it was is and of".split()


def sentiment_records(n, seed):
  """Reviews whose label is told by one word ('great' / 'awful') among filler."""
  rng = np.random.default_rng(seed)
  out = []
  for i in range(n):
    label = int(i % 2)
    words = list(rng.choice(FILLER, rng.integers(3, 9)))
    words.insert(int(rng.integers(0, len(words) + 1)), "great" if label else "awful")
    out.append({"text": " ".join(words) + ("<br />" if i % 3 == 0 else ""),
                "label": label})
  return out


def test_imdb_learns_a_tiny_task_with_frozen_embeddings_and_early_stopping(tmp_path, caplog):
  files = {"train": write_jsonl(tmp_path / "train.jsonl", sentiment_records(64, 0)),
           "test": write_jsonl(tmp_path / "test.jsonl", sentiment_records(20, 1))}
  data = load_task("imdb", "files", files=files, val_fraction=0.25, seed=0)
  vocab = data.build_vocabulary()
  table, _ = embedding_matrix(vocab, None, dim=16, oov_scale=0.5, seed=0)
  model = IMDBClassifier(vocab_size=len(vocab), embed_dim=16, hidden=16,
                         dropout_rate=0.1, freeze_embeddings=True,
                         embedding_init=embedding_initializer(table))
  lines = []
  shapes = dict(max_words=12, length_multiple=12)  # one padded length: one compile
  with caplog.at_level("INFO", logger="glomo_jax.tasks.train"):
    out = train_classifier(model, data, vocab, learning_rate=0.01, batch_size=8,
                           eval_batch_size=8, epochs=12, eval_every=6, patience=4, seed=0,
                           log=lines.append, compiler_options=FAST, progress_every_s=0,
                           **shapes)
  # between evaluations: steps/s, ETA and the number of compiled step shapes
  progress = [r.getMessage() for r in caplog.records if "steps/s" in r.getMessage()]
  assert len(progress) == sum(1 for s in range(1, out["steps"]) if s % 6), progress
  # one padded length: one compiled step ('?' where jax has no _cache_size)
  assert "ETA" in progress[-1] and re.search(r"\((1|\?) compiled step shapes\)", progress[-1])
  results = out["results"]
  assert set(results) == {"validation", "test"}
  assert results["validation"] >= 0.9 and results["test"] >= 0.9, out["curves"]
  np.testing.assert_array_equal(out["params"]["embed"]["embedding"], table)  # frozen
  curves = out["curves"]
  assert [c["step"] for c in curves] == list(range(6, out["steps"] + 1, 6))
  assert curves[-1]["train_loss"] < curves[0]["train_loss"]
  best = max(c["validation_accuracy"] for c in curves)
  assert results["validation"] == best
  assert out["best_step"] == next(c["step"] for c in curves
                                  if c["validation_accuracy"] == best)
  if out["stopped_early"]:  # patience 4: the last 4 evaluations did not improve
    assert len(curves) - [c["step"] for c in curves].index(out["best_step"]) - 1 == 4
  assert len(lines) == len(curves) + 1 and out["wall_time_s"] > 0
  # the reported test accuracy is that of the returned (best) parameters
  again = evaluate(model, out["params"], data["test"], vocab, data.text_fields,
                   batch_size=8, compiler_options=FAST, **shapes)
  assert again == pytest.approx(results["test"])


def test_fit_graphs_and_graph_cache_memoise_per_example():
  calls = []

  def graph_fn(word_lists, length):
    calls.append([list(w) for w in word_lists])
    out = np.zeros((len(word_lists), 2, 1, length, length), np.float32)
    for b, words in enumerate(word_lists):
      out[b, :, :, :len(words), :len(words)] = len(words[0]) if words else 0
    return out

  g = np.ones((2, 2, 1, 3, 3), np.float32)
  assert fit_graphs(g, 5).shape == (2, 2, 1, 5, 5) and fit_graphs(g, 5)[..., 3:, :].sum() == 0
  assert fit_graphs(g, 2).shape == (2, 2, 1, 2, 2)
  cache = GraphCache(graph_fn)
  words = [["aa", "b"], ["ccc"], []]
  first = cache("train", "text", [4, 7, -1], words, 4)
  assert first.shape == (3, 2, 1, 4, 4)
  assert calls == [[["aa", "b"], ["ccc"], []]]  # padded to the batch: one shape
  assert first[0, 0, 0, :2, :2].tolist() == [[2, 2], [2, 2]] and first[0, ..., 2:, :].sum() == 0
  assert first[1, 0, 0, 0, 0] == 3 and first[2].sum() == 0  # padding row: zeros
  again = cache("train", "text", [7, 4], [["ccc"], ["aa", "b"]], 6)
  assert len(calls) == 1 and cache.hits == 2 and cache.misses == 2
  np.testing.assert_array_equal(again[1, ..., :4, :4], first[0])
  cache("validation", "text", [4], [["zz"]], 1)  # another split: another key
  assert len(calls) == 2 and len(cache) == 3
  tiny = GraphCache(graph_fn, max_bytes=0)
  tiny("train", "text", [0], [["a"]], 1)
  tiny("train", "text", [0], [["a"]], 1)
  assert len(tiny) == 0 and tiny.misses == 2


# --- a real predictor ----------------------------------------------------------

NLI = [("a man sleeps on the sofa", "a person rests", "entailment"),
       ("the dog runs in the park", "an animal is outside", "entailment"),
       ("two kids play football", "children sleep at home", "contradiction"),
       ("a woman sings a song", "the woman is a famous singer", "neutral"),
       ("the cat sat on the mat", "a cat is sitting", "entailment"),
       ("people dance at night", "nobody is dancing", "contradiction"),
       ("a boy reads a book", "the boy likes reading novels", "neutral"),
       ("the car is red", "the car is blue", "contradiction")]


@pytest.fixture(scope="module")
def nli_setup(tmp_path_factory):
  """(TaskData with matched/mismatched splits, Vocabulary, loaded predictor)."""
  root = tmp_path_factory.mktemp("tasks_train")
  records = [{"premise": p, "hypothesis": h, "label": y} for p, h, y in NLI]
  files = {"train": write_jsonl(root / "train.jsonl", records * 2),
           "matched": write_jsonl(root / "m.jsonl", records[:5]),
           "mismatched": write_jsonl(root / "mm.jsonl", records[5:])}
  data = load_task("mnli", "files", files=files, val_fraction=0.25, seed=0)
  vocab = data.build_vocabulary()
  config = ModelConfig.tiny()  # L = 2, K = 4
  sentences = [r["premise"] for r in records] + [r["hypothesis"] for r in records]
  tokenizer = train_tokenizer(sentences, 40, str(root / "tok") + "/")
  path = export_graph_predictor(str(root / "export"), config, random_variables(config, graphs_only=True),
                                tokenizer)
  return data, vocab, load_graph_predictor(path)


def test_esim_with_graphs_from_a_real_predictor(nli_setup, tmp_path):
  data, vocab, predictor = nli_setup
  graph_fn = predictor_graph_fn(predictor)
  words = data["train"].texts["premise"][:3]
  g = graph_fn(words, 7)
  reference, _ = word_graphs(predictor, None, words, 7)
  np.testing.assert_array_equal(g, reference)
  assert g.shape == (3, 4, 4, 7, 7)

  model = ESIM(vocab_size=len(vocab), embed_dim=8, hidden=8, dropout_rate=0.1,
               glomo="embeddings", transfer_layers=2, transfer_features=4)
  cache = GraphCache(graph_fn)
  shapes = dict(max_words=10, length_multiple=10)  # one padded length: one compile
  out = train_classifier(model, data, vocab, learning_rate=0.01, batch_size=4,
                         eval_batch_size=4, steps=6, eval_every=3, graph_fn=cache,
                         seed=1, compiler_options=FAST, **shapes)
  assert set(out["results"]) == {"validation", "matched", "mismatched"}
  assert all(0.0 <= v <= 1.0 for v in out["results"].values())
  assert "transfer" in out["params"] and len(out["curves"]) == 2
  n_train, n_val = len(data["train"]), len(data["validation"])
  # every example of each split computed once per text field, then reused
  seen = 2 * (n_train + n_val + len(data["matched"]) + len(data["mismatched"]))
  assert cache.misses == seen and cache.hits > 0

  # the on-disk cache (glomo_jax.transfer.cache) gives the same graphs and accuracies
  disk = precomputed_graphs(str(tmp_path / "graphs"), predictor, data, 10,
                            splits=["matched", "mismatched"], dtype="float32")
  for name in ("matched",):
    on_the_fly = evaluate(model, out["params"], data[name], vocab, data.text_fields,
                          batch_size=4, graph_fn=graph_fn, compiler_options=FAST,
                          **shapes)
    from_disk = evaluate(model, out["params"], data[name], vocab, data.text_fields,
                         batch_size=4, graph_fn=disk, split_name=name,
                         compiler_options=FAST, **shapes)
    assert from_disk == on_the_fly
  batch = datasets.make_batch(data["matched"], [3, 0], vocab, **shapes)
  from glomo_jax.tasks.train import _batch_graphs  # pylint: disable=g-import-not-at-top
  a = _batch_graphs(disk, "matched", batch, data.text_fields)
  b = _batch_graphs(graph_fn, "matched", batch, data.text_fields)
  for f in data.text_fields:
    np.testing.assert_allclose(a[f], b[f], rtol=1e-6, atol=1e-7)
    assert a[f].shape[-1] == batch[f].shape[1]
  with pytest.raises(ValueError, match="holds 3 examples"):
    _batch_graphs({"matched": disk["mismatched"]}, "matched", batch, data.text_fields)
  swapped = datasets.make_batch(data["matched"], [1, 0], vocab, **shapes)
  swapped["index"] = np.array([0, 1])  # rows no longer match the cache's examples
  with pytest.raises(ValueError, match="does not match the data"):
    _batch_graphs(disk, "matched", swapped, data.text_fields)
  with pytest.raises(ValueError, match="reads predictor graphs"):
    train_classifier(model, data, vocab, steps=1)
