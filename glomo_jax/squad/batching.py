"""Padded batches of SQuAD questions: passage and question words, their
characters, and the answer span.

Passages are cut to `max_context_words` and questions to
`max_question_words` (None: never); each text's padded length is the
batch's longest, rounded up to `length_multiple` (never past the cap).
Characters come from the words as written (original case), the first
`max_word_chars` of each word.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from glomo_jax.io import round_up
from glomo_jax.squad.data import SquadSplit
from glomo_jax.text.words import Vocabulary


def padded_length(longest: int, multiple: int, cap: int | None) -> int:
  """max(longest, 1) rounded up to `multiple`, but not past `cap`."""
  length = round_up(max(1, longest), max(1, multiple))
  return length if cap is None else max(max(1, longest), min(length, cap))


def word_and_char_ids(words: Sequence[Sequence[str]], tokens: Sequence[Sequence[str]],
                 vocab: Vocabulary, chars: Vocabulary, length: int, max_word_chars: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """ids int32 [B, length], mask bool [B, length], char ids int32 [B, length,
  max_word_chars] of B texts (words lower-cased, tokens as written)."""
  ids, mask = vocab.encode_batch([w[:length] for w in words], length=length)
  char_ids = np.zeros((len(words), length, max_word_chars), np.int32)
  for b, row in enumerate(tokens):
    for t, token in enumerate(row[:length]):
      codes = chars.encode(list(token[:max_word_chars]))
      char_ids[b, t, :len(codes)] = codes
  return ids, mask, char_ids


def make_squad_batch(split: SquadSplit, indices: Sequence[int], vocab: Vocabulary,
                     chars: Vocabulary, *, max_word_chars: int = 14,
                     max_context_words: int | None = None,
                     max_question_words: int | None = None, length_multiple: int = 1,
                     batch_size: int | None = None) -> dict[str, Any]:
  """One batch of the questions at `indices` (padded with empty rows to
  `batch_size`).

  Returns:
    {'context': int32 [B, Tc], 'context_mask': bool [B, Tc],
    'context_chars': int32 [B, Tc, C], the same three for 'question' [B, Tq],
    'start', 'end': int32 [B] the first answer's words (0 when it has none
    inside the cut passage), 'weight': float32 [B] (1 for a real row whose
    answer lies inside the cut passage: the rows the loss reads),
    'index': int64 [B] (the question's position, -1 for padding),
    'paragraph': int64 [B] (its paragraph, -1 for padding)}.
  """
  indices = [int(i) for i in indices]
  size = len(indices) if batch_size is None else batch_size
  if len(indices) > size:
    raise ValueError(f"{len(indices)} questions for a batch of {size}")
  questions = [split.questions[i] for i in indices]
  paragraphs = [split.paragraphs[q.paragraph] for q in questions]
  pad = size - len(indices)
  batch: dict[str, Any] = {}
  texts = {"context": ([p.words for p in paragraphs], [p.tokens() for p in paragraphs],
                       max_context_words),
           "question": ([q.words for q in questions], [q.tokens for q in questions],
                        max_question_words)}
  for field, (words, tokens, cap) in texts.items():
    longest = max(map(len, words), default=0)
    length = padded_length(longest if cap is None else min(longest, cap), length_multiple, cap)
    batch[field], batch[field + "_mask"], batch[field + "_chars"] = word_and_char_ids(
        words + [[]] * pad, tokens + [[]] * pad, vocab, chars, length, max_word_chars)
  tc = batch["context"].shape[1]
  inside = [q.span is not None and q.span[1] < tc for q in questions]
  spans = [q.span if ok else (0, 0) for q, ok in zip(questions, inside)]
  batch["start"] = np.asarray([s for s, _ in spans] + [0] * pad, np.int32)
  batch["end"] = np.asarray([e for _, e in spans] + [0] * pad, np.int32)
  batch["weight"] = np.asarray(inside + [False] * pad, np.float32)
  batch["index"] = np.asarray(indices + [-1] * pad, np.int64)
  batch["paragraph"] = np.asarray([q.paragraph for q in questions] + [-1] * pad, np.int64)
  return batch
