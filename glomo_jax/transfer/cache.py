"""Word-level graphs of a dataset, computed once and cached on disk.

Computing graphs on the fly (`align.word_graphs` per batch) costs a predictor
forward pass per step; the cache does it once per (export, dataset, options)
and memory-maps the result.

Key: sha256 of the canonical JSON of {format_version, export content_sha256
(``predictor.manifest['content_sha256']``: params, tokenizer and config),
tokenizer fingerprint, dataset fingerprint (`dataset_fingerprint`: every word
of every example, in order), text fingerprint (`text_fingerprint` of the raw
texts and word spans the predictor reads, or null when it reads the words
joined by spaces), max_words, max_pieces, self_loops, dtype, and top_k
when given}. The cache lives in ``<root>/<key>/``, so another export,
dataset or option never reads a stale one; the manifest inside is checked
against the request too (a difference is damage: the cache is built again).

Format (format_version 1), in ``<root>/<key>/``::

  meta.json     the key's inputs, num_examples, graph_prefix [2L, K], dtype,
                total_values, created
  lengths.npy   int32 [N]: n_i = min(words of example i, max_words)
  offsets.npy   int64 [N + 1]: example i's values are graphs.npy[offsets[i]:
                offsets[i+1]] = its [2L, K, n_i, n_i] block, C order
  graphs.npy    1-d array, 'float16' (default) or 'float32'

Sparse (``top_k=k``, format_version 2): each row keeps at most its k
largest sources and only nonzero ones (`sparse_rows`), packed end to end:

  counts.npy    uint8 (k ≤ 255) or uint16 [R]: the sources each row keeps;
                example i's rows are [row_offsets_i, row_offsets_{i+1}) with
                row_offsets = 2L·K·cumsum(n), C order over [2L, K, n_i]
  indices.npy   uint8 (max_words ≤ 256) or uint16, 1-d: the kept sources
  graphs.npy    their weights, 'float16', 'float32' or 'uint8' (levels,
                read back as q / Σ q per row); example i's values are
                [offsets[i]:offsets[i+1]], offsets counting kept sources

Both formats also hold ``checksums.npy`` (uint32 [N], each example's CRC-32)
and record every file's size in meta.json (`cache_files`): a cache that is
cut short, has a file missing, altered or swapped, or was made before these
records, is found when it is opened (or, inside the large files, when an
example is first read), removed and built again; it is never read as
graphs.

A row with more than k nonzero sources loses the rest and is renormalised
to sum to 1 (meta.json records the share of weight the kept sources had:
`mass_kept` mean and minimum over the nonzero rows); where k covers every
nonzero source a float cache gives the dense cache's values bit for bit.
Bytes per row: its count (1 or 2) plus (1 or 2) + (2, 4 or 1) per kept
source, against n_i · 2 dense (float16).

Only the n_i × n_i block of real words is stored (rows and columns of padding
words are exactly 0 on the fly), so short examples cost little. float32
reproduces `word_graphs` to float32 rounding (examples are computed
`batch_size` at a time, shortest first); float16 halves the size,
with a relative error ≤ 2⁻¹¹ per value (values below 2⁻¹⁴ ≈ 6e-5 are stored
as subnormals, absolute error ≤ 2⁻²⁵). The directory is written under a
temporary name and renamed, so a reader never sees a partial cache; a build
that fails (no space, no permission) leaves no partial cache and raises an
OSError naming it.
"""
from __future__ import annotations

import datetime
import hashlib
import itertools
import json
import logging
import os
import shutil
import struct
import time
import tokenize
import uuid
from typing import Sequence

import jax
import numpy as np

from glomo_jax.errors import InputError, write_failed
from glomo_jax.transfer.align import (checked_tokenizer, device_unit_graphs, encode_texts,
                                      encode_word_lists, unit_width)
