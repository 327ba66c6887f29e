"""Word-level graphs of a dataset, computed once and cached on disk.

Computing graphs on the fly (`unit_graphs.word_graphs` per batch) costs a
predictor forward pass per step; the cache does it once per (export,
dataset, options) and memory-maps the result. The parts:

* `cache_key`: what the graphs depend on, hashed into the cache's name;
* `cache_stores`: the two on-disk formats (dense; each row's top k sources);
* `cache_files`: the file names and the integrity records;
* `cache_build`: building a cache (host and device overlapped);
* here: `cached_word_graphs` (open, or build then open) and the reader,
  `WordGraphCache`.

Integrity: a cache that is cut short, has a file missing, altered or
swapped, or was made before the integrity records, is found when it is
opened (or, inside the large files, when an example is first read), removed
and built again; it is never read as graphs. Its meta.json must also hold
the request its name hashes.

Only the n_i × n_i block of real words is stored (rows and columns of padding
words are exactly 0 on the fly), so short examples cost little. float32
reproduces `word_graphs` to float32 rounding (examples are computed
`batch_size` at a time, shortest first); float16 halves the size,
with a relative error ≤ 2⁻¹¹ per value (values below 2⁻¹⁴ ≈ 6e-5 are stored
as subnormals, absolute error ≤ 2⁻²⁵). A build that fails (no space, no
permission) leaves no partial cache and raises an OSError naming it.
"""
from __future__ import annotations

import json
import logging
import os
import tokenize
from typing import Sequence

import numpy as np

from glomo_jax.errors import InputError
from glomo_jax.graphs.cache_build import build_cache
from glomo_jax.graphs.cache_files import (CHECKSUMS, COUNTS, GRAPHS, INDICES, LENGTHS, META,
                                          OFFSETS, crc32, file_damage, remove_cache)
from glomo_jax.graphs.cache_key import cache_key, cache_request
from glomo_jax.graphs.sparse_rows import unpack_rows

logger = logging.getLogger(__name__)


