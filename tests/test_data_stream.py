"""Token streams: tokenization, synthetic arcs in token coordinates, cache, split."""
import os

import numpy as np
import pytest

from glomo_jax.data import stream as stream_lib
from glomo_jax.data import synthetic
from glomo_jax.data.corpus import CorpusSpec
from glomo_jax.data.stream import (TokenStream, build_stream, split_stream,
                                   tokenize_documents, tokenize_synthetic)
from glomo_jax.data.tokenizer import EOS_ID, train_tokenizer, train_word_tokenizer

CONFIG = synthetic.SyntheticConfig(num_documents=40, seed=2)


@pytest.fixture(scope="module")
def word_tok(tmp_path_factory):
  return train_word_tokenizer(synthetic.vocabulary(), str(tmp_path_factory.mktemp("w")) + "/")


@pytest.fixture(scope="module")
def piece_tok(tmp_path_factory):
  """A unigram model small enough that many words are several pieces."""
  texts = [d.text for d in synthetic.generate_corpus(CONFIG)]
  return train_tokenizer(texts, 120, str(tmp_path_factory.mktemp("u")) + "/")


def test_documents_are_joined_with_eos(piece_tok):
  docs = ["the dog runs .", "a cat", "two birds see many foxes ."]
  s = tokenize_documents(docs, piece_tok, chunk_documents=2)
  assert s.tokens.dtype == np.int32 and s.doc_starts.dtype == np.int64
  assert s.num_documents == 3 and s.num_tokens == sum(len(piece_tok.encode(d)) + 1
                                                      for d in docs)
  for i, doc in enumerate(docs):
    assert s.document(i)[-1] == EOS_ID
    assert s.document(i)[:-1].tolist() == piece_tok.encode(doc)
  assert np.sum(s.tokens == EOS_ID) == 3
  assert not s.has_arcs and s.tokenizer_fingerprint == piece_tok.fingerprint
  np.testing.assert_array_equal(tokenize_documents(docs, piece_tok).tokens, s.tokens)


def test_synthetic_arcs_with_word_tokenizer_are_word_positions(word_tok):
  docs = list(synthetic.generate_corpus(CONFIG))
  s = tokenize_synthetic(docs, word_tok)
  assert s.has_arcs and s.arc_source.dtype == np.int64 and s.arc_kind.dtype == np.int8
  expected_source = np.full(s.num_tokens, -1)
  expected_kind = np.zeros(s.num_tokens, np.int8)
  for d, doc in enumerate(docs):
    offset = s.doc_starts[d]
    assert s.document(d).tolist() == word_tok.encode(doc.text) + [EOS_ID]
    expected_source[offset + doc.arcs[:, 0]] = offset + doc.arcs[:, 1]
    expected_kind[offset + doc.arcs[:, 0]] = doc.kinds
  np.testing.assert_array_equal(s.arc_source, expected_source)
  np.testing.assert_array_equal(s.arc_kind, expected_kind)
  assert (s.arc_source >= 0).sum() == sum(len(d.kinds) for d in docs)


def test_synthetic_arcs_with_multi_piece_words_use_first_pieces(piece_tok):
  docs = list(synthetic.generate_corpus(CONFIG))
  s = tokenize_synthetic(docs, piece_tok)
  assert s.num_tokens > sum(len(d.words) + 1 for d in docs)  # words were split
  targets = np.flatnonzero(s.arc_source >= 0)
  assert len(targets) == sum(len(d.kinds) for d in docs)
  piece_starts_word = np.array([piece_tok.id_to_piece(int(t)).startswith("\u2581")
                                for t in s.tokens])
  assert piece_starts_word[targets].all() and piece_starts_word[s.arc_source[targets]].all()
  copies = targets[s.arc_kind[targets] == synthetic.ARC_COPY]
  assert len(copies) > 0
  # A copied name starts with the same piece as its first mention.
  np.testing.assert_array_equal(s.tokens[copies], s.tokens[s.arc_source[copies]])


