"""SentencePiece training and the Tokenizer wrapper."""
import hashlib
import io
import pickle

import numpy as np
import pytest
import sentencepiece as spm

from glomo_jax.data import synthetic
from glomo_jax.data.tokenizer import (EOS_ID, PAD_ID, UNK_ID, Tokenizer, train_tokenizer,
                                      train_word_tokenizer, training_sample)

EXTRA = ["The naïve café served crème brûlée, twice!", "Zebras (plural) in 1999."]


@pytest.fixture(scope="module")
def texts():
  config = synthetic.SyntheticConfig(num_documents=150, seed=5)
  return [d.text for d in synthetic.generate_corpus(config)] + EXTRA


@pytest.fixture(scope="module")
def unigram(texts, tmp_path_factory):
  directory = tmp_path_factory.mktemp("unigram")
  tok = train_tokenizer(texts, 200, str(directory), sample_chars=200_000,
                        character_coverage=1.0)
  return tok, directory


def test_trained_model_is_saved_with_reserved_ids(unigram):
  tok, directory = unigram
  path = directory / "tokenizer.model"
  assert path.is_file()
  assert (tok.pad_id, tok.unk_id, tok.eos_id) == (PAD_ID, UNK_ID, EOS_ID) == (0, 1, 2)
  assert tok.vocab_size == 200
  assert [tok.id_to_piece(i) for i in range(3)] == ["<pad>", "<unk>", "</s>"]
  ids = tok.encode("the old dogs near a cat often see the river .")
  assert ids and min(ids) >= 3  # encode never produces pad / unk / eos here


def test_round_trip_and_batch(unigram, texts):
  tok, _ = unigram
  for text in texts[:20] + EXTRA:
    assert tok.decode(tok.encode(text)) == text
  assert tok.encode_batch(texts[:7], num_threads=2) == [tok.encode(t) for t in texts[:7]]
  assert tok.decode(tok.encode("a dog") + [PAD_ID, EOS_ID]) == "a dog"
  assert UNK_ID in tok.encode("a \u4e2d dog")  # a character never seen in training


def test_fingerprint_is_sha256_of_model_bytes_and_stable(unigram, tmp_path):
  tok, directory = unigram
  data = (directory / "tokenizer.model").read_bytes()
  assert tok.serialized() == data
  assert tok.fingerprint == hashlib.sha256(data).hexdigest()
  for loaded in (Tokenizer.load(str(directory)),
                 Tokenizer.load(str(directory / "tokenizer.model")),
                 Tokenizer(tok.serialized()), pickle.loads(pickle.dumps(tok))):
    assert loaded.fingerprint == tok.fingerprint and loaded == tok
    assert loaded.encode(EXTRA[0]) == tok.encode(EXTRA[0])
  saved = Tokenizer.load(tok.save(str(tmp_path)))
  assert saved.fingerprint == tok.fingerprint


def test_training_is_deterministic_and_fingerprint_tells_models_apart(texts, unigram,
                                                                      tmp_path):
  tok, _ = unigram
  again = train_tokenizer(texts, 200, str(tmp_path / "again") + "/", sample_chars=200_000,
                          character_coverage=1.0)
  assert again.fingerprint == tok.fingerprint
  other = train_tokenizer(texts, 180, str(tmp_path / "prefix"), sample_chars=200_000,
                          character_coverage=1.0)
  assert (tmp_path / "prefix.model").is_file()  # a prefix, not a directory
  assert other.fingerprint != tok.fingerprint


def test_training_sample_is_bounded_by_characters():
  docs = ["a" * 50 + "\n\n" + "b" * 50, "c" * 50, "d" * 50]
  sample = training_sample(iter(docs), 120)
  assert sample == ["a" * 50, "b" * 50, "c" * 50]
  long_line = " ".join(["word"] * 1000)  # 4999 bytes
  pieces = training_sample([long_line], 10**9, max_line_bytes=1000)
  assert all(len(p.encode()) <= 1000 for p in pieces)
  assert " ".join(pieces) == long_line
  assert training_sample(["x" * 2500], 10**9, max_line_bytes=1000)[0] == "x" * 250


def test_training_on_nothing_raises(tmp_path):
  with pytest.raises(ValueError, match="no text"):
    train_tokenizer(["", "  \n "], 100, str(tmp_path) + "/")


def test_vocab_size_larger_than_the_text_supports_is_named(tmp_path):
  with pytest.raises(ValueError, match=r"vocab_size 30 is too large .* at most \d+ pieces"):
    train_tokenizer(["the cat sat on the mat ."] * 4, 30, str(tmp_path) + "/")


def test_encode_words_maps_words_to_their_first_piece(unigram):
  tok, _ = unigram
  words = "the naïve zebras named alice often chase 1999 birds ( near a café ) .".split()
  ids, start = tok.encode_words(words)
  assert ids.dtype == np.int32 and start.dtype == np.int64
  assert ids.tolist() == tok.encode(" ".join(words))
  assert len(start) == len(words) + 1 and start[0] == 0 and start[-1] == len(ids)
  assert np.any(np.diff(start) > 1)  # some words are several pieces here
  for w, word in enumerate(words):
    assert tok.decode(ids[start[w]:start[w + 1]].tolist()) == word
  again, _ = tok.encode_words(words)  # second call served from the word cache
  np.testing.assert_array_equal(again, ids)
  empty_ids, empty_start = tok.encode_words([])
  assert empty_ids.shape == (0,) and empty_start.tolist() == [0]


def test_word_tokenizer_keeps_every_synthetic_word_whole(tmp_path):
  vocab = synthetic.vocabulary()
  tok = train_word_tokenizer(vocab, str(tmp_path) + "/")
  assert tok.vocab_size == len(vocab) + 3
  doc = synthetic.generate_document(synthetic.SyntheticConfig(), 0)
  ids, start = tok.encode_words(doc.words)
  assert len(ids) == len(doc.words)
  np.testing.assert_array_equal(start, np.arange(len(doc.words) + 1))
  assert tok.encode(doc.text) == ids.tolist()
  assert tok.decode(ids) == doc.text
  assert UNK_ID not in ids.tolist()
  assert tok.encode("zebra") == [UNK_ID]


def test_word_tokenizer_rejects_words_with_spaces(tmp_path):
  with pytest.raises(ValueError, match="whitespace"):
    train_word_tokenizer(["fine", "not fine"], str(tmp_path) + "/")


def test_model_without_reserved_ids_is_rejected():
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(sentence_iterator=iter(["a b c a b", "c b a"]),
                                 model_writer=model, vocab_size=8, model_type="char",
                                 minloglevel=2)  # default ids: unk 0, bos 1, eos 2
  with pytest.raises(ValueError, match="pad id 0"):
    Tokenizer(model.getvalue())
