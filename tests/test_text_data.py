"""Task data: word tokenizer, vocabulary, GloVe loader, dataset readers
(JSON lines and TFDS under mock_data), validation split, batching."""
import gzip
import json
import lzma
import os

import numpy as np
import pytest
import tensorflow_datasets as tfds

from conftest import SHARED_DATA
from glomo_jax.train import batches as example_batches
from glomo_jax.text import batching, glove, readers, splits
from glomo_jax.text.words import PAD_ID, UNK_ID, Vocabulary, tokenize

GLOVE_TOP = os.path.join(SHARED_DATA, "glove", "glove.6B.100d.top2604.txt.gz")


# --- words ------------------------------------------------------------------

def test_tokenize_rules():
  text = "I didn't LIKE it.<br /><br />Well-made, though: 8/10!<BR>It's 1,000 x 3.5"
  assert tokenize(text) == [
      "i", "did", "n't", "like", "it", ".", "well-made", ",", "though", ":", "8", "/",
      "10", "!", "it", "'s", "1,000", "x", "3.5"]
  assert tokenize("can't won't") == ["ca", "n't", "wo", "n't"]
  assert tokenize("") == [] and tokenize("  <br/> ") == []
  assert "<br" not in " ".join(tokenize("a<br />b"))


def test_vocabulary_build_order_limits_and_encoding(tmp_path):
  texts = [["b", "a", "c", "a"], ["a", "b", "d"], ["e"]]
  vocab = Vocabulary.build(texts)
  assert vocab.words[:2] == ["<pad>", "<unk>"]
  assert vocab.words[2:] == ["a", "b", "c", "d", "e"]  # count desc, then alphabetical
  assert vocab.counts.tolist() == [0, 0, 3, 2, 1, 1, 1]
  assert Vocabulary.build(texts, min_count=2).words[2:] == ["a", "b"]
  assert Vocabulary.build(texts, max_size=4).words == ["<pad>", "<unk>", "a", "b"]
  assert vocab.encode(["a", "zzz", "e"]) == [2, UNK_ID, 6]
  ids, mask = vocab.encode_batch([["a", "b", "c"], [], ["zzz"]], max_words=2)
  assert ids.dtype == np.int32 and ids.shape == (3, 2)
  assert ids.tolist() == [[2, 3], [PAD_ID, PAD_ID], [UNK_ID, PAD_ID]]
  assert mask.tolist() == [[True, True], [False, False], [True, False]]
  assert vocab.encode_batch([["a"]], length=5)[0].shape == (1, 5)
  with pytest.raises(ValueError, match="shorter"):
    vocab.encode_batch([["a", "b"]], length=1)
  vocab.save(str(tmp_path / "v.json"))
  again = Vocabulary.load(str(tmp_path / "v.json"))
  assert again.words == vocab.words and again.counts.tolist() == vocab.counts.tolist()
  assert vocab.unk_rate([["a", "q"], ["r", "s"]]) == 0.75


# --- GloVe ------------------------------------------------------------------

def _write_glove(path, rows):
  opener = gzip.open if str(path).endswith(".gz") else open
  with opener(path, "wt", encoding="utf-8") as f:
    for word, vec in rows:
      f.write(word + " " + " ".join(f"{v:.5f}" for v in vec) + "\n")


