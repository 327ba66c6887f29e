"""A task's tokenized examples: `Split` (one split's texts, labels and what
the graph predictor and the scores read) and `TaskData` (a task's splits),
with the seeded validation split and subsets. The readers that make them
from TFDS, JSON-lines and TSV files are in `glomo_jax.text.readers`; batching
in `glomo_jax.text.batching`.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from glomo_jax.text.words import Vocabulary


@dataclasses.dataclass
class Split:
  """Tokenized examples of one split.

  Attributes:
    texts: {field: N word lists}.
    labels: the targets: int32 [N] (a class per example), int32 [N, ...]
      (one target array of a fixed shape per example), or a list of N int32
      arrays of any shapes (e.g. one tag per word of a text field, [n_i]);
      `glomo_jax.text.batching` pads them with a target padder.
    arcs: {field: N int arrays [n, 2]} of known dependency arcs, (target,
      source) word positions (the built-in language only; else None).
    raw: {field: N texts as written (`words.plain_text`)} and spans: {field:
      N int32 arrays [n, 2]}, each word's [start, end) characters in it; what
      the graph predictor reads (None when the words were not split from a
      text by `tokenize`).
    info: {name: int [N]} of per-example facts that scores are split by
      (the verb-number task's 'attractors' and 'distance'; -1: unknown), or None.
  """
  texts: dict[str, list[list[str]]]
  labels: np.ndarray
  arcs: dict[str, list[np.ndarray]] | None = None
  raw: dict[str, list[str]] | None = None
  spans: dict[str, list[np.ndarray]] | None = None
  info: dict[str, np.ndarray] | None = None

  def __post_init__(self):
    self.labels = _targets(self.labels)
    for field, rows in self.texts.items():
      if len(rows) != len(self.labels):
        raise ValueError(f"field {field!r} has {len(rows)} texts for "
                         f"{len(self.labels)} labels")

  def __len__(self) -> int:
    return len(self.labels)

  def subset(self, indices: Sequence[int]) -> "Split":
    """The examples at `indices`, in that order."""
    indices = [int(i) for i in indices]
    def pick(fields):
      return None if fields is None else {
          f: [rows[i] for i in indices] for f, rows in fields.items()}
    info = None if self.info is None else {
        k: np.asarray(v)[np.asarray(indices, np.int64)] for k, v in self.info.items()}
    if isinstance(self.labels, list):
      labels = [self.labels[i] for i in indices]
    else:
      labels = self.labels[indices] if indices else self.labels[:0]
    return Split(pick(self.texts), labels, pick(self.arcs), pick(self.raw), pick(self.spans),
                 info)

  def lengths(self, field: str) -> np.ndarray:
    """Words per example of `field`, int64 [N]."""
    return np.fromiter(map(len, self.texts[field]), np.int64, len(self))

  def fingerprint_keys(self) -> list[tuple]:
    """One hashable key per example (its words and label); for tests."""
    fields = sorted(self.texts)
    return [tuple(tuple(self.texts[f][i]) for f in fields)
            + tuple(int(t) for t in np.ravel(self.labels[i])) for i in range(len(self))]


def _targets(labels) -> np.ndarray | list[np.ndarray]:
  """`Split.labels` in its layout: a sequence whose items are arrays (of any
  shapes) stays a list of int32 arrays; anything else becomes an int32
  array, [N] when it has at most one axis, else [N, ...]."""
  if isinstance(labels, (list, tuple)) and any(np.ndim(t) > 0 for t in labels):
    return [np.asarray(t, np.int32) for t in labels]
  labels = np.asarray(labels, np.int32)
  return labels.reshape(-1) if labels.ndim <= 1 else labels


@dataclasses.dataclass
class TaskData:
  """A task's splits.

  Attributes:
    task: 'imdb', 'sst2', 'mnli', 'snli' or 'agreement'.
    splits: {'train', 'validation', evaluation splits...: Split}.
    text_fields: model inputs, e.g. ('premise', 'hypothesis').
    label_names: class names by id.
    eval_splits: the splits reported as results (e.g. ('matched', 'mismatched')).
  """
  task: str
  splits: dict[str, Split]
  text_fields: tuple[str, ...]
  label_names: tuple[str, ...]
  eval_splits: tuple[str, ...]

  @property
  def num_classes(self) -> int:
    return len(self.label_names)

  def __getitem__(self, name: str) -> Split:
    return self.splits[name]

  def build_vocabulary(self, *, min_count: int = 1, max_size: int | None = None
                       ) -> Vocabulary:
    """Vocabulary of the training split (all text fields)."""
    train = self.splits["train"]
    return Vocabulary.build((w for f in self.text_fields for w in train.texts[f]),
                            min_count=min_count, max_size=max_size)

  def summary(self) -> str:
    return ", ".join(f"{name} {len(split)}" for name, split in self.splits.items())


# ---- validation split and subsets ------------------------------------------------
def split_validation(split: Split, fraction: float, seed: int = 0
                     ) -> tuple[Split, Split]:
  """(rest, validation): a seeded random `fraction` of `split` held out.

  Both keep the original order; they are disjoint and together are `split`.
  The same (N, fraction, seed) always gives the same partition. At least one
  example is held out when fraction > 0 (and none when it is 0).
  """
  if not 0.0 <= fraction < 1.0:
    raise ValueError(f"validation fraction must be in [0, 1), got {fraction}")
  n = len(split)
  count = 0 if fraction == 0 else min(n - 1, max(1, int(round(fraction * n))))
  order = np.random.default_rng(seed).permutation(n)
  held = np.zeros(n, bool)
  held[order[:count]] = True
  return split.subset(np.flatnonzero(~held)), split.subset(np.flatnonzero(held))


def random_subset(split: Split, size: int | None, seed: int = 0) -> Split:
  """A seeded random subset of `size` examples (original order kept)."""
  if size is None or size >= len(split):
    return split
  keep = np.sort(np.random.default_rng(seed).permutation(len(split))[:size])
  return split.subset(keep)