class WordGraphCache:
  """An opened cache (read-only, memory-mapped).

  Attributes:
    path: its directory; meta: the parsed meta.json; lengths: int32 [N];
    max_words: W; graph_prefix: (2L, K).

  Raises (opening, and `get`):
    InputError: a damaged cache (module docstring), "damaged graph cache".
  """

  def __init__(self, path: str):
    self.path = path
    try:
      self._open()
    except InputError:
      raise
    except (OSError, ValueError, EOFError, KeyError, TypeError, AttributeError,
            SyntaxError, tokenize.TokenError) as e:   # the last two: a .npy header
      raise self._damaged(f"{type(e).__name__}: {e}") from None

  def _damaged(self, problem: str) -> InputError:
    return InputError(self.path, f"damaged graph cache: {problem}")

  def _open(self) -> None:
    path = self.path
    with open(os.path.join(path, META), encoding="utf-8") as f:
      self.meta = json.load(f)
    damage = file_damage(path, self.meta)
    if damage is not None:
      raise self._damaged(damage)
    self.lengths = np.load(os.path.join(path, LENGTHS))
    self.offsets = np.load(os.path.join(path, OFFSETS))
    self._checksums = np.load(os.path.join(path, CHECKSUMS))
    self._verified = np.zeros(len(self.lengths), bool)    # examples whose CRC was checked
    self._values = np.load(os.path.join(path, GRAPHS), mmap_mode="r")
    self.top_k = self.meta.get("top_k")
    self.max_words = int(self.meta["max_words"])
    self.graph_prefix = tuple(self.meta["graph_prefix"])
    per = int(np.prod(self.graph_prefix))
    n = self.lengths.astype(np.int64)
    self.row_offsets = np.concatenate([[0], np.cumsum(per * n)])
    if self.top_k is None:
      self._indices = self._counts = None
      expected = np.concatenate([[0], np.cumsum(per * n ** 2)])
    else:
      self._indices = np.load(os.path.join(path, INDICES), mmap_mode="r")
      self._counts = np.load(os.path.join(path, COUNTS), mmap_mode="r")
      # each example's first value = the kept sources of the rows before it
      # (clipped: counts of the wrong length are reported as corrupt below)
      kept = np.concatenate([[0], np.cumsum(self._counts, dtype=np.int64)])
      expected = kept[np.minimum(self.row_offsets, len(kept) - 1)]
    if (len(self.lengths) != self.meta["num_examples"] or
        self._checksums.shape != self.lengths.shape or
        not np.array_equal(self.offsets, expected) or
        self._values.shape != (int(expected[-1]),) or
        str(self._values.dtype) != self.meta["dtype"] or
        (self._counts is not None and (self._counts.shape != (int(self.row_offsets[-1]),) or
                                       self._indices.shape != self._values.shape))):
      raise self._damaged(f"its arrays do not match {META}")

  @property
  def float_dtype(self) -> str:
    """The stored dtype, or float16 for uint8 levels: what `get` returns
    without converting stored floats."""
    return "float16" if self.meta["dtype"] == "uint8" else self.meta["dtype"]

  @property
  def nbytes(self) -> int:
    """Bytes of the stored graphs (values; sparse: also sources and counts)."""
    if self.top_k is None:
      return self._values.nbytes
    return self._values.nbytes + self._indices.nbytes + self._counts.nbytes

  def __len__(self) -> int:
    return len(self.lengths)

  def __repr__(self):
    sparse = "" if self.top_k is None else f", top {self.top_k} sources a row"
    return (f"WordGraphCache({len(self)} examples, W={self.max_words}, "
            f"{self.meta['dtype']}{sparse}, path={self.path!r})")

  def get(self, indices, length: int | None = None, dtype="float32"
          ) -> tuple[np.ndarray, np.ndarray]:
    """Graphs and word masks of some examples.

    Args:
      indices: int sequence / array (negative counts from the end), or a
        slice.
      length: W of the output (default max_words); at least the longest of
        these examples (a batch's padded length: only it is allocated).
      dtype: a float dtype of the graphs returned; `float_dtype` copies
        stored floats without converting them.

    Returns:
      graphs [n, 2L, K, W, W] of `dtype` (zero outside each example's words)
      and mask bool [n, W].
    """
    if not np.issubdtype(np.dtype(dtype), np.floating):
      raise ValueError(f"graphs are read as floats, not {dtype}")
    if not isinstance(indices, slice):
      indices = np.asarray(indices, dtype=np.int64).reshape(-1)
    indices = np.arange(len(self))[indices]           # negatives, bounds checked
    w = self.max_words if length is None else int(length)
    longest = int(self.lengths[indices].max(initial=0))
    if longest > w:
      raise ValueError(f"length {w} is shorter than an example's {longest} words")
    graphs = np.zeros((len(indices), *self.graph_prefix, w, w), dtype)
    mask = np.zeros((len(indices), w), bool)
    for row, i in enumerate(indices):
      n = int(self.lengths[i])
      values = self._values[self.offsets[i]:self.offsets[i + 1]]
      if self.top_k is None:
        self._verify(i, values)
        graphs[row, ..., :n, :n] = values.reshape(*self.graph_prefix, n, n)
      else:
        counts = self._counts[self.row_offsets[i]:self.row_offsets[i + 1]]
        sources = self._indices[self.offsets[i]:self.offsets[i + 1]]
        self._verify(i, counts, sources, values)
        graphs[row, ..., :n, :n] = unpack_rows(counts, sources, values,
                                               (*self.graph_prefix, n, n), dtype)
      mask[row, :n] = True
    return graphs, mask

  def _verify(self, i: int, *stored: np.ndarray) -> None:
    """Checks example i's stored arrays against its CRC (once per process);
    a mismatch removes the cache (the next run builds it again) and raises."""
    if self._verified[i]:
      return
    if crc32(*stored) != int(self._checksums[i]):
      remove_cache(self.path)
      raise self._damaged(f"the stored graphs of example {i} differ from their checksum; "
                          "the cache was removed and is built again by the next run")
    self._verified[i] = True