@pytest.mark.parametrize("suffix", [".txt", ".gz"])
def test_glove_embedding_matrix_from_a_tiny_file(tmp_path, suffix):
  path = tmp_path / f"g{suffix}"
  rows = [("the", [0.1, 0.2, 0.3]), ("cat", [1.0, -1.0, 0.5]), ("dog", [2, 2, 2]),
          ("the", [9, 9, 9]),  # repeated: the first wins
          ("new york", [0.5, 0.5, 0.5])]  # a "word" with a space (840B-style)
  _write_glove(path, rows)
  vectors, dim = glove.read_glove(str(path))
  assert dim == 3 and set(vectors) == {"the", "cat", "dog", "new york"}
  np.testing.assert_allclose(vectors["the"], [0.1, 0.2, 0.3])

  vocab = Vocabulary.build([["the", "cat", "the", "mouse"], ["the"]])  # the, cat, mouse
  matrix, cov = glove.embedding_matrix(vocab, str(path), oov_scale=0.1, seed=3)
  assert matrix.shape == (5, 3) and matrix.dtype == np.float32
  assert np.all(matrix[PAD_ID] == 0)
  np.testing.assert_allclose(matrix[vocab.id("the")], [0.1, 0.2, 0.3], rtol=1e-6)
  np.testing.assert_allclose(matrix[vocab.id("cat")], [1.0, -1.0, 0.5], rtol=1e-6)
  assert np.any(matrix[vocab.id("mouse")] != 0) and np.any(matrix[UNK_ID] != 0)
  assert cov.found == 2 and cov.words == 3
  assert cov.token_coverage == pytest.approx(4 / 5)  # the ×3, cat ×1 of 5 tokens
  assert "2/3" in str(cov)
  again, _ = glove.embedding_matrix(vocab, str(path), oov_scale=0.1, seed=3)
  np.testing.assert_array_equal(matrix, again)  # deterministic
  scaled, _ = glove.embedding_matrix(vocab, str(path), oov_scale=0.1, glove_scale=0.5, seed=3)
  found = [vocab.id("the"), vocab.id("cat")]
  np.testing.assert_allclose(scaled[found], 0.5 * matrix[found], rtol=1e-6)
  others = [i for i in range(len(vocab)) if i not in found]
  np.testing.assert_array_equal(scaled[others], matrix[others])  # random rows unscaled
  with pytest.raises(ValueError, match="3-d vectors"):
    glove.embedding_matrix(vocab, str(path), dim=4)


@pytest.mark.parametrize("name", ["w.txt", "sub/w.txt.gz"])
def test_write_glove_reads_back(tmp_path, name):
  vectors = {"the": np.array([0.1, -2.0], np.float32), "new york": np.array([3.0, 0.0])}
  glove.write_glove(str(tmp_path / name), vectors, digits=3)
  back, dim = glove.read_glove(str(tmp_path / name))
  assert dim == 2 and list(back) == ["the", "new york"]
  for word, vector in vectors.items():
    np.testing.assert_allclose(back[word], vector, atol=5e-4)
  assert not os.path.exists(str(tmp_path / name) + ".partial")


def test_glove_without_a_file_is_random_and_bad_lines_are_named(tmp_path):
  vocab = Vocabulary(["x", "y"])
  matrix, cov = glove.embedding_matrix(vocab, None, dim=50, oov_scale=0.1, seed=0)
  assert matrix.shape == (4, 50) and np.all(matrix[0] == 0)
  assert 0.05 < matrix[1:].std() < 0.15 and cov.found == 0 and cov.glove_path is None
  with pytest.raises(ValueError, match="needs dim"):
    glove.embedding_matrix(vocab, None)
  bad = tmp_path / "bad.txt"
  bad.write_text("a 1 2 3\nb 1 2\n", encoding="utf-8")
  with pytest.raises(ValueError, match=r"bad\.txt:2: 2 values, expected 3"):
    glove.read_glove(str(bad))


@pytest.mark.skipif(not os.path.exists(GLOVE_TOP), reason="shared GloVe file absent")
def test_glove_shared_top_words_file():
  vocab = Vocabulary.build([tokenize("The movie was not good, and I didn't like "
                                     "it at all. Zyxwvut qqqqzz.")])
  matrix, cov = glove.embedding_matrix(vocab, GLOVE_TOP)
  assert matrix.shape == (len(vocab), 100)
  # the well-known first vector of glove.6B.100d ("the")
  np.testing.assert_allclose(matrix[vocab.id("the")][:3], [-0.038194, -0.24487, 0.72812],
                             rtol=1e-5)
  assert cov.found == len(vocab) - 4  # all but the two nonsense words


# --- datasets: local files ----------------------------------------------------

def _write_jsonl(path, records):
  opener = {".gz": gzip.open, ".xz": lzma.open}.get(os.path.splitext(str(path))[1], open)
  with opener(path, "wt", encoding="utf-8") as f:
    for r in records:
      f.write(json.dumps(r) + "\n")


IMDB_RECORDS = [{"id": f"r{i}", "text": f"Review {i}: great<br />film {'!' * (i % 3)}",
                 "label": i % 2, "rating": 8} for i in range(20)]
NLI_RECORDS = [{"premise": f"A man {i} sleeps.", "hypothesis": "Someone rests.",
                "label": ["entailment", "neutral", "contradiction"][i % 3]}
               for i in range(15)] + [{"premise": "x", "hypothesis": "y", "label": "-"}]


