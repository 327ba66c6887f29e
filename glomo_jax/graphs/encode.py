"""The predictor's inputs for a batch of word lists or raw texts: the pieces,
the unit (word) each piece belongs to, and the padding.

Word lists are joined by spaces and encoded word by word
(`encode_word_lists`); raw texts are encoded as written and each piece goes
to the unit that holds its characters (`encode_texts`,
`unit_of_piece_from_spans`). Length: the predictor is convolutional (causal
CNNs, no position embeddings) plus attention over all earlier positions, so
it runs at any length, including sequences longer than its pretraining
windows; by default no piece is cut (memory grows as P²). Pass
``max_pieces`` to bound it: words whose pieces are all cut keep their place
but have zero rows and columns. The padded piece length is a multiple of
`glomo_jax.graphs.shapes.piece_multiple` unless the caller names one.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from glomo_jax.graphs.align import piece_to_unit
from glomo_jax.graphs.shapes import piece_multiple
from glomo_jax.io import round_up


def encode_word_lists(tokenizer, word_lists: Sequence[Sequence[str]], max_words: int,
                      *, max_pieces: int | None = None, pad_multiple: int | None = None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """Pieces of a batch of word lists, padded.

  Args:
    tokenizer: a `glomo_jax.data.tokenizer.Tokenizer`.
    word_lists: B lists of words (no whitespace inside a word); words beyond
      `max_words` are dropped.
    max_words: W.
    max_pieces: cut each example to this many pieces (None: no limit); the
      padded axis P can exceed it by less than the pad multiple.
    pad_multiple: the piece length P is the longest example's, rounded up to a
      multiple of this (fewer distinct shapes to compile); None:
      `piece_multiple()` of the default backend.

  Returns:
    tokens int32 [B, P] (pad id after the pieces), piece_mask bool [B, P],
    unit_of_piece int32 [B, P] (−1 for padding), word_mask bool [B, W].
  """
  encoded = []
  for words in word_lists:
    words = list(words)[:max_words]
    ids, starts = tokenizer.encode_words(words)
    encoded.append((ids, piece_to_unit(starts, len(ids)), len(words)))
  return _pad_batch(encoded, tokenizer.pad_id, max_words, max_pieces, pad_multiple)


def unit_of_piece_from_spans(text: str, piece_spans, unit_spans) -> np.ndarray:
  """The unit of each piece of a text, by characters.

  A piece belongs to the unit whose characters hold its first non-space
  character; a piece of whitespace only (a lone "▁" before a character
  SentencePiece splits off) belongs to the unit holding the character just
  after it. Pieces in no unit (text the units leave out) get −1.

  Args:
    text: the text the pieces were encoded from.
    piece_spans: int [P, 2], each piece's [start, end) characters
      (`Tokenizer.encode_with_spans`).
    unit_spans: int [U, 2], each unit's [start, end) characters, disjoint;
      (−1, −1) for a unit with no characters.

  Returns:
    int32 [P] in [−1, U).
  """
  piece_spans = np.asarray(piece_spans, np.int64).reshape(-1, 2)
  unit_spans = np.asarray(unit_spans, np.int64).reshape(-1, 2)
  position = piece_spans[:, 1].copy()
  for p, (start, end) in enumerate(piece_spans):
    stripped = len(text[start:end]) - len(text[start:end].lstrip())
    if start + stripped < end:
      position[p] = start + stripped
  inside = (unit_spans[None, :, 0] <= position[:, None]) & \
      (position[:, None] < unit_spans[None, :, 1])                 # [P, U]
  return np.where(inside.any(axis=1), np.argmax(inside, axis=1), -1).astype(np.int32)


def encode_texts(tokenizer, texts: Sequence[str], unit_spans: Sequence, max_units: int,
                 *, max_pieces: int | None = None, pad_multiple: int | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """Pieces of a batch of raw texts, each piece assigned to a unit by characters.

  The predictor reads each text as written (case, spacing and punctuation
  kept, as in its pretraining); `unit_of_piece_from_spans` maps the pieces
  to the caller's units (e.g. a treebank's or a task's words).

  Args:
    tokenizer: a `glomo_jax.data.tokenizer.Tokenizer`.
    texts: B raw texts.
    unit_spans: B int arrays [U_b, 2] of the units' [start, end) characters;
      units beyond `max_units` are dropped, and the text is cut after the
      last unit kept (as `encode_word_lists` drops the words after the cut).
    max_units: W.
    max_pieces, pad_multiple: see `encode_word_lists`.

  Returns:
    tokens int32 [B, P], piece_mask bool [B, P], unit_of_piece int32 [B, P]
    (−1 for padding and for pieces in no kept unit), unit_mask bool [B, W].
  """
  if len(texts) != len(unit_spans):
    raise ValueError(f"{len(texts)} texts but {len(unit_spans)} unit span lists")
  kept = [np.asarray(s, np.int64).reshape(-1, 2)[:max_units] for s in unit_spans]
  texts = [text[:int(s[:, 1].max(initial=0))] for text, s in zip(texts, kept)]
  encoded = []
  for text, spans, (ids, piece_spans) in zip(texts, kept,
                                              tokenizer.encode_with_spans(texts)):
    encoded.append((ids, unit_of_piece_from_spans(text, piece_spans, spans), len(spans)))
  return _pad_batch(encoded, tokenizer.pad_id, max_units, max_pieces, pad_multiple)


def _pad_batch(encoded, pad_id: int, max_units: int, max_pieces: int | None,
               pad_multiple: int | None):
  """[(ids [P_b], unit_of_piece [P_b], num_units)] -> padded arrays (see
  `encode_word_lists`)."""
  if max_units < 1:
    raise ValueError(f"max_words must be >= 1, got {max_units}")
  if max_pieces is not None and max_pieces < 1:
    raise ValueError(f"max_pieces must be >= 1, got {max_pieces}")
  if not encoded:
    raise ValueError("word_graphs needs at least one example")
  cut = [len(ids) if max_pieces is None else min(len(ids), max_pieces)
         for ids, _, _ in encoded]
  length = round_up(max(1, max(cut)), pad_multiple or piece_multiple())
  batch = len(encoded)
  tokens = np.full((batch, length), pad_id, np.int32)
  piece_mask = np.zeros((batch, length), bool)
  unit = np.full((batch, length), -1, np.int32)
  unit_mask = np.zeros((batch, max_units), bool)
  for b, ((ids, units, num_units), n) in enumerate(zip(encoded, cut)):
    tokens[b, :n] = ids[:n]
    piece_mask[b, :n] = True
    unit[b, :n] = units[:n]
    unit_mask[b, :num_units] = True
  return tokens, piece_mask, unit, unit_mask


def checked_tokenizer(predictor, tokenizer):
  """`tokenizer`, or the predictor's when None; ValueError when there is none
  or when it is not the tokenizer the predictor was exported with."""
  if tokenizer is None:
    tokenizer = getattr(predictor, "tokenizer", None)
  if tokenizer is None:
    raise ValueError("word_graphs needs a tokenizer (the predictor has none)")
  recorded = (getattr(predictor, "manifest", None) or {}).get("tokenizer_fingerprint")
  if recorded is not None and recorded != tokenizer.fingerprint:
    raise ValueError(f"vocabulary mismatch: the predictor was exported with tokenizer "
                     f"{recorded}, got {tokenizer.fingerprint}")
  return tokenizer
