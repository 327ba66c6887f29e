"""Sentences of a CoNLL-U treebank, with each word's characters in the text.

CoNLL-U (https://universaldependencies.org/format.html) lists, per sentence,
comment lines (``# text = ...`` is the raw sentence) and one line of 10
tab-separated columns per unit:

* ``ID`` an integer: a syntactic word (FORM, HEAD, DEPREL are read);
* ``ID`` a range ``a-b``: a multiword token, the surface form of words a..b
  ("don't" = "do" + "n't"); its words have no characters of their own in
  the text;
* ``ID`` a decimal ``a.1``: an empty node of the enhanced graph; the basic
  tree (HEAD) never points at one, so it is skipped.

Each word gets a character span in the sentence's text: the surface tokens
(words outside multiword tokens, and multiword tokens) are found left to
right in the text. Inside a multiword token, when the words' forms spell the
token ("do" + "n't" = "don't", "gon" + "na" = "gonna") each word gets its own
characters (in UD English EWT dev every multiword token is spelled so); when
they do not (treebanks that normalise the words, e.g. "au" = "à" + "le"), the
whole token's span goes to its first word and the others get the empty span
(−1, −1): they have no pieces in the graph.
"""
from __future__ import annotations

import dataclasses
from typing import Iterator

import numpy as np

from glomo_jax.errors import InputError
from glomo_jax.io import open_text


@dataclasses.dataclass(frozen=True)
class Sentence:
  """One sentence of the basic dependency tree.

  Attributes:
    text: the raw sentence (``# text``; rebuilt from the tokens and their
      SpaceAfter=No marks when the comment is missing).
    forms: the syntactic words, n of them.
    heads: int32 [n]: the 0-based index of each word's head, −1 for the root.
    deprels: the relation of each word to its head ("nsubj", "obl:tmod").
    spans: int64 [n, 2]: each word's [start, end) characters in `text`, or
      (−1, −1) for a word with no characters of its own (see module).
    sent_id: the ``# sent_id`` comment, or "line N".
    upos, feats: each word's universal part of speech ("NOUN") and its
      morphological features as {name: value} ({"Number": "Plur"}).
  """
  text: str
  forms: tuple[str, ...]
  heads: np.ndarray
  deprels: tuple[str, ...]
  spans: np.ndarray
  sent_id: str
  upos: tuple[str, ...] = ()
  feats: tuple[dict, ...] = ()

  def __len__(self) -> int:
    return len(self.forms)


class CoNLLUError(InputError):
  """A CoNLL-U file that cannot be read; the message names the file and line."""


def read_conllu(path: str) -> Iterator[Sentence]:
  """Sentences of a CoNLL-U file (plain, .gz or .xz), in order.

  Raises:
    CoNLLUError: a malformed line, a HEAD outside the sentence, or a token
      that is not in the sentence's text (file and line named).
    InputError: a file that is not UTF-8, or is damaged or cut short.
  """
  with open_text(path) as lines:
    block, first = [], 1
    for number, line in enumerate(lines, 1):
      line = line.rstrip("\n")
      if line.strip():
        if not block:
          first = number
        block.append(line)
        continue
      if block:
        yield _sentence(block, path, first)
        block = []
    if block:
      yield _sentence(block, path, first)


def _sentence(block: list[str], path: str, first: int) -> Sentence:
  """The sentence of the lines `block`, the first of them line `first` of `path`."""
  text, sent_id = None, f"line {first}"
  tokens = []      # (form, first word index, last word index, space_after)
  forms, heads, deprels, upos, feats = [], [], [], [], []
  for offset, line in enumerate(block):
    if line.startswith("#"):
      key, _, value = line[1:].partition("=")
      if key.strip() == "text":
        text = value.strip()
      elif key.strip() == "sent_id":
        sent_id = value.strip()
      continue
    columns = line.split("\t")
    if len(columns) != 10:
      raise CoNLLUError(path, f"expected 10 tab-separated columns, got {len(columns)}",
                        line=first + offset)
    ident, form, misc = columns[0], columns[1], columns[9]
    space_after = "SpaceAfter=No" not in misc.split("|")
    try:
      if "." in ident:
        continue
      if "-" in ident:
        a, b = (int(x) for x in ident.split("-"))
        if a != len(forms) + 1 or b < a:
          raise CoNLLUError(path, f"multiword token {ident} does not span the next words",
                            line=first + offset)
        tokens.append((form, a - 1, b - 1, space_after))
        continue
      index = int(ident)
      head = int(columns[6])
    except ValueError as error:
      raise CoNLLUError(path, f"bad ID or HEAD ({error})", line=first + offset) from None
    if index != len(forms) + 1:
      raise CoNLLUError(path, f"word {index} out of order", line=first + offset)
    if not tokens or tokens[-1][2] < index - 1:
      tokens.append((form, index - 1, index - 1, space_after))
    forms.append(form)
    heads.append(head - 1)
    deprels.append(columns[7])
    upos.append(columns[3])
    feats.append(_features(columns[5]))
  n = len(forms)
  heads = np.asarray(heads, np.int32)
  if n == 0:
    raise CoNLLUError(path, "a sentence without words", line=first)
  if tokens[-1][2] >= n:
    raise CoNLLUError(path, "a multiword token spans words past the sentence's end",
                      line=first)
  if np.any(heads < -1) or np.any(heads >= n):
    raise CoNLLUError(path, f"a HEAD points outside the sentence ({n} words)", line=first)
  if text is None:
    text = "".join(form + (" " if space else "") for form, _, _, space in tokens).rstrip()
  return Sentence(text=text, forms=tuple(forms), heads=heads, deprels=tuple(deprels),
                  spans=_word_spans(text, tokens, forms, path, first), sent_id=sent_id,
                  upos=tuple(upos), feats=tuple(feats))


def _features(column: str) -> dict:
  """FEATS "Number=Plur|Person=3" → {"Number": "Plur", "Person": "3"} ("_": {})."""
  return dict(item.partition("=")[::2] for item in column.split("|") if item and item != "_")


def _word_spans(text: str, tokens, forms, path: str, first: int) -> np.ndarray:
  spans = np.full((len(forms), 2), -1, np.int64)
  cursor = 0
  for form, first, last, _ in tokens:
    start = text.find(form, cursor)
    if start < 0 or text[cursor:start].strip():
      raise CoNLLUError(path, f"token {form!r} is not next in the text {text!r}",
                        line=first)
    cursor = start + len(form)
    words = forms[first:last + 1]
    if "".join(words) == form:
      for w, word in zip(range(first, last + 1), words):
        spans[w] = (start, start + len(word))
        start += len(word)
    else:
      spans[first] = (start, cursor)
  return spans