def test_a_held_out_test_split_carved_from_train_only_files(tmp_path):
  path = tmp_path / "imdb.jsonl"
  _write_jsonl(path, IMDB_RECORDS)
  plain = readers.load_task("imdb", "files", files={"train": str(path)}, val_fraction=0.25,
                             seed=1)
  data = readers.load_task("imdb", "files", files={"train": str(path)}, val_fraction=0.25,
                            test_fraction=0.2, seed=1, max_train_examples=10)
  assert list(data.splits) == ["train", "validation", "test"] and data.eval_splits == ("test",)
  assert (len(data["train"]), len(data["validation"]), len(data["test"])) == (10, 5, 3)
  keys = {name: set(split.fingerprint_keys()) for name, split in data.splits.items()}
  assert not keys["train"] & keys["test"] and not keys["validation"] & keys["test"]
  assert not keys["train"] & keys["validation"]
  # validation is the same carve as without a test split; the test carve is seeded
  assert keys["validation"] == set(plain["validation"].fingerprint_keys())
  again = readers.load_task("imdb", "files", files={"train": str(path)}, val_fraction=0.25,
                             test_fraction=0.2, seed=1)
  assert set(again["test"].fingerprint_keys()) == keys["test"]
  nli = tmp_path / "mnli.jsonl"
  _write_jsonl(nli, NLI_RECORDS)
  mnli = readers.load_task("mnli", "files", files={"train": str(nli)}, test_fraction=0.2)
  assert mnli.eval_splits == ("matched",)
  with pytest.raises(ValueError, match="but the data has one"):
    readers.load_task("imdb", "files", files={"train": str(path), "test": str(path)},
                       test_fraction=0.2)


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".jsonl.xz"])
def test_imdb_from_files_with_a_carved_validation_split(tmp_path, suffix):
  path = tmp_path / f"imdb{suffix}"
  _write_jsonl(path, IMDB_RECORDS)
  test_path = tmp_path / "imdb_test.jsonl"
  _write_jsonl(test_path, IMDB_RECORDS[:4])
  data = readers.load_task("imdb", "files", files={"train": str(path),
                                                    "test": str(test_path)},
                            val_fraction=0.25, seed=1)
  assert list(data.splits) == ["train", "validation", "test"]
  assert data.eval_splits == ("test",) and data.num_classes == 2
  assert (len(data["train"]), len(data["validation"]), len(data["test"])) == (15, 5, 4)
  assert data["test"].texts["text"][1] == ["review", "1", ":", "great", "film", "!"]
  assert data["test"].labels.tolist() == [0, 1, 0, 1]
  train_keys = set(data["train"].fingerprint_keys())
  val_keys = set(data["validation"].fingerprint_keys())
  assert not train_keys & val_keys and len(train_keys | val_keys) == 20
  # the raw text the predictor reads, with each word's characters in it, kept
  # through the carve
  for split in data.splits.values():
    for words, raw, spans in zip(split.texts["text"], split.raw["text"],
                                 split.spans["text"]):
      assert [raw[a:b].lower() for a, b in spans] == words and "<br" not in raw


def test_raw_text_keeps_case_and_breaks_become_spaces(tmp_path):
  path = tmp_path / "r.jsonl"
  _write_jsonl(path, [{"text": "Don't<br />GO!", "label": 1}])
  split = readers.read_split("imdb", "files", str(path))
  assert split.texts["text"][0] == ["do", "n't", "go", "!"]
  assert split.raw["text"][0] == "Don't      GO!"
  assert split.spans["text"][0].tolist() == [[0, 2], [2, 5], [11, 13], [13, 14]]
  custom = readers.read_split("imdb", "files", str(path), tokenizer=str.split)
  assert custom.raw is None and custom.spans is None


def test_nli_from_files_maps_labels_and_drops_unlabelled(tmp_path):
  path = tmp_path / "mnli.jsonl.xz"
  _write_jsonl(path, NLI_RECORDS)
  split = readers.read_split("mnli", "files", str(path))
  assert len(split) == 15 and split.labels.tolist()[:4] == [0, 1, 2, 0]
  assert split.texts["premise"][0] == ["a", "man", "0", "sleeps", "."]
  assert split.texts["hypothesis"][0] == ["someone", "rests", "."]
  bad = tmp_path / "bad.jsonl"
  _write_jsonl(bad, [{"premise": "a", "hypothesis": "b", "label": "maybe"}])
  with pytest.raises(ValueError, match="unknown label 'maybe'"):
    readers.read_split("snli", "files", str(bad))
  _write_jsonl(bad, [{"premise": "a", "label": 0}])
  with pytest.raises(ValueError, match=r"missing \['hypothesis'\]"):
    readers.read_split("snli", "files", str(bad))


