"""SentencePiece tokenizer: training on a bounded sample, and a small wrapper.

Reserved ids, the same in every model trained here: 0 = ``<pad>`` (padding,
never produced by `encode`), 1 = ``<unk>``, 2 = ``</s>`` (end of document);
no BOS. Pieces start at id 3.

`Tokenizer.fingerprint` is the sha256 (hex) of the serialized model bytes; an
exported graph predictor stores it so that a mismatched vocabulary is caught
when predictor and tokenizer are paired again.

Word positions. SentencePiece (with its default ``split_by_whitespace``)
never lets a piece cross a space, so encoding ``" ".join(words)`` equals
concatenating the encodings of the single words. `Tokenizer.encode_words`
relies on this: it returns the ids of a word list and, per word, the index of
its first piece, which maps word-level annotations (e.g. the synthetic
corpus's arcs) to token positions. `train_word_tokenizer` builds a model in
which each word of a given vocabulary is exactly one piece, so that map is the
identity.
"""
from __future__ import annotations

import hashlib
import io
import os
import re
import unicodedata
from typing import Iterable, Sequence

import numpy as np
import sentencepiece as spm
from sentencepiece import sentencepiece_pb2

from glomo_jax.errors import InputError
from glomo_jax.io import write_bytes

PAD_ID, UNK_ID, EOS_ID = 0, 1, 2
MODEL_FILENAME = "tokenizer.model"
_WORD_CACHE_SIZE = 1 << 18  # words whose ids encode_words keeps
_RESERVED = dict(pad_id=PAD_ID, unk_id=UNK_ID, eos_id=EOS_ID, bos_id=-1,
                 pad_piece="<pad>", unk_piece="<unk>", eos_piece="</s>")


class Tokenizer:
  """A SentencePiece model with the reserved ids above.

  Pickles as its model bytes, so it can be sent to worker processes.
  """

  def __init__(self, model_bytes: bytes):
    self._bytes = bytes(model_bytes)
    self._sp = spm.SentencePieceProcessor(model_proto=self._bytes)
    if self._sp.pad_id() != PAD_ID or self._sp.eos_id() != EOS_ID:
      raise ValueError(
          f"tokenizer must reserve pad id {PAD_ID} and eos id {EOS_ID}, "
          f"got pad {self._sp.pad_id()} and eos {self._sp.eos_id()}; train it with "
          "glomo_jax.data.train_tokenizer")
    self.fingerprint: str = hashlib.sha256(self._bytes).hexdigest()
    self._word_cache: dict[str, list[int]] = {}  # word -> its ids (encode_words)

  @classmethod
  def load(cls, path: str) -> "Tokenizer":
    """Loads `path`, a model file or a directory holding tokenizer.model.

    Raises:
      FileNotFoundError: no such file.
      InputError: not a SentencePiece model with the reserved ids above.
    """
    if os.path.isdir(path):
      path = os.path.join(path, MODEL_FILENAME)
    with open(path, "rb") as f:
      data = f.read()
    try:
      return cls(data)
    except (RuntimeError, ValueError) as e:
      problem = str(e) if isinstance(e, ValueError) else "cannot be parsed"
      raise InputError(path, f"not a usable SentencePiece model: {problem}") from None

  def save(self, path: str) -> str:
    """Writes the model to `path` (a file, or a directory -> tokenizer.model)."""
    if os.path.isdir(path):
      path = os.path.join(path, MODEL_FILENAME)
    write_bytes(path, self._bytes)
    return path

  def serialized(self) -> bytes:
    """The model file's bytes (what `fingerprint` hashes)."""
    return self._bytes

  def __getstate__(self):
    return {"model_bytes": self._bytes}

  def __setstate__(self, state):
    self.__init__(state["model_bytes"])

  def __eq__(self, other):
    return isinstance(other, Tokenizer) and other.fingerprint == self.fingerprint

  def __hash__(self):
    return hash(self.fingerprint)

  def __repr__(self):
    return f"Tokenizer(vocab_size={self.vocab_size}, fingerprint={self.fingerprint[:12]})"

  @property
  def vocab_size(self) -> int:
    """Number of ids, reserved ones included (ids are 0 .. vocab_size-1)."""
    return self._sp.get_piece_size()

  @property
  def pad_id(self) -> int:
    return PAD_ID

  @property
  def eos_id(self) -> int:
    return EOS_ID

  @property
  def unk_id(self) -> int:
    return UNK_ID

  def encode(self, text: str) -> list[int]:
    """Token ids of one text (no eos appended)."""
    return self._sp.encode(text)

  def encode_batch(self, texts: Sequence[str], num_threads: int = 1) -> list[list[int]]:
    """Token ids of each text; `num_threads` > 1 encodes in parallel (C++)."""
    return self._sp.encode(list(texts), num_threads=num_threads)

  def decode(self, ids: Iterable[int]) -> str:
    """Text of token ids; pad and eos ids are dropped."""
    return self._sp.decode([int(i) for i in ids])

  def id_to_piece(self, token_id: int) -> str:
    return self._sp.id_to_piece(int(token_id))

  def piece_to_id(self, piece: str) -> int:
    """Id of a piece, or unk_id if the model has no such piece."""
    return self._sp.piece_to_id(piece)

  def encode_with_spans(self, texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Ids of each text and the characters of the text each piece stands for.

    Returns:
      per text: ids int32 [P] (equal to `encode`) and spans int64 [P, 2],
      each piece's [start, end) in characters of the text (SentencePiece
      reports UTF-8 bytes; they are converted). A piece's span includes the
      whitespace its "▁" stands for: in "a  b", "▁b" covers " b" or "  b".
    """
    out = []
    for text, proto in zip(texts, self._sp.encode(list(texts), out_type="serialized_proto")):
      pieces = sentencepiece_pb2.SentencePieceText.FromString(proto).pieces
      char_bytes = np.fromiter((len(c.encode("utf-8")) for c in text), np.int64, len(text))
      byte_of_char = np.concatenate([[0], np.cumsum(char_bytes)])     # [chars + 1]
      begin = np.fromiter((p.begin for p in pieces), np.int64, len(pieces))
      end = np.fromiter((p.end for p in pieces), np.int64, len(pieces))
      spans = np.stack([np.searchsorted(byte_of_char, begin, side="right") - 1,
                        np.searchsorted(byte_of_char, end, side="left")], axis=-1)
      out.append((np.fromiter((p.id for p in pieces), np.int32, len(pieces)),
                  spans.reshape(len(pieces), 2)))
    return out

  def encode_words(self, words: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Ids of ``" ".join(words)`` and where each word starts among them.

    Args:
      words: words without whitespace.

    Returns:
      ids: int32 [num_tokens], equal to ``encode(" ".join(words))``.
      word_start: int64 [len(words) + 1]; word w covers ids
        ``word_start[w]:word_start[w+1]``, its first piece is at
        ``word_start[w]``; the last entry is num_tokens. A word that encodes
        to no piece (only characters the normaliser removes) has an empty range.

    Each distinct word is encoded once and its ids are cached (up to
    2^18 words), which is exact because pieces never cross a space.
    """
    cache = self._word_cache
    missing = list({w for w in words if w not in cache})
    if missing:
      if len(cache) + len(missing) > _WORD_CACHE_SIZE:
        cache.clear()
      cache.update(zip(missing, self._sp.encode(missing)))
    pieces = [cache[w] for w in words]
    lengths = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
    word_start = np.zeros(len(words) + 1, dtype=np.int64)
    np.cumsum(lengths, out=word_start[1:])
    ids = np.fromiter((i for p in pieces for i in p), dtype=np.int32,
                      count=int(word_start[-1]))
    return ids, word_start