from glomo_jax.transfer.cache_files import (CHECKSUMS, COUNTS, GRAPHS, INDICES, LENGTHS, META,
                                            OFFSETS, DenseStore, SparseStore, crc32,
                                            file_damage, file_record, remove_cache, sealed)
from glomo_jax.transfer.sparse_rows import unpack_rows

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1          # dense
SPARSE_FORMAT_VERSION = 2   # rows of kept sources (format 1's fixed k slots a row is gone)
DTYPES = ("float16", "float32")
SPARSE_DTYPES = DTYPES + ("uint8",)


def dataset_fingerprint(word_lists: Sequence[Sequence[str]]) -> str:
  """sha256 (hex) of a dataset's word lists: their number, and per example
  the number of words and each word's UTF-8 bytes, all length-prefixed."""
  digest = hashlib.sha256(struct.pack(">Q", len(word_lists)))
  for words in word_lists:
    words = list(words)
    digest.update(struct.pack(">Q", len(words)))
    for word in words:
      data = word.encode("utf-8")
      digest.update(struct.pack(">Q", len(data)))
      digest.update(data)
  return digest.hexdigest()


def text_fingerprint(texts: Sequence[str], word_spans: Sequence) -> str:
  """sha256 (hex) of raw texts and their words' character spans."""
  digest = hashlib.sha256(struct.pack(">Q", len(texts)))
  for text, spans in zip(texts, word_spans):
    data = text.encode("utf-8")
    spans = np.ascontiguousarray(np.asarray(spans, ">i8").reshape(-1, 2))
    digest.update(struct.pack(">QQ", len(data), spans.size))
    digest.update(data)
    digest.update(spans.tobytes())
  return digest.hexdigest()


def _request(predictor, tokenizer, word_lists, max_words, max_pieces, self_loops,
             dtype, texts=None, word_spans=None, top_k=None) -> dict:
  content = (getattr(predictor, "manifest", None) or {}).get("content_sha256")
  if not content:
    raise ValueError("the predictor has no manifest['content_sha256'] (load it with "
                     "glomo_jax.export.load_graph_predictor): a cache cannot be keyed")
  if top_k is not None and not 1 <= int(top_k) <= 65535:
    raise ValueError(f"top_k must be None (dense) or in [1, 65535], got {top_k}")
  if dtype not in (DTYPES if top_k is None else SPARSE_DTYPES):
    raise ValueError(f"dtype must be one of {list(DTYPES)} (or 'uint8' with top_k), "
                     f"got {dtype!r}")
  sparse = {} if top_k is None else {"top_k": int(top_k)}   # dense keys stay as before
  version = FORMAT_VERSION if top_k is None else SPARSE_FORMAT_VERSION
  return {**sparse, "format_version": version, "content_sha256": content,
          "tokenizer_fingerprint": tokenizer.fingerprint,
          "dataset_fingerprint": dataset_fingerprint(word_lists),
          "text_fingerprint": (None if texts is None
                               else text_fingerprint(texts, word_spans)),
          "max_words": int(max_words),
          "max_pieces": None if max_pieces is None else int(max_pieces),
          "self_loops": bool(self_loops), "dtype": dtype}


def cache_key(request: dict) -> str:
  """sha256 (hex) of the canonical JSON of a request (module docstring)."""
  canonical = json.dumps(request, sort_keys=True, separators=(",", ":"))
  return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


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
  request = _request(predictor, tokenizer, word_lists, max_words, max_pieces,
                     self_loops, dtype, texts, word_spans, top_k)
  key = cache_key(request)
  path = os.path.join(os.path.abspath(root), key)
  if os.path.lexists(path):
    try:
      return _opened(path, request)
    except InputError as e:
      logger.warning("%s; building it again", e)
      remove_cache(path)
  _build(path, request, predictor, tokenizer, word_lists, batch_size, texts, word_spans)
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