def test_validation_split_is_disjoint_and_deterministic():
  split = splits.Split({"text": [[str(i)] for i in range(101)]}, np.arange(101) % 2)
  rest, val = splits.split_validation(split, 0.1, seed=7)
  rest2, val2 = splits.split_validation(split, 0.1, seed=7)
  _, val3 = splits.split_validation(split, 0.1, seed=8)
  ids = lambda s: [int(w[0]) for w in s.texts["text"]]  # noqa: E731
  assert len(val) == 10 and len(rest) == 91
  assert ids(val) == ids(val2) and ids(rest) == ids(rest2)
  assert ids(val) != ids(val3)
  assert not set(ids(val)) & set(ids(rest)) and set(ids(val)) | set(ids(rest)) == set(range(101))
  assert ids(val) == sorted(ids(val))  # original order kept
  assert len(splits.split_validation(split, 0.0)[1]) == 0


# --- datasets: TFDS (mock data, offline) ----------------------------------------

@pytest.mark.parametrize("reader", ["data_source", "tf"])
def test_imdb_from_tfds_mock(reader):
  with tfds.testing.mock_data(num_examples=12):
    data = readers.load_task("imdb", "tfds", val_fraction=0.25, seed=0,
                              tfds_reader=reader)
  assert (len(data["train"]), len(data["validation"]), len(data["test"])) == (9, 3, 12)
  assert all(isinstance(w, str) for ws in data["train"].texts["text"] for w in ws)
  assert set(data["train"].labels.tolist()) <= {0, 1}


def test_mnli_and_snli_from_tfds_mock():
  with tfds.testing.mock_data(num_examples=10):
    mnli = readers.load_task("mnli", "tfds", val_fraction=0.2,
                              tfds_reader="data_source")
    snli = readers.load_task("snli", "tfds", validation="validation",
                              tfds_reader="data_source", max_train_examples=6)
  assert list(mnli.splits) == ["train", "validation", "matched", "mismatched"]
  assert mnli.eval_splits == ("matched", "mismatched")
  assert len(mnli["train"]) + len(mnli["validation"]) == 10 and len(mnli["matched"]) == 10
  assert mnli.text_fields == ("premise", "hypothesis")
  assert list(snli.splits) == ["train", "validation", "test"]
  assert len(snli["train"]) == 6 and len(snli["validation"]) == 10  # official validation
  assert set(mnli["train"].labels.tolist()) <= {0, 1, 2}


# --- batching -------------------------------------------------------------------

def _nli_split():
  premises = [["w"] * n for n in (3, 9, 1, 5, 7, 2, 4)]
  hyps = [["h"] * n for n in (2, 1, 6, 2, 3, 1, 1)]
  return splits.Split({"premise": premises, "hypothesis": hyps}, np.arange(7) % 3)


def test_batches_pad_to_the_batch_max_and_cut_at_max_words():
  split = _nli_split()
  vocab = Vocabulary(["w", "h"])
  out = list(batching.batches(split, vocab, 3, max_words=6))
  assert [b["premise"].shape for b in out] == [(3, 6), (3, 6), (1, 4)]
  assert [b["hypothesis"].shape for b in out] == [(3, 6), (3, 3), (1, 1)]
  assert out[0]["premise_mask"].sum(1).tolist() == [3, 6, 1]
  assert out[0]["premise"][1].tolist() == [vocab.id("w")] * 6    # cut at max_words
  assert out[1]["index"].tolist() == [3, 4, 5] and out[1]["label"].tolist() == [0, 1, 2]
  rounded = next(batching.batches(split, vocab, 3, length_multiple=4, max_words=10))
  assert rounded["premise"].shape == (3, 10) and rounded["hypothesis"].shape == (3, 8)
  padded = list(batching.batches(split, vocab, 3, pad_final=True))[-1]
  assert padded["premise"].shape == (3, 4)
  assert padded["weight"].tolist() == [1, 0, 0] and padded["index"].tolist() == [6, -1, -1]
  assert not padded["premise_mask"][1:].any()