def _model_path(model_prefix_or_dir: str) -> str:
  """A directory (existing, or written with a trailing '/') gets tokenizer.model;
  anything else is a prefix: '<prefix>.model'."""
  if model_prefix_or_dir.endswith(os.sep) or os.path.isdir(model_prefix_or_dir):
    return os.path.join(model_prefix_or_dir, MODEL_FILENAME)
  return model_prefix_or_dir + ".model"


def training_sample(documents: Iterable[str], sample_chars: int,
                    max_line_bytes: int = 8192) -> list[str]:
  """Lines of the first documents, until `sample_chars` characters are taken.

  Documents are split into lines (SentencePiece treats each input as a
  sentence); lines longer than `max_line_bytes` UTF-8 bytes are cut at spaces
  (or hard, if a single word is longer) so that none is silently dropped by
  SentencePiece's own length limit. The sample is the start of the corpus, so
  it is deterministic and reading stops early on large corpora.
  """
  lines: list[str] = []
  taken = 0
  for doc in documents:
    for line in doc.split("\n"):
      line = line.strip()
      if not line:
        continue
      for chunk in _split_long(line, max_line_bytes):
        lines.append(chunk)
        taken += len(chunk)
        if taken >= sample_chars:
          return lines
  return lines


def _split_long(line: str, max_bytes: int) -> Iterable[str]:
  if len(line.encode("utf-8")) <= max_bytes:
    yield line
    return
  chunk: list[str] = []
  size = 0
  for word in line.split(" "):
    b = len(word.encode("utf-8")) + 1
    if chunk and size + b > max_bytes:
      yield " ".join(chunk)
      chunk, size = [], 0
    while b - 1 > max_bytes:  # a single huge "word": cut it (by characters)
      cut = max_bytes // 4
      yield word[:cut]
      word = word[cut:]
      b = len(word.encode("utf-8")) + 1
    chunk.append(word)
    size += b
  if chunk:
    yield " ".join(chunk)


