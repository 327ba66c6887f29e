"""File helpers shared by every reader and writer: one opener for
compressed files, an atomic JSON writer, and `round_up` for padded lengths."""
from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
from typing import Any, BinaryIO, TextIO

COMPRESSION_SUFFIXES = (".gz", ".xz", ".bz2")


def open_binary(path: str | os.PathLike) -> BinaryIO:
  """Opens a plain, .gz, .xz or .bz2 file for reading bytes (decompressed)."""
  path = os.fspath(path)
  if path.endswith(".gz"):
    return gzip.open(path, "rb")
  if path.endswith(".xz"):
    return lzma.open(path, "rb")
  if path.endswith(".bz2"):
    return bz2.open(path, "rb")
  return open(path, "rb")


def open_text(path: str | os.PathLike, errors: str = "strict") -> TextIO:
  """`open_binary` decoded as UTF-8 (`errors` as for `bytes.decode`)."""
  return io.TextIOWrapper(open_binary(path), encoding="utf-8", errors=errors)


def strip_compression(path: str) -> str:
  """The file name without a .gz / .xz / .bz2 suffix."""
  for suffix in COMPRESSION_SUFFIXES:
    if path.endswith(suffix):
      return path[:-len(suffix)]
  return path


def round_up(n: int, multiple: int) -> int:
  """The smallest multiple of `multiple` that is >= n (n >= 0, multiple >= 1)."""
  if multiple < 1:
    raise ValueError(f"multiple must be >= 1, got {multiple}")
  return -(-n // multiple) * multiple


def write_json(path: str | os.PathLike, value: Any, indent: int | None = 1) -> None:
  """Writes `value` as UTF-8 JSON (non-ASCII kept; unknown types via str)
  through a temporary file, so a reader never sees half a file."""
  path = os.fspath(path)
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = path + ".tmp"
  with open(tmp, "w", encoding="utf-8") as f:
    json.dump(value, f, indent=indent, ensure_ascii=False, default=str)
    f.write("\n")
  os.replace(tmp, path)