def test_shuffling_is_deterministic_by_seed_and_epoch():
  split = splits.Split({"text": [[str(i)] for i in range(50)]}, np.zeros(50))

  def order(**kw):
    return np.concatenate(example_batches.batch_order(split, 8, shuffle=True, **kw))
  a, b = order(seed=1, epoch=0), order(seed=1, epoch=0)
  np.testing.assert_array_equal(a, b)
  assert sorted(a.tolist()) == list(range(50))
  assert not np.array_equal(a, order(seed=1, epoch=1))
  assert not np.array_equal(a, order(seed=2, epoch=0))
  dropped = example_batches.batch_order(split, 8, shuffle=True, drop_remainder=True)
  assert len(dropped) == 6 and all(len(b) == 8 for b in dropped)
  lengths = splits.Split({"text": [["x"] * (i % 13 + 1) for i in range(64)]},
                           np.zeros(64))
  buckets = example_batches.batch_order(lengths, 8, shuffle=True, bucket_batches=4)
  assert sorted(np.concatenate(buckets).tolist()) == list(range(64))
  spread = np.mean([np.ptp(lengths.lengths("text")[b]) for b in buckets])
  plain = np.mean([np.ptp(lengths.lengths("text")[b])
                   for b in example_batches.batch_order(lengths, 8, shuffle=True)])
  assert spread < plain  # bucketing groups similar lengths


def test_example_batches_resume_exactly_and_split_rows_by_host():
  split = splits.Split({"text": [[str(i)] * (i % 5 + 1) for i in range(21)]}, np.arange(21) % 2)

  def make(indices):
    return {"index": np.asarray(indices)}
  straight = example_batches.ExampleBatches(split, 4, make, seed=3, bucket_batches=2)
  assert straight.batches_per_epoch == 5                  # 21 // 4: the remainder dropped
  first = [next(straight)["index"] for _ in range(13)]    # into the third epoch
  assert sorted(np.concatenate(first[:5]).tolist()) != list(range(21))  # one dropped per epoch
  assert len({tuple(b) for b in first}) == 13
  resumed = example_batches.ExampleBatches(split, 4, make, seed=3, bucket_batches=2)
  partial = example_batches.ExampleBatches(split, 4, make, seed=3, bucket_batches=2)
  for _ in range(7):
    next(partial)
  resumed.restore(json.loads(json.dumps(partial.state())))
  np.testing.assert_array_equal(np.stack([next(resumed)["index"] for _ in range(6)]),
                                np.stack(first[7:]))
  with pytest.raises(ValueError, match="does not fit this data"):
    example_batches.ExampleBatches(split, 4, make, seed=4).restore(partial.state())
  rows = [example_batches.host_rows({"x": np.arange(8)}, p, 4)["x"].tolist() for p in range(4)]
  assert rows == [[0, 1], [2, 3], [4, 5], [6, 7]]
  with pytest.raises(ValueError, match="cannot be split over 3 processes"):
    example_batches.host_rows({"x": np.arange(8)}, 0, 3)


def test_targets_of_any_shape_and_a_word_target_padder():
  """A per-word task's targets (one tag per word, ragged) survive subsets and
  the validation carve, and `word_targets` pads them like the words; a
  fixed-shape target per example pads by the default padder."""
  words = [["w"] * n for n in (3, 1, 4, 2)]
  tags = [np.arange(n) + 1 for n in (3, 1, 4, 2)]
  split = splits.Split({"text": words}, tags)
  assert isinstance(split.labels, list) and len(split) == 4
  rest, held = splits.split_validation(split, 0.25, seed=0)
  assert sorted(len(t) for t in rest.labels + held.labels) == [1, 2, 3, 4]
  vocab = Vocabulary.build([["w"]])
  batch = batching.make_batch(split, [2, 0], vocab, max_words=3, batch_size=3,
                              target_padder=batching.word_targets("text"))
  assert batch["text"].shape == batch["label"].shape == (3, 3)
  np.testing.assert_array_equal(batch["label"], [[1, 2, 3], [1, 2, 3], [-1, -1, -1]])
  np.testing.assert_array_equal(batch["label"] >= 0, batch["text_mask"])
  pairs = splits.Split({"text": words}, np.arange(8).reshape(4, 2))
  assert pairs.labels.shape == (4, 2) and pairs.subset([3]).labels.tolist() == [[6, 7]]
  np.testing.assert_array_equal(batching.make_batch(pairs, [1], vocab, batch_size=2)["label"],
                                [[2, 3], [0, 0]])
