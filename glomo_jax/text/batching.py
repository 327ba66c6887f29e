"""Padded batches of a text task's split.

`make_batch` pads each text field to the batch's longest (cut) text,
optionally rounded up to a multiple (fewer jit shapes), and the targets
with a target padder: `pad_labels` (the default: a class, or a target
array of a fixed shape, per example) or `word_targets(field)` (one target
per word of a text field, padded like its words); `batches` is one epoch of
them in `glomo_jax.train.batches.batch_order`.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from glomo_jax.io import round_up
from glomo_jax.text.splits import Split
from glomo_jax.text.words import Vocabulary
from glomo_jax.train.batches import batch_order

# (split, indices, batch rows B, {field: W_f}) -> the batch's 'label' array
TargetPadder = Callable[[Split, Sequence[int], int, Mapping[str, int]], np.ndarray]


def pad_labels(split: Split, indices: Sequence[int], size: int,
               widths: Mapping[str, int]) -> np.ndarray:
  """The default target padder: `split.labels` [N, ...] at `indices`, then
  zero rows to B = size: int32 [B, ...]."""
  del widths
  labels = np.asarray(split.labels)
  return np.concatenate([labels[list(indices)],
                         np.zeros((size - len(indices),) + labels.shape[1:], np.int32)])


def word_targets(field: str, fill: int = -1) -> TargetPadder:
  """A target padder for one target per word of `field` (`split.labels`:
  N int arrays [n_i]): int32 [B, W_field], each row cut and padded like the
  field's words, `fill` at padding (and in padding rows)."""
  def pad(split: Split, indices: Sequence[int], size: int,
          widths: Mapping[str, int]) -> np.ndarray:
    out = np.full((size, widths[field]), fill, np.int32)
    for row, i in enumerate(indices):
      targets = np.asarray(split.labels[i], np.int32)[:widths[field]]
      out[row, :len(targets)] = targets
    return out
  return pad


def make_batch(split: Split, indices: Sequence[int], vocab: Vocabulary, *,
               max_words: int | None = None, length_multiple: int = 1,
               batch_size: int | None = None,
               target_padder: TargetPadder = pad_labels) -> dict[str, Any]:
  """One padded batch of the examples at `indices`.

  Args:
    split: the examples.
    indices: which (B ≤ batch_size of them).
    vocab: word → id.
    max_words: cut every text to this many words.
    length_multiple: round each field's W up to a multiple (never past max_words).
    batch_size: pad the batch with empty rows (weight 0) to this many.
    target_padder: the targets' 'label' array (`pad_labels`: int32 [B, ...];
      `word_targets(field)`: int32 [B, W_field]).

  Returns:
    {field: int32 [B, W_f], field + '_mask': bool [B, W_f], 'label': the
    target padder's array (by default int32 [B]), 'weight': float32 [B] (1
    real, 0 padding row), 'index': int64 [B] (position in split, -1 for
    padding rows)}. W_f = the field's longest cut text in the batch (≥ 1),
    rounded up.
  """
  indices = [int(i) for i in indices]
  size = len(indices) if batch_size is None else batch_size
  if len(indices) > size:
    raise ValueError(f"{len(indices)} examples for a batch of {size}")
  pad = size - len(indices)
  batch: dict[str, Any] = {}
  for field in split.texts:
    words = [split.texts[field][i][:max_words] if max_words is not None
             else split.texts[field][i] for i in indices] + [[] for _ in range(pad)]
    longest = max(1, max(map(len, words)))
    length = round_up(longest, max(1, length_multiple))
    if max_words is not None:
      length = max(longest, min(length, max_words))
    batch[field], batch[field + "_mask"] = vocab.encode_batch(words, length=length)
  widths = {field: batch[field].shape[1] for field in split.texts}
  batch["label"] = target_padder(split, indices, size, widths)
  batch["weight"] = np.concatenate([np.ones(len(indices), np.float32),
                                    np.zeros(pad, np.float32)])
  batch["index"] = np.asarray(indices + [-1] * pad, np.int64)
  return batch


def batches(split: Split, vocab: Vocabulary, batch_size: int, *,
            max_words: int | None = None, shuffle: bool = False, seed: int = 0,
            epoch: int = 0, drop_remainder: bool = False, pad_final: bool = False,
            length_multiple: int = 1, bucket_batches: int = 0,
            target_padder: TargetPadder = pad_labels) -> Iterator[dict[str, Any]]:
  """One epoch of padded batches (`make_batch` layout, `batch_order` order).

  pad_final: pad a short last batch with empty rows (weight 0) to batch_size,
  so every batch has B = batch_size (one jit shape for evaluation).
  """
  for indices in batch_order(split, batch_size, shuffle=shuffle, seed=seed,
                             epoch=epoch, drop_remainder=drop_remainder,
                             bucket_batches=bucket_batches):
    yield make_batch(split, indices, vocab, max_words=max_words,
                     length_multiple=length_multiple,
                     batch_size=batch_size if pad_final else None,
                     target_padder=target_padder)
