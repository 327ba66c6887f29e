"""File helpers shared by every reader: one opener for compressed files, and
`round_up` for padded lengths."""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
from typing import BinaryIO, TextIO

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
