"""Word tokenizer and task vocabulary for the downstream tasks (IMDB, NLI).

The downstream models read *words* (GloVe is a word-level table), unlike the
graph predictor, which reads SentencePiece pieces; `glomo_jax.graphs.align`
pools the predictor's piece-level graphs onto these words.

`tokenize` rules, in order (chosen to match GloVe 6B's uncased, PTB-like
tokenization as far as a regular expression can):

1. HTML line breaks (``<br />``, ``<br/>``, ``<br>``, any case, as in IMDB
   reviews) become spaces.
2. Tokens are matched case-insensitively on the text as written (so each
   keeps its character offsets, `tokenize_with_offsets`), then lower-cased.
3. Tokens are, left to right:
   * numbers with inner separators kept whole: ``1,000``, ``3.5``;
   * PTB contractions split off: ``don't`` → ``do n't``, ``can't`` →
     ``ca n't``, ``it's`` → ``it 's`` (also ``'re 've 'll 'd 'm``);
   * runs of word characters (Unicode letters, digits, ``_``), with inner
     hyphens kept: ``well-known`` is one token;
   * every other non-space character on its own: ``!?`` → ``! ?``.

`Vocabulary` maps words to ids: 0 = ``<pad>``, 1 = ``<unk>``, then words by
descending training count (ties alphabetical, so the result is deterministic).
"""
from __future__ import annotations

import collections
import json
import re
from typing import Iterable, Sequence

import numpy as np

from glomo_jax.io import write_json

PAD_ID, UNK_ID = 0, 1
PAD, UNK = "<pad>", "<unk>"

_BREAK = re.compile(r"<br\s*/?\s*>", re.IGNORECASE)
_TOKEN = re.compile(r"""
    \d+(?:[.,]\d+)+          # 1,000  3.5
  | \w+(?=n't\b)             # 'do' of don't
  | n't\b
  | '(?:s|re|ve|ll|d|m)\b    # 's 're 've 'll 'd 'm
  | \w+(?:-\w+)*             # words; well-known stays whole
  | [^\w\s]                  # any other single character
""", re.VERBOSE | re.IGNORECASE)


def tokenize_with_offsets(text: str) -> tuple[list[str], list[tuple[int, int]]]:
  """Lower-cased word tokens of `text` and their character spans in it.

  The rules are `tokenize`'s, matched on the original text (a line break
  becomes spaces of its own length), so ``text[start:end]`` is each token as
  written and predicted word spans map back to the exact passage text.

  Returns:
    (words, spans): words[i] == text[start:end].lower() for (start, end) =
    spans[i]; spans are increasing and do not overlap.

  >>> tokenize_with_offsets("Don't stop!")
  (['do', "n't", 'stop', '!'], [(0, 2), (2, 5), (6, 10), (10, 11)])
  """
  clean = plain_text(text)
  words, spans = [], []
  for match in _TOKEN.finditer(clean):
    words.append(match.group().lower())
    spans.append(match.span())
  return words, spans


def plain_text(text: str) -> str:
  """`text` with its HTML line breaks turned into spaces of the same length:
  what a graph predictor pretrained on plain text reads; the spans of
  `tokenize_with_offsets` stay valid in it."""
  return _BREAK.sub(lambda m: " " * len(m.group()), text)


def tokenize(text: str) -> list[str]:
  """Lower-cased word tokens of `text` (rules: module docstring).

  >>> tokenize("I didn't like it.<br /><br />Well-made, though: 8/10!")
  ['i', 'did', "n't", 'like', 'it', '.', 'well-made', ',', 'though', ':', '8', '/', '10', '!']
  """
  return tokenize_with_offsets(text)[0]


