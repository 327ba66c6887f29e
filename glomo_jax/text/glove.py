"""GloVe vectors → the embedding matrix of a task vocabulary.

GloVe's text format (`read_glove`, `write_glove`): one word per line,
``word v1 ... vD`` separated by single spaces, no header
(``glove.6B.100d.txt``; ``.gz`` / ``.xz`` compressed files are read too). A few GloVe releases (840B) hold "words" containing spaces;
the last D fields are always the vector, so those are read correctly.

`embedding_matrix` builds [V, D] float32 for a `Vocabulary`:
* row 0 (``<pad>``): zeros;
* a word found in the file: its GloVe vector times ``glove_scale``
  (default 1: as published; exact match first; with
  ``lowercase_fallback`` a cased file is also searched for the lower-case
  form, which matters only for cased releases such as 840B — our tokenizer
  lower-cases);
* every other row (``<unk>`` and words GloVe lacks): drawn from
  N(0, oov_scale²), default oov_scale = 0.1, with a seeded NumPy generator
  (deterministic). Without a GloVe file every row but 0 is random.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gzip
import logging
from typing import Collection, Iterator, Mapping

import numpy as np

from glomo_jax.errors import InputError
from glomo_jax.io import open_text, write_atomically
from glomo_jax.text.words import PAD_ID, Vocabulary

logger = logging.getLogger(__name__)


def iter_glove(path: str, dim: int | None = None) -> Iterator[tuple[str, np.ndarray]]:
  """(word, float32 [dim] vector) per line of a GloVe text file.

  Args:
    path: the file (.txt, .gz or .xz).
    dim: vector width; default: taken from the first line (fields − 1).

  Raises:
    InputError: a line has fewer than dim + 1 fields or a non-numeric or
      non-finite value (the message names the file and line); a file that
      is not UTF-8, or is damaged or cut short.
  """
  with open_text(path) as f:
    for number, line in enumerate(f, 1):
      fields = line.rstrip("\n\r").rstrip(" ").split(" ")
      if len(fields) == 1 and not fields[0]:
        continue  # blank line
      if dim is None:
        dim = len(fields) - 1
        if dim < 1:
          raise InputError(path, "not GloVe text format (no vector)", line=number)
      if len(fields) < dim + 1:
        raise InputError(path, f"{len(fields) - 1} values, expected {dim}", line=number)
      word = " ".join(fields[:len(fields) - dim])
      try:
        vector = np.asarray(fields[len(fields) - dim:], dtype=np.float32)
      except ValueError:
        raise InputError(path, f"non-numeric vector for {word[:100]!r}", line=number) from None
      if not np.all(np.isfinite(vector)):
        raise InputError(path, f"non-finite value in the vector of {word[:100]!r}", line=number)
      yield word, vector


def read_glove(path: str, words: Collection[str] | None = None,
               dim: int | None = None) -> tuple[dict[str, np.ndarray], int]:
  """Reads GloVe vectors, keeping only `words` if given (saves memory).

  Returns:
    ({word: float32 [dim]}, dim); the first occurrence of a repeated word wins.
  """
  wanted = set(words) if words is not None else None
  vectors: dict[str, np.ndarray] = {}
  for word, vector in iter_glove(path, dim):
    if dim is None:
      dim = vector.shape[0]
    if (wanted is None or word in wanted) and word not in vectors:
      vectors[word] = vector
  if dim is None:
    raise InputError(path, "no vectors")
  return vectors, dim


def write_glove(path: str, vectors: Mapping[str, np.ndarray], digits: int = 5) -> None:
  """Writes {word: vector} in GloVe's text format, `digits` decimals (gzip
  when `path` ends in .gz), atomically (`io.write_atomically`)."""
  def write(f):
    with (gzip.GzipFile(fileobj=f, mode="wb") if path.endswith(".gz") else
          contextlib.nullcontext(f)) as out:
      for word, vector in vectors.items():
        line = word + " " + " ".join(f"{x:.{digits}f}" for x in vector) + "\n"
        out.write(line.encode("utf-8"))
  write_atomically(path, write)


@dataclasses.dataclass(frozen=True)
class Coverage:
  """How much of a vocabulary GloVe covers.

  Attributes:
    found: vocabulary words (reserved ids excluded) with a GloVe vector.
    words: vocabulary words (reserved ids excluded).
    token_coverage: share of training tokens (by the vocabulary's counts)
      whose word has a GloVe vector; nan when the vocabulary has no counts.
    glove_path: the file read, or None (random initialisation only).
  """
  found: int
  words: int
  token_coverage: float
  glove_path: str | None

  @property
  def type_coverage(self) -> float:
    return self.found / self.words if self.words else 0.0

  def __str__(self) -> str:
    return (f"GloVe covers {self.found}/{self.words} words "
            f"({100 * self.type_coverage:.1f}% of types, "
            f"{100 * self.token_coverage:.1f}% of training tokens) from "
            f"{self.glove_path or 'no file'}")


def embedding_matrix(vocab: Vocabulary, glove_path: str | None = None, *,
                     dim: int | None = None, oov_scale: float = 0.1,
                     glove_scale: float = 1.0, seed: int = 0,
                     lowercase_fallback: bool = True,
                     vectors: tuple[dict[str, np.ndarray], int] | None = None
                     ) -> tuple[np.ndarray, Coverage]:
  """The embedding matrix of `vocab` (rows: module docstring).

  Args:
    vocab: the task vocabulary (V ids).
    glove_path: GloVe text file, or None for a random matrix.
    dim: embedding width; required without a file, checked against the file
      otherwise (default: the file's width).
    oov_scale: standard deviation of the random rows.
    glove_scale: multiplies the file's vectors. GloVe 6B 100d rows have a
      norm of about 5.7, the random rows at oov_scale 0.1 about 1.
    seed: seed of the random rows.
    lowercase_fallback: also match a word against the lower-cased GloVe entry.
    vectors: `read_glove(glove_path, words)`'s result when the caller has
      read the file already (it must hold every word of `vocab` the file has).

  Returns:
    (float32 [V, dim] matrix, Coverage).
  """
  rng = np.random.default_rng(seed)
  if glove_path is None:
    if dim is None:
      raise ValueError("embedding_matrix needs dim when no GloVe file is given")
    matrix = rng.normal(0.0, oov_scale, (len(vocab), dim)).astype(np.float32)
    matrix[PAD_ID] = 0.0
    coverage = Coverage(0, len(vocab) - 2, 0.0, None)
    logger.info("%s", coverage)
    return matrix, coverage

  words = vocab.words[2:]
  candidates = set(words)
  if lowercase_fallback:
    candidates |= {w.lower() for w in words}
  vectors, file_dim = vectors if vectors is not None else read_glove(glove_path, candidates)
  if dim is not None and dim != file_dim:
    raise ValueError(f"{glove_path} holds {file_dim}-d vectors, dim={dim} requested")
  dim = file_dim
  matrix = rng.normal(0.0, oov_scale, (len(vocab), dim)).astype(np.float32)
  matrix[PAD_ID] = 0.0
  found = np.zeros(len(vocab), bool)
  for i, word in enumerate(words, start=2):
    vector = vectors.get(word)
    if vector is None and lowercase_fallback:
      vector = vectors.get(word.lower())
    if vector is not None:
      matrix[i] = vector * glove_scale
      found[i] = True
  total = vocab.counts[2:].sum()
  token_cov = float(vocab.counts[found].sum() / total) if total else float("nan")
  coverage = Coverage(int(found.sum()), len(vocab) - 2, token_cov, str(glove_path))
  logger.info("%s", coverage)
  return matrix, coverage