def batch_width(lengths, max_words: int) -> int:
  """The word axis W of one build batch (`align.unit_width`): its longest
  example rounded up to a multiple of 32 on a CPU, of 128 on an accelerator
  (few shapes to compile), at most max_words."""
  return unit_width(int(np.max(lengths)), max_words, 32)


def _build(path, request, predictor, tokenizer, word_lists, batch_size, texts=None,
           word_spans=None, progress_every_s: float = 30.0) -> None:
  config = predictor.config
  prefix = (2 * config.num_graph_layers, config.num_heads)
  per = prefix[0] * prefix[1]
  max_words = request["max_words"]
  lengths = np.array([min(len(words), max_words) for words in word_lists], np.int32)
  k = request.get("top_k")
  parent = os.path.dirname(path)
  tmp = os.path.join(parent, f".{os.path.basename(path)}.tmp-{uuid.uuid4().hex[:12]}")
  try:
    os.makedirs(parent, exist_ok=True)
    os.mkdir(tmp)
  except OSError as e:
    raise write_failed(path, e) from e
  try:
    store = (DenseStore(tmp, lengths, per, request["dtype"]) if k is None else
             SparseStore(tmp, lengths, per, request["dtype"], k, max_words))
    # shortest texts first: batches of similar length pad little and compile
    # few shapes (`batch_width`; the alignment costs O(words · pieces²) a graph)
    order = np.argsort(lengths, kind="stable")
    tokenizer = checked_tokenizer(predictor, tokenizer)
    cut = dict(max_pieces=request["max_pieces"])

    def dispatched():          # (rows, their graphs on the device, not waited for)
      for start in range(0, len(word_lists), batch_size):
        rows = order[start:start + batch_size]
        width = batch_width(lengths[rows], max_words)
        arrays = (encode_word_lists(tokenizer, [word_lists[i][:width] for i in rows], width, **cut)
                  if texts is None else
                  encode_texts(tokenizer, [texts[i] for i in rows],
                               [np.asarray(word_spans[i])[:width] for i in rows], width, **cut))
        yield rows, device_unit_graphs(predictor, arrays, width, request["self_loops"],
                                       dtype=store.fetch_dtype)

    # the host stores a batch while the device computes the next one
    began = last = time.perf_counter()
    done, previous = 0, None
    for current in itertools.chain(dispatched(), [None]):
      if previous is not None:
        rows, graphs = previous
        graphs = np.asarray(jax.device_get(graphs))
        for row, i in enumerate(rows):
          n = int(lengths[i])
          if graphs[row, ..., n:, :].any() or graphs[row, ..., :n, n:].any():
            raise RuntimeError("word_graphs put weight outside the example's words")
          store.put(i, graphs[row, ..., :n, :n])
        done += len(rows)
        if time.perf_counter() - last >= progress_every_s and done < len(word_lists):
          last = time.perf_counter()
          logger.info("graph cache: %d/%d examples, %.1f examples/s", done, len(word_lists),
                      done / (last - began))
      previous = current
    offsets, extra = store.finish()
    np.save(os.path.join(tmp, LENGTHS), lengths)
    np.save(os.path.join(tmp, OFFSETS), offsets)
    meta = dict(request, **extra, key=os.path.basename(path), num_examples=len(lengths),
                graph_prefix=list(prefix), total_values=int(offsets[-1]),
                files=file_record(tmp),
                created=datetime.datetime.now(datetime.timezone.utc).isoformat(
                    timespec="seconds"))
    with open(os.path.join(tmp, META), "w", encoding="utf-8") as f:
      json.dump(sealed(meta), f, indent=2, sort_keys=True)
    try:
      os.rename(tmp, path)
    except OSError:
      if not os.path.isfile(os.path.join(path, META)):  # not a concurrent builder
        raise
      shutil.rmtree(tmp, ignore_errors=True)
  except OSError as e:
    shutil.rmtree(tmp, ignore_errors=True)
    raise write_failed(path, e, "no partial cache was left") from e
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
