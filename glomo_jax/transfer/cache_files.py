"""The files of a word-graph cache (`glomo_jax.transfer.cache`): their names,
the stores that write the graphs, and the records that let a damaged cache
be found.

Integrity (in meta.json, ``files``): every file's size in bytes, and the
sha256 of the small index files (lengths.npy, offsets.npy, checksums.npy);
``meta_sha256``: the sha256 of meta.json's other keys (canonical JSON);
checked whenever a cache is opened. checksums.npy holds, per example, the
CRC-32 of its stored bytes (dense: its slice of graphs.npy; sparse: its
counts, then sources, then weights), checked the first time a process reads
that example; so damage inside the large files is found when it would be
read, without reading the whole cache on every open.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
import zlib

import jax
import numpy as np

from glomo_jax.io import file_sha256
from glomo_jax.transfer.sparse_rows import pack_rows

META, LENGTHS, OFFSETS, GRAPHS = "meta.json", "lengths.npy", "offsets.npy", "graphs.npy"
INDICES, COUNTS, CHECKSUMS = "indices.npy", "counts.npy", "checksums.npy"
HASHED = (LENGTHS, OFFSETS, CHECKSUMS)          # small: hashed whole on every open


def crc32(*parts: np.ndarray) -> int:
  """CRC-32 of the parts' bytes, one after the other (C order)."""
  crc = 0
  for part in parts:
    crc = zlib.crc32(memoryview(np.ascontiguousarray(part)).cast("B"), crc)
  return crc


def file_record(directory: str) -> dict:
  """{name: {"bytes", and for `HASHED` files "sha256"}} of the cache files
  in `directory` (meta.json left out)."""
  record = {}
  for name in sorted(os.listdir(directory)):
    if name == META:
      continue
    path = os.path.join(directory, name)
    record[name] = {"bytes": os.path.getsize(path)}
    if name in HASHED:
      record[name]["sha256"] = file_sha256(path)
  return record


def _meta_sha256(meta: dict) -> str:
  canonical = json.dumps({k: v for k, v in meta.items() if k != "meta_sha256"},
                         sort_keys=True, separators=(",", ":"))
  return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def sealed(meta: dict) -> dict:
  """`meta` with its ``meta_sha256``."""
  return dict(meta, meta_sha256=_meta_sha256(meta))


def file_damage(directory: str, meta) -> str | None:
  """What differs between the cache in `directory` and its parsed meta.json
  (its hash, and its `file_record`), in words; None when nothing does."""
  if not isinstance(meta, dict):
    return f"{META} does not hold a JSON object"
  record = meta.get("files")
  if not isinstance(record, dict) or CHECKSUMS not in record:
    return "it has no integrity record (made by an older glomo_jax)"
  if meta.get("meta_sha256") != _meta_sha256(meta):
    return f"{META} differs from its sha256 hash"
  for name, entry in sorted(record.items()):
    path = os.path.join(directory, name)
    if not os.path.isfile(path):
      return f"{name} is missing"
    if not isinstance(entry, dict):
      return f"{name} has no size recorded"
    size = os.path.getsize(path)
    if size != entry.get("bytes"):
      return f"{name} holds {size} bytes, not the {entry.get('bytes')} written (cut short?)"
    if name in HASHED and file_sha256(path) != entry.get("sha256"):
      return f"{name}'s sha256 hash differs from the one recorded"
  return None


def remove_cache(path: str) -> None:
  """Removes a cache directory: renamed aside first (one step, so no other
  process opens it half-deleted), then deleted."""
  aside = os.path.join(os.path.dirname(path),
                       f".{os.path.basename(path)}.removed-{uuid.uuid4().hex[:12]}")
  try:
    os.rename(path, aside)
  except FileNotFoundError:
    return                           # already removed (another process)
  shutil.rmtree(aside, ignore_errors=True)


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
