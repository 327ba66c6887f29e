"""The two on-disk formats of a word-graph cache, as the stores that write them.

Dense (format_version 1), in ``<root>/<key>/``::

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

Both formats also hold ``checksums.npy`` (uint32 [N], each example's CRC-32
of its stored bytes; `cache_files`). A row with more than k nonzero sources
loses the rest and is renormalised to sum to 1 (meta.json records the share
of weight the kept sources had: `mass_kept` mean and minimum over the
nonzero rows); where k covers every nonzero source a float cache gives the
dense cache's values bit for bit. Bytes per row: its count (1 or 2) plus (1
or 2) + (2, 4 or 1) per kept source, against n_i · 2 dense (float16).
"""
from __future__ import annotations

import os

import jax
import numpy as np

from glomo_jax.graphs.cache_files import CHECKSUMS, COUNTS, GRAPHS, INDICES, crc32
from glomo_jax.graphs.sparse_rows import pack_rows


class DenseStore:
  """Writes each example's [2L, K, n, n] block at its place in graphs.npy.
  Graphs leave a CPU or GPU in the stored dtype (float16 rounded as numpy
  rounds, half the bytes); a TPU, which may flush its subnormals, sends float32."""

  def __init__(self, directory, lengths, per, dtype):
    self.directory = directory
    self.fetch_dtype = dtype if jax.default_backend() in ("cpu", "gpu") else "float32"
    self.offsets = np.concatenate([[0], np.cumsum(per * lengths.astype(np.int64) ** 2)])
    self.values = np.lib.format.open_memmap(os.path.join(directory, GRAPHS), mode="w+",
                                            dtype=dtype, shape=(int(self.offsets[-1]),))
    self.checksums = np.zeros(len(lengths), np.uint32)

  def put(self, i, block):
    stored = np.ascontiguousarray(block, dtype=self.values.dtype)
    self.values[self.offsets[i]:self.offsets[i + 1]] = stored.reshape(-1)
    self.checksums[i] = crc32(stored)

  def finish(self) -> tuple[np.ndarray, dict]:
    self.values.flush()
    del self.values
    np.save(os.path.join(self.directory, CHECKSUMS), self.checksums)
    return self.offsets, {}


class SparseStore:
  """Packs each example's rows (`pack_rows`). Examples arrive in build order
  and their sizes are known only once packed, so kept sources and weights
  are appended to scratch files, then copied into graphs.npy and
  indices.npy in example order."""

  fetch_dtype = "float32"            # `pack_rows` ranks and rounds float32 weights

  def __init__(self, directory, lengths, per, dtype, k, max_words):
    self.directory, self.dtype, self.k = directory, dtype, k
    self.source_dtype = np.uint8 if max_words <= 256 else np.uint16
    self.row_offsets = np.concatenate([[0], np.cumsum(per * lengths.astype(np.int64))])
    self.counts = np.lib.format.open_memmap(
        os.path.join(directory, COUNTS), mode="w+", dtype=np.uint8 if k <= 255 else np.uint16,
        shape=(int(self.row_offsets[-1]),))
    self.scratch = {name: open(os.path.join(directory, name + ".scratch"), "wb")
                    for name in (GRAPHS, INDICES)}
    self.where = np.zeros((len(lengths), 2), np.int64)     # scratch start, size
    self.checksums = np.zeros(len(lengths), np.uint32)
    self.appended = 0
    self.kept_sum, self.kept_min, self.kept_rows = 0.0, 1.0, 0

  def put(self, i, block):
    counts, sources, values, kept = pack_rows(block, self.k, self.dtype)
    counts = counts.astype(self.counts.dtype)
    sources = sources.astype(self.source_dtype)
    self.counts[self.row_offsets[i]:self.row_offsets[i + 1]] = counts
    self.scratch[GRAPHS].write(values.tobytes())
    self.scratch[INDICES].write(sources.tobytes())
    self.checksums[i] = crc32(counts, sources, values)
    self.where[i] = self.appended, values.size
    self.appended += values.size
    self.kept_sum, self.kept_rows = self.kept_sum + float(kept.sum()), self.kept_rows + kept.size
    self.kept_min = min(self.kept_min, float(kept.min(initial=1.0)))

  def finish(self) -> tuple[np.ndarray, dict]:
    self.counts.flush()
    del self.counts
    offsets = np.concatenate([[0], np.cumsum(self.where[:, 1])])
    for name, dtype in ((GRAPHS, self.dtype), (INDICES, self.source_dtype)):
      self.scratch[name].close()
      scratch = os.path.join(self.directory, name + ".scratch")
      out = np.lib.format.open_memmap(os.path.join(self.directory, name), mode="w+",
                                      dtype=dtype, shape=(int(offsets[-1]),))
      if offsets[-1]:
        packed = np.memmap(scratch, dtype=dtype, mode="r")
        for i, (start, size) in enumerate(self.where):
          out[offsets[i]:offsets[i + 1]] = packed[start:start + size]
        del packed
      out.flush()
      del out
      os.remove(scratch)
    np.save(os.path.join(self.directory, CHECKSUMS), self.checksums)
    return offsets, {"mass_kept": {"mean": self.kept_sum / max(self.kept_rows, 1),
                                   "min": self.kept_min, "rows": self.kept_rows}}
