"""Graph rows stored sparsely: each row's largest sources, packed end to end.

A word graph's row (one target word, a distribution over its source words,
or all 0) is stored as the sources it keeps and their weights. Rows keep at
most k sources (their k largest) and never a zero weight, so a row stores
as many values as it keeps nonzero sources: an empty row costs only its
count. Packed form of a block [..., n, n] (R = its rows, C order):

  counts   [R]: sources kept by each row (0 … min(k, n))
  sources  [V]: their source words, rows end to end (V = sum of counts)
  values   [V]: their weights, as float16 / float32, or as uint8 levels

A row with more than k nonzero sources keeps its k largest, renormalised to
sum to 1 (`top_k_rows`; the others are exact). uint8 stores a row's weights
as levels q = round(255 · w / max(w)) ≥ 0 and reads them back as q / Σ q;
since word-graph rows sum to 1 (`align_graphs`), that is w to within
max(w) / 510 per weight before the renormalisation, and a weight under
max(w) / 510 rounds to 0 and is dropped. Bytes per row: the count (1 or 2)
plus, per kept source, the source (1 or 2) and the weight (1, 2 or 4).
"""
from __future__ import annotations

import numpy as np

VALUE_DTYPES = ("float16", "float32", "uint8")


def top_k_rows(block: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The k largest sources of each row of `block` [..., n, n].

  Returns (sources int [..., n, k'], weights float32 [..., n, k'], kept
  float32 [..., n]) with k' = min(k, n): a row with more than k nonzero
  weights keeps its k largest, renormalised to sum to 1, and `kept` is the
  share of its weight they had; other rows are unchanged (kept 1; their
  slots past the nonzeros have weight 0).
  """
  n = block.shape[-1]
  block = np.asarray(block, np.float32)
  if k >= n:
    sources = np.broadcast_to(np.arange(n), block.shape).copy()
    weights = block
  else:
    sources = np.argpartition(-block, k - 1, axis=-1)[..., :k]
    weights = np.take_along_axis(block, sources, axis=-1)
  total, kept_sum = block.sum(-1), weights.sum(-1)
  cut = np.count_nonzero(block, axis=-1) > k
  kept = np.where(cut, kept_sum / np.where(total > 0, total, 1), 1.0).astype(np.float32)
  scale = np.where(cut, 1 / np.where(kept_sum > 0, kept_sum, 1), 1.0)
  return sources, (weights * scale[..., None]).astype(np.float32), kept


def uint8_levels(weights: np.ndarray) -> np.ndarray:
  """Weights [..., m] (nonnegative) -> uint8 levels round(255 · w / row max)
  (all 0 for an all-zero row)."""
  weights = np.asarray(weights, np.float32)
  top = weights.max(-1, keepdims=True)
  return np.rint(255 * weights / np.where(top > 0, top, 1)).astype(np.uint8)


def pack_rows(block: np.ndarray, k: int, dtype: str = "float16"
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """Packs `block` [..., n, n] (rows summing to 1 or all 0).

  Args:
    block: the graphs; the last axis is the source word, the one before it
      the target word.
    k: most sources a row keeps.
    dtype: of the stored weights, one of VALUE_DTYPES.

  Returns:
    counts int64 [R], sources int64 [V], values [V] of `dtype`, and the share
    of each nonzero row's weight on the sources it keeps, float32 [rows with
    weight] (1 for a row stored exactly).
  """
  if dtype not in VALUE_DTYPES:
    raise ValueError(f"dtype must be one of {list(VALUE_DTYPES)}, got {dtype!r}")
  block = np.asarray(block, np.float32)
  sources, weights, kept = top_k_rows(block, k)
  values = uint8_levels(weights) if dtype == "uint8" else weights.astype(dtype)
  stored = values > 0
  # levels rounded to 0 drop their weight too (their share of the kept rows)
  dropped = np.where(stored, 0, weights).sum(-1)
  kept = np.where(dropped > 0, kept * (1 - dropped), kept)
  m = stored.shape[-1]
  stored, nonzero = stored.reshape(-1, m), block.reshape(-1, block.shape[-1]).any(-1)
  return (stored.sum(-1), sources.reshape(-1, m)[stored], values.reshape(-1, m)[stored],
          kept.reshape(-1)[nonzero].astype(np.float32))


def unpack_rows(counts, sources, values, shape: tuple, dtype="float32") -> np.ndarray:
  """The dense block [*shape] (last two axes n, n) of `dtype` from packed
  rows (`pack_rows`); uint8 levels are read back as q / Σ q per row."""
  counts = np.asarray(counts, np.int64)
  n = shape[-1]
  dense = np.zeros((counts.size, n), dtype)
  row = np.repeat(np.arange(counts.size), counts)
  values = np.asarray(values)
  if values.dtype == np.uint8:
    levels = values.astype(np.float32)
    values = levels / np.bincount(row, levels, minlength=counts.size)[row]
  dense[row, np.asarray(sources, np.int64)] = values
  return dense.reshape(shape)