def cached_word_graphs(root: str, predictor, word_lists: Sequence[Sequence[str]],
                       max_words: int, *, tokenizer=None, batch_size: int = 32,
                       dtype: str = "float16", max_pieces: int | None = None,
                       self_loops: bool = False, texts: Sequence[str] | None = None,
                       word_spans: Sequence | None = None,
                       top_k: int | None = None) -> WordGraphCache:
  """Opens the cache of this (export, dataset, options), building it if absent.

  Args:
    root: directory holding caches (one subdirectory per key).
    predictor: a loaded `ExportedGraphPredictor` (its manifest keys the cache).
    word_lists: the dataset, N lists of words (a sequence: read twice).
    max_words: W.
    tokenizer: None = ``predictor.tokenizer``.
    batch_size: examples per predictor call while building.
    dtype: 'float16' or 'float32' storage, or with top_k 'uint8' levels
      (module docstring).
    max_pieces, self_loops: as for `align.word_graphs`.
    texts, word_spans: the raw text of each example and its words' [start,
      end) characters in it (int [n_i, 2]); given, the predictor reads the
      texts as written and its pieces go to words by characters
      (`align.text_graphs`); None: it reads the words joined by spaces.
    top_k: None stores the graphs dense; k stores each row's k largest
      sources (module docstring: exact where k covers a row's nonzeros).

  Returns:
    the opened `WordGraphCache`; ``cache.get(range(i, i + b))`` equals
    ``word_graphs(predictor, tokenizer, word_lists[i:i + b], max_words, ...)``
    (to float32 rounding for float32).

  A damaged cache (module docstring) is removed with a warning and built
  again.

  Raises:
    ValueError: no content hash in the predictor, or an unknown dtype.
    OSError: the build could not be written (naming the cache; no partial
      cache is left).
  """
  tokenizer = tokenizer if tokenizer is not None else predictor.tokenizer
  if tokenizer is None:
    raise ValueError("cached_word_graphs needs a tokenizer (the predictor has none)")
  if batch_size < 1:
    raise ValueError(f"batch_size must be >= 1, got {batch_size}")
  if (texts is None) != (word_spans is None):
    raise ValueError("give both texts and word_spans, or neither")
  if texts is not None:
    if not len(texts) == len(word_spans) == len(word_lists):
      raise ValueError(f"{len(word_lists)} word lists, {len(texts)} texts and "
                       f"{len(word_spans)} span lists must be as many")
    bad = next((i for i, (w, s) in enumerate(zip(word_lists, word_spans))
                if len(w) != len(s)), None)
    if bad is not None:
      raise ValueError(f"example {bad}: {len(word_lists[bad])} words but "
                       f"{len(word_spans[bad])} spans")
  request = cache_request(predictor, tokenizer, word_lists, max_words, max_pieces,
                          self_loops, dtype, texts, word_spans, top_k)
  key = cache_key(request)
  path = os.path.join(os.path.abspath(root), key)
  if os.path.lexists(path):
    try:
      return _opened(path, request)
    except InputError as e:
      logger.warning("%s; building it again", e)
      remove_cache(path)
  build_cache(path, request, predictor, tokenizer, word_lists, batch_size, texts,
              word_spans)
  return _opened(path, request)


def _opened(path: str, request: dict) -> WordGraphCache:
  """The cache at `path`, checked (`WordGraphCache`) and its meta.json
  against `request` (whose hash is its name: a difference is damage)."""
  cache = WordGraphCache(path)
  stored = {name: cache.meta.get(name) for name in request}
  if stored != request:
    differ = sorted(name for name in request if stored[name] != request[name])
    raise cache._damaged(f"its {META} records other {', '.join(differ)} than its name's "
                         "request")
  return cache