class Vocabulary:
  """Word ↔ id map with ``<pad>`` = 0 and ``<unk>`` = 1.

  Attributes:
    words: list of all words by id (``words[0] == '<pad>'``).
    counts: training count per id (0 for the reserved ids), int64 [len].
  """

  def __init__(self, words: Sequence[str], counts: Sequence[int] | None = None):
    """Builds from the words for ids 2, 3, ... (without the reserved ones)."""
    words = list(words)
    if len(set(words)) != len(words):
      raise ValueError("Vocabulary words must be distinct")
    if PAD in words or UNK in words:
      raise ValueError(f"{PAD!r} and {UNK!r} are reserved")
    self.words: list[str] = [PAD, UNK] + words
    self._ids = {w: i for i, w in enumerate(self.words)}
    if counts is None:
      counts = [0] * len(words)
    if len(counts) != len(words):
      raise ValueError(f"{len(counts)} counts for {len(words)} words")
    self.counts = np.asarray([0, 0] + list(counts), dtype=np.int64)

  @classmethod
  def build(cls, tokenized_texts: Iterable[Sequence[str]], *, min_count: int = 1,
            max_size: int | None = None) -> "Vocabulary":
    """Vocabulary of the words of `tokenized_texts` (e.g. the training split).

    Args:
      tokenized_texts: word lists (several text fields: chain them).
      min_count: words seen fewer times map to ``<unk>``.
      max_size: at most this many ids in all, the two reserved ones included;
        the most frequent words are kept (ties: alphabetical). None = no bound.

    Returns:
      the Vocabulary, words ordered by descending count, then alphabetically.
    """
    if max_size is not None and max_size < 2:
      raise ValueError(f"max_size must be >= 2 (pad and unk), got {max_size}")
    counter = collections.Counter()
    for words in tokenized_texts:
      counter.update(words)
    counter.pop(PAD, None)
    counter.pop(UNK, None)
    kept = sorted((w for w, c in counter.items() if c >= min_count),
                  key=lambda w: (-counter[w], w))
    if max_size is not None:
      kept = kept[:max_size - 2]
    return cls(kept, [counter[w] for w in kept])

  def __len__(self) -> int:
    return len(self.words)

  def __contains__(self, word: str) -> bool:
    return word in self._ids

  def __repr__(self) -> str:
    return f"Vocabulary(size={len(self)})"

  @property
  def size(self) -> int:
    """Number of ids (embedding rows), reserved ones included."""
    return len(self.words)

  def id(self, word: str) -> int:
    """Id of `word`, UNK_ID if unknown."""
    return self._ids.get(word, UNK_ID)

  def encode(self, words: Sequence[str]) -> list[int]:
    """Ids of a word list (unknown words → UNK_ID)."""
    get = self._ids.get
    return [get(w, UNK_ID) for w in words]

  def decode(self, ids: Iterable[int]) -> list[str]:
    """Words of ids; padding is dropped."""
    return [self.words[int(i)] for i in ids if int(i) != PAD_ID]

  def encode_batch(self, word_lists: Sequence[Sequence[str]], *,
                   max_words: int | None = None, length: int | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Pads a batch of word lists.

    Args:
      word_lists: B word lists.
      max_words: each list is cut to its first `max_words` words.
      length: W, the padded length (>= every cut list's length); default the
        longest cut list (at least 1).

    Returns:
      ids: int32 [B, W], PAD_ID after each list's end;
      mask: bool [B, W], True for real words.
    """
    rows = [self.encode(w[:max_words] if max_words is not None else w)
            for w in word_lists]
    longest = max((len(r) for r in rows), default=0)
    if length is None:
      length = max(1, longest)
    elif length < longest:
      raise ValueError(f"length {length} is shorter than the longest list ({longest})")
    ids = np.full((len(rows), length), PAD_ID, np.int32)
    mask = np.zeros((len(rows), length), bool)
    for b, row in enumerate(rows):
      ids[b, :len(row)] = row
      mask[b, :len(row)] = True
    return ids, mask

  def unk_rate(self, tokenized_texts: Iterable[Sequence[str]]) -> float:
    """Share of the tokens of `tokenized_texts` that map to ``<unk>``."""
    total = unknown = 0
    for words in tokenized_texts:
      total += len(words)
      unknown += sum(1 for w in words if w not in self._ids)
    return unknown / total if total else 0.0

  def save(self, path: str) -> None:
    """Writes JSON {"words": [...], "counts": [...]} (reserved ids left out)."""
    write_json(path, {"words": self.words[2:], "counts": self.counts[2:].tolist()},
               indent=None)

  @classmethod
  def load(cls, path: str) -> "Vocabulary":
    """Reads what `save` wrote."""
    with open(path, encoding="utf-8") as f:
      data = json.load(f)
    return cls(data["words"], data.get("counts"))