def _check_looks_like_text(sample: Sequence[str], limit: float = 0.2) -> None:
  """Raises ValueError when more than `limit` of the sample's characters are
  undecodable bytes (U+FFFD) or control characters: binary data, not text."""
  chars = "".join(sample)[:1_000_000]
  bad = sum(1 for ch in chars
            if ch == "\ufffd" or (unicodedata.category(ch) == "Cc" and ch not in "\t\n\r"))
  if chars and bad > limit * len(chars):
    raise ValueError(f"this does not look like text: {bad / len(chars):.0%} of the "
                     "characters of the tokenizer's training sample are undecodable bytes "
                     "or control characters; use UTF-8 text")


def train_tokenizer(documents: Iterable[str], vocab_size: int,
                    model_prefix_or_dir: str, *, sample_chars: int = 10_000_000,
                    model_type: str = "unigram",
                    user_defined_symbols: Sequence[str] = (),
                    character_coverage: float = 0.9995,
                    num_threads: int = 1, **trainer_options) -> Tokenizer:
  """Trains a SentencePiece model on a sample of `documents` and saves it.

  Args:
    documents: iterable of documents (str); only the first `sample_chars`
      characters (see `training_sample`) are read.
    vocab_size: ids in the model, the 3 reserved ones included. For 'word' and
      'char' models this is an upper bound (hard_vocab_limit is off).
    model_prefix_or_dir: a directory (existing, or ending in '/') receives
      tokenizer.model; otherwise the model is written to '<prefix>.model'.
    sample_chars: bound on the characters of the training sample.
    model_type: 'unigram', 'bpe', 'word' or 'char'.
    user_defined_symbols: pieces always kept whole.
    character_coverage: share of characters covered by the model.
    num_threads: SentencePiece trainer threads (1 is deterministic).
    **trainer_options: any other SentencePieceTrainer option.

  Returns:
    the trained Tokenizer.

  Raises:
    ValueError: if the sample is empty, or too small for `vocab_size` pieces.
  """
  sample = training_sample(documents, sample_chars)
  if not sample:
    raise ValueError("no text to train the tokenizer on (all documents empty)")
  _check_looks_like_text(sample)
  options = dict(
      model_type=model_type, vocab_size=vocab_size,
      user_defined_symbols=list(user_defined_symbols),
      character_coverage=character_coverage, num_threads=num_threads,
      max_sentence_length=16384, input_sentence_size=0, shuffle_input_sentence=False,
      minloglevel=2, **_RESERVED)
  if model_type in ("word", "char"):
    options["hard_vocab_limit"] = False
  options.update(trainer_options)
  model = io.BytesIO()
  try:
    spm.SentencePieceTrainer.train(sentence_iterator=iter(sample), model_writer=model,
                                   **options)
  except RuntimeError as e:
    limit = re.search(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)",
                      str(e))
    chars = re.search(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)",
                      str(e))
    if chars is not None:
      raise ValueError(
          f"vocab_size {vocab_size} is smaller than the {chars.group(2)} characters (and "
          f"reserved pieces) the tokenizer must keep to cover {character_coverage:.2%} of "
          f"the text; raise vocab_size above {chars.group(2)}") from None
    if limit is None:
      raise
    raise ValueError(
        f"vocab_size {vocab_size} is too large for this text: its {len(sample)} training "
        f"sentences ({sum(map(len, sample))} characters) support at most {limit.group(2)} "
        "pieces; lower vocab_size or give more text") from None
  tokenizer = Tokenizer(model.getvalue())
  write_bytes(_model_path(model_prefix_or_dir), tokenizer.serialized())
  return tokenizer


def train_word_tokenizer(words: Sequence[str], model_prefix_or_dir: str) -> Tokenizer:
  """A 'word' model in which every given word is exactly one piece.

  Used for the synthetic corpus (`synthetic.vocabulary()`), whose arcs are
  word-level: with this tokenizer word index = token index within a document.

  Args:
    words: distinct words, none containing whitespace.
    model_prefix_or_dir: as for `train_tokenizer`.

  Raises:
    ValueError: if a word contains whitespace or does not end up one piece.
  """
  words = list(dict.fromkeys(words))
  bad = [w for w in words if not w or any(ch.isspace() for ch in w)]
  if bad:
    raise ValueError(f"words must be non-empty and free of whitespace: {bad[:5]}")
  tokenizer = train_tokenizer([" ".join(words)], len(words) + len(("pad", "unk", "eos")),
                              model_prefix_or_dir, sample_chars=1 << 62,
                              model_type="word", character_coverage=1.0)
  ids, starts = tokenizer.encode_words(words)
  split = [w for w, n in zip(words, np.diff(starts)) if n != 1]
  if split or np.any(ids == UNK_ID):
    raise ValueError(f"words not kept as single pieces: {split[:5]}")
  return tokenizer
