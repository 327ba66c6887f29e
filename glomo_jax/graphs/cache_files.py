"""The files of a word-graph cache (`glomo_jax.graphs.cache`): their names,
and the records that let a damaged cache be found.

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

import numpy as np

from glomo_jax.io import file_sha256

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