def test_cache_skips_tokenisation_and_follows_inputs(tmp_path, piece_tok, word_tok,
                                                     monkeypatch):
  corpus = tmp_path / "corpus.jsonl"
  corpus.write_text('{"text": "the dog runs ."}\n{"text": "a cat sees a bird ."}\n')
  spec = CorpusSpec(source="files", pattern=str(corpus))
  cache = str(tmp_path / "cache")
  first = build_stream(spec, piece_tok, cache_dir=cache)
  assert len(os.listdir(cache)) == 1

  def no_tokenising(*args, **kwargs):
    raise AssertionError("tokenized again instead of using the cache")

  with monkeypatch.context() as m:
    m.setattr(stream_lib, "tokenize_documents", no_tokenising)
    again = build_stream(spec.to_dict(), piece_tok, cache_dir=cache)
  np.testing.assert_array_equal(again.tokens, first.tokens)
  np.testing.assert_array_equal(again.doc_starts, first.doc_starts)
  assert again.tokenizer_fingerprint == piece_tok.fingerprint
  # A different tokenizer or changed input gets its own entry.
  build_stream(spec, word_tok, cache_dir=cache)
  corpus.write_text('{"text": "the dogs run ."}\n')
  os.utime(corpus, (1, 1))
  changed = build_stream(spec, piece_tok, cache_dir=cache)
  assert changed.num_documents == 1 and len(os.listdir(cache)) == 3
  # Arcs survive the cache.
  syn = CorpusSpec(synthetic=CONFIG)
  made = build_stream(syn, word_tok, cache_dir=cache)
  loaded = build_stream(syn, word_tok, cache_dir=cache)
  np.testing.assert_array_equal(loaded.arc_source, made.arc_source)
  np.testing.assert_array_equal(loaded.arc_kind, made.arc_kind)


@pytest.mark.parametrize("damage", ["flip", "cut", "remove", "meta"])
def test_a_damaged_cache_entry_is_tokenized_again(tmp_path, piece_tok, caplog, damage):
  corpus = tmp_path / "corpus.jsonl"
  corpus.write_text('{"text": "the dog runs ."}\n{"text": "a cat sees a bird ."}\n')
  spec = CorpusSpec(source="files", pattern=str(corpus))
  cache = str(tmp_path / "cache")
  first = build_stream(spec, piece_tok, cache_dir=cache)
  (entry,) = os.listdir(cache)
  tokens = os.path.join(cache, entry, "tokens.npy")
  size = os.path.getsize(tokens)
  if damage == "remove":
    os.remove(tokens)
  elif damage == "meta":
    with open(os.path.join(cache, entry, "meta.json"), "w") as f:
      f.write("[1, 2")
  else:
    with open(tokens, "r+b") as f:
      if damage == "cut":
        f.truncate(size - 4)
      else:                             # the last token's id, one bit changed
        f.seek(size - 4)
        f.write(bytes([f.read(1)[0] ^ 1]))
  with caplog.at_level("WARNING", logger=stream_lib.__name__):
    again = build_stream(spec, piece_tok, cache_dir=cache)
  assert "damaged token stream cache" in caplog.text and "tokenizing again" in caplog.text
  np.testing.assert_array_equal(again.tokens, first.tokens)
  assert stream_lib.load_stream(os.path.join(cache, entry)).num_tokens == first.num_tokens


def test_build_stream_shards_and_errors(word_tok):
  whole = build_stream(CorpusSpec(synthetic=CONFIG), word_tok)
  halves = [build_stream(CorpusSpec(synthetic=CONFIG), word_tok, shard_index=i, num_shards=2)
            for i in range(2)]
  assert sum(h.num_documents for h in halves) == whole.num_documents
  assert sum(h.num_tokens for h in halves) == whole.num_tokens
  np.testing.assert_array_equal(halves[1].document(0), whole.document(1))
  empty = CorpusSpec(synthetic=synthetic.SyntheticConfig(num_documents=0))
  with pytest.raises(ValueError, match="empty corpus.*synthetic"):
    build_stream(empty, word_tok)


def test_split_holds_out_the_last_documents(word_tok):
  s = tokenize_synthetic(synthetic.generate_corpus(CONFIG), word_tok)
  train, held = split_stream(s, 0.1)
  assert (train.num_documents, held.num_documents) == (36, 4)
  np.testing.assert_array_equal(np.concatenate([train.tokens, held.tokens]), s.tokens)
  np.testing.assert_array_equal(held.document(0), s.document(36))
  offset = s.doc_starts[36]
  assert held.doc_starts[0] == 0 and held.doc_starts[-1] == held.num_tokens
  np.testing.assert_array_equal(held.arc_source,
                                np.where(s.arc_source[offset:] >= 0,
                                         s.arc_source[offset:] - offset, -1))
  np.testing.assert_array_equal(train.arc_source, s.arc_source[:offset])
  assert held.arc_source.min() == -1 and held.arc_source.max() < held.num_tokens
  assert split_stream(s, 0.001)[1].num_documents == 1  # at least one document
  for bad in (0.0, 1.0):
    with pytest.raises(ValueError, match="heldout_fraction"):
      split_stream(s, bad)
  with pytest.raises(ValueError, match="keep one for training"):
    split_stream(s.slice_documents(0, 1), 0.5)


def test_stream_validation():
  tokens = np.array([5, 6, EOS_ID], np.int32)
  with pytest.raises(ValueError, match="doc_starts"):
    TokenStream(tokens, np.array([0, 2]), "x")
  with pytest.raises(ValueError, match="go together"):
    TokenStream(tokens, np.array([0, 3]), "x", arc_source=np.full(3, -1))
