"""GloVe extended by corpus vectors (glomo_jax.text.word_vectors,
experiments/word_vectors.py): each step against a hand case or NumPy."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys

import numpy as np
import pytest

from glomo_jax.text.glove import read_glove
from glomo_jax.text.word_vectors import (corpus_vocabulary, cooccurrence_counts,
                                         extended_glove, fit_linear_map, positive_pmi,
                                         svd_vectors)


def test_vocabulary_orders_by_count_and_marks_dropped_words():
  docs = [["b", "a", "c", "a"], ["c", "a", "b", "d"]]
  words, ids = corpus_vocabulary(docs, max_words=2, min_count=2)
  assert words == ["a", "b"]  # a: 3; b and c: 2, b first alphabetically; d: 1
  np.testing.assert_array_equal(ids[0], [1, 0, -1, 0])
  np.testing.assert_array_equal(ids[1], [-1, 0, 1, -1])


def test_cooccurrence_counts_match_a_loop_with_harmonic_weights():
  rng = np.random.default_rng(0)
  docs = [rng.integers(-1, 6, size=n) for n in (1, 2, 9, 17)]
  window = 3
  expected = np.zeros((6, 6))
  for ids in docs:
    for i in range(len(ids)):
      for j in range(max(0, i - window), min(len(ids), i + window + 1)):
        if i != j and ids[i] >= 0 and ids[j] >= 0:
          expected[ids[i], ids[j]] += 1.0 / abs(i - j)
  for chunk in (1, 10**6):  # flushing between documents changes nothing
    got = cooccurrence_counts(docs, 6, window, chunk_pairs=chunk).toarray()
    np.testing.assert_allclose(got, expected)
  # The -1 words hold their place: a gap of one word is a distance of 2.
  np.testing.assert_allclose(cooccurrence_counts([np.array([0, -1, 1])], 2, 2).toarray(),
                             [[0, 0.5], [0.5, 0]])


def test_positive_pmi_matches_the_dense_formula():
  counts = np.array([[0, 4, 1, 0], [4, 2, 0, 3], [1, 0, 0, 5], [0, 3, 5, 1]], float)
  import scipy.sparse  # noqa: PLC0415
  for alpha in (1.0, 0.75):
    total = counts.sum()
    p_word = counts.sum(1, keepdims=True) / total
    smoothed = counts.sum(0) ** alpha
    p_context = smoothed / smoothed.sum()
    with np.errstate(divide="ignore"):
      pmi = np.log(counts / total / (p_word * p_context))
    expected = np.where(counts > 0, np.maximum(pmi, 0.0), 0.0)
    got = positive_pmi(scipy.sparse.csr_matrix(counts), alpha).toarray()
    np.testing.assert_allclose(got, expected, atol=1e-12)
    assert (got > 0).sum() < (counts > 0).sum()  # some PMI values were negative


def test_svd_vectors_are_the_top_singular_directions():
  import scipy.sparse  # noqa: PLC0415
  rng = np.random.default_rng(1)
  matrix = rng.random((30, 20)) * (rng.random((30, 20)) < 0.3)
  got = svd_vectors(scipy.sparse.csr_matrix(matrix), 4, singular_power=0.5)
  u, s, _ = np.linalg.svd(matrix)
  expected = u[:, :4] * np.sqrt(s[:4])
  signs = np.sign(np.sum(got * expected, axis=0))  # singular vectors up to sign
  np.testing.assert_allclose(got, expected * signs, atol=1e-5)
  with pytest.raises(ValueError, match="dim must be"):
    svd_vectors(scipy.sparse.csr_matrix(matrix), 20)


def test_linear_map_recovers_an_affine_map_and_scores_held_out_words():
  rng = np.random.default_rng(2)
  source = rng.normal(size=(200, 6))
  weight, bias = rng.normal(size=(6, 4)), rng.normal(size=4)
  fitted = fit_linear_map(source, source @ weight + bias, ridge=1e-9)
  np.testing.assert_allclose(fitted.weight, weight, atol=1e-6)
  np.testing.assert_allclose(fitted.bias, bias, atol=1e-6)
  assert fitted.held_out_cosine == pytest.approx(1.0) and fitted.shared == 200
  noise = fit_linear_map(source, rng.normal(size=(200, 4)))  # nothing to learn
  assert abs(noise.held_out_cosine) < 0.1 < noise.train_cosine  # fits noise, cannot predict it


def _two_topic_corpus(rng, docs=300):
  """Documents about animals or about numbers; GloVe knows a few of each."""
  topics = [["cat", "dog", "horse", "cow", "sheep", "goat"],
            ["one", "two", "three", "four", "five", "six"]]
  glue = ["the", "a", "and"]
  out = []
  for d in range(docs):
    topic = topics[d % 2]
    out.append([str(rng.choice(topic if rng.random() < 0.7 else glue)) for _ in range(30)])
  return out


def test_extended_glove_keeps_glove_and_maps_the_rest_near_their_topic():
  rng = np.random.default_rng(3)
  animal, number = np.eye(4)[0] * 2, np.eye(4)[1] * 2
  glove = {w: animal + rng.normal(0, 0.05, 4) for w in ("cat", "dog", "horse", "cow")}
  glove.update({w: number + rng.normal(0, 0.05, 4) for w in ("one", "two", "three", "four")})
  glove.update({w: rng.normal(0, 0.05, 4) for w in ("the", "a")})
  result = extended_glove(_two_topic_corpus(rng), glove, min_count=1, window=3, svd_dim=5,
                          ridge=1e-3)
  for word, vector in glove.items():
    np.testing.assert_array_equal(result.vectors[word], vector.astype(np.float32))
  assert result.mapped == 5  # sheep, goat, five, six, and
  for word, topic in (("sheep", animal), ("goat", animal), ("five", number),
                      ("six", number)):
    other = number if topic is animal else animal
    vector = result.vectors[word]
    assert np.linalg.norm(vector - topic) < np.linalg.norm(vector - other), word
  with pytest.raises(ValueError, match="no corpus word is seen 2 times"):
    extended_glove([["cat", "dog"]], glove, min_count=2)
  with pytest.raises(ValueError, match="share no word"):
    extended_glove(_two_topic_corpus(rng, 20), {"zebra": np.ones(4)}, min_count=1, svd_dim=3)


def test_entry_point_writes_a_glove_file_the_tasks_read(tmp_path):
  rng = np.random.default_rng(4)
  corpus = tmp_path / "corpus.jsonl"
  corpus.write_text("".join(json.dumps({"text": " ".join(d).capitalize() + "."}) + "\n"
                            for d in _two_topic_corpus(rng, 120)))
  glove = tmp_path / "glove.txt.gz"
  with gzip.open(glove, "wt") as f:
    for word in ("cat", "dog", "one", "two", "the"):
      f.write(word + " " + " ".join(f"{x:.3f}" for x in rng.normal(size=4)) + "\n")
  out = tmp_path / "out" / "extended.txt.gz"
  command = [sys.executable, "-m", "experiments.word_vectors", f"--corpus={corpus}",
             f"--glove={glove}", f"--output={out}", "--min_count=1", "--svd_dim=4",
             f"--output_json={tmp_path / 'figures.json'}", "--neighbours=cat"]
  done = subprocess.run(command, capture_output=True, text=True, check=True)
  assert "mapped" in done.stdout
  vectors, dim = read_glove(str(out))
  original, _ = read_glove(str(glove))
  assert dim == 4 and set(vectors) >= set(original) | {"horse", "six", "."}
  np.testing.assert_allclose(vectors["cat"], original["cat"], atol=1e-5)
  figures = json.loads((tmp_path / "figures.json").read_text())
  assert figures["mapped_words"] == len(vectors) - 5 and figures["neighbours"]["cat"]
  bad = subprocess.run(command[:4] + [f"--glove={tmp_path / 'missing.txt'}"] + command[5:],
                       capture_output=True, text=True)
  assert bad.returncode == 1 and bad.stderr.strip().startswith("error:")
  assert "missing.txt" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
