"""File helpers shared by every reader and writer: one opener for
compressed files, the one JSON-lines reader, atomic writers of files and
directories, and `round_up` for padded lengths.

Readers: `open_binary` / `open_text` turn what a damaged or cut-short file
raises while it is read (``EOFError`` of a truncated .gz / .xz / .bz2, the
decompressors' own errors, bytes that are not UTF-8) into an `InputError`
naming the file. `json_lines` reads a JSON-lines file; `decode_utf8`
decodes bytes with an error that names the file and line.

Writers: `write_bytes` and `write_json` write a temporary sibling and rename
it into place, so a reader never sees half a file; a failed write (no space,
no permission) removes the temporary file, leaves the previous file as it
was, and raises an OSError naming the file (`errors.write_failed`).
`write_directory_atomically` does the same for a directory (exports, graph
and token-stream caches).
"""
from __future__ import annotations

import bz2
import contextlib
import gzip
import hashlib
import io
import json
import lzma
import os
import shutil
import uuid
import zlib
from typing import Any, BinaryIO, Callable, Iterator, TextIO

from glomo_jax.errors import InputError, write_failed

COMPRESSION_SUFFIXES = (".gz", ".xz", ".bz2")
_OPENERS = {".gz": gzip.open, ".xz": lzma.open, ".bz2": bz2.open}
# what a decompressor raises on a damaged or cut-short stream (gzip's
# BadGzipFile and bz2's "Invalid data stream" are OSErrors)
_DAMAGED = (EOFError, lzma.LZMAError, zlib.error, OSError)


def _damaged(path: str, error: BaseException) -> InputError:
  if isinstance(error, EOFError):
    problem = ("the compressed file ends before its end-of-stream marker: it was cut "
               "short (an interrupted download or copy?); fetch it again")
  else:
    problem = (f"not a readable {os.path.splitext(path)[1]} file, or damaged "
               f"({type(error).__name__}: {error})")
  return InputError(path, problem)


class _CheckedStream(io.RawIOBase):
  """A decompressing file whose read errors name the file (`_damaged`)."""

  def __init__(self, stream: BinaryIO, path: str):
    super().__init__()
    self._stream, self._path = stream, path

  def readable(self) -> bool:
    return True

  def readinto(self, buffer) -> int:
    try:
      return self._stream.readinto(buffer)
    except InputError:
      raise
    except _DAMAGED as e:
      raise _damaged(self._path, e) from e

  def close(self) -> None:
    if not self.closed:
      self._stream.close()
    super().close()


class _CheckedText(io.TextIOWrapper):
  """UTF-8 text whose decoding errors name the file."""

  def __init__(self, buffer: BinaryIO, path: str, errors: str):
    super().__init__(buffer, encoding="utf-8", errors=errors)
    self._path = path

  @contextlib.contextmanager
  def _checked(self):
    try:
      yield
    except UnicodeDecodeError as e:
      bad = e.object[e.start:e.start + 1].hex()
      raise InputError(self._path, f"not UTF-8 text (byte 0x{bad}: {e.reason}); save "
                       "it as UTF-8") from None

  def read(self, size: int | None = -1) -> str:
    with self._checked():
      return super().read(size)

  def readline(self, size: int = -1) -> str:
    with self._checked():
      return super().readline(size)

  def __next__(self) -> str:
    with self._checked():
      return super().__next__()


def open_binary(path: str | os.PathLike) -> BinaryIO:
  """Opens a plain, .gz, .xz or .bz2 file for reading bytes (decompressed).

  Raises:
    FileNotFoundError: no such file (when opened).
    InputError: while reading, a compressed file that is damaged or cut short.
  """
  path = os.fspath(path)
  opener = _OPENERS.get(os.path.splitext(path)[1])
  if opener is None:
    return open(path, "rb")
  return io.BufferedReader(_CheckedStream(opener(path, "rb"), path), 1 << 16)


def open_text(path: str | os.PathLike, errors: str = "strict") -> TextIO:
  """`open_binary` decoded as UTF-8 (`errors` as for `bytes.decode`); with
  'strict', bytes that are not UTF-8 raise an InputError naming the file."""
  return _CheckedText(open_binary(path), os.fspath(path), errors)


def decode_utf8(data: bytes, where, line: int | None = None, errors: str = "strict",
                remedy: str = "save it as UTF-8") -> tuple[str, bool]:
  """UTF-8 bytes -> (text, whether bytes were replaced). With `errors`
  'strict', bytes that are not UTF-8 raise an InputError naming `where` and
  `line` and ending with `remedy`; with 'replace' they become U+FFFD."""
  try:
    return data.decode("utf-8"), False
  except UnicodeDecodeError as e:
    if errors == "strict":
      raise InputError(where, f"not valid UTF-8 ({e.reason} at byte {e.start}); {remedy}",
                       line=line) from e
    return data.decode("utf-8", errors="replace"), True


_JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number",
               bool: "true or false", type(None): "null"}


def json_lines(path: str | os.PathLike, errors: str = "strict",
               remedy: str = "save it as UTF-8") -> Iterator[tuple[int, dict, bool]]:
  """(line number, JSON object, whether non-UTF-8 bytes were replaced) of
  every non-blank line of a JSON-lines file (plain, .gz, .xz or .bz2);
  `errors` and `remedy` as for `decode_utf8`.

  Raises:
    InputError: one line naming the file and the line: a line that is not a
      JSON object ("not a JSON object (invalid JSON: …)", "not a JSON object
      but an array"), bytes that are not UTF-8 ('strict'); or a file that is
      damaged or cut short (`open_binary`).
  """
  path = os.fspath(path)
  with open_binary(path) as f:
    for number, raw in enumerate(f, 1):
      line, replaced = decode_utf8(raw, path, number, errors, remedy)
      if not line.strip():
        continue
      try:
        record = json.loads(line)
      except (ValueError, RecursionError) as e:   # JSONDecodeError, too long an int
        raise InputError(path, f"not a JSON object (invalid JSON: {e})", line=number) from None
      if not isinstance(record, dict):
        kind = _JSON_KINDS.get(type(record), type(record).__name__)
        raise InputError(path, f"not a JSON object but {kind}", line=number)
      yield number, record, replaced


def file_sha256(path: str | os.PathLike) -> str:
  """The sha256 (hex) of a file's bytes, read in blocks."""
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


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


def write_atomically(path: str | os.PathLike, write: Callable[[BinaryIO], Any]) -> None:
  """Calls `write(f)` on a temporary sibling of `path` opened for bytes,
  then renames it to `path` (module docstring: on failure nothing changes)."""
  path = os.fspath(path)
  tmp = f"{path}.tmp{os.getpid()}"
  try:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(tmp, "wb") as f:
      write(f)
    os.replace(tmp, path)
  except OSError as e:
    with contextlib.suppress(OSError):
      os.remove(tmp)
    kept = "the previous file is unchanged" if os.path.exists(path) else ""
    raise write_failed(path, e, kept) from e


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
  """Writes `data` to `path` atomically (`write_atomically`)."""
  write_atomically(path, lambda f: f.write(data))


def write_json(path: str | os.PathLike, value: Any, indent: int | None = 1) -> None:
  """Writes `value` as UTF-8 JSON (non-ASCII kept; unknown types via str),
  atomically (`write_atomically`)."""
  text = json.dumps(value, indent=indent, ensure_ascii=False, default=str) + "\n"
  write_bytes(path, text.encode("utf-8"))


def write_directory_atomically(path: str | os.PathLike, fill: Callable[[str], Any], *,
                               kept: str | Callable[[], str] = "", marker: str | None = None,
                               replace: bool = False,
                               check: Callable[[], Any] | None = None) -> None:
  """Calls `fill(tmp)` on a new, empty temporary sibling directory of `path`,
  then renames it to `path`, so a reader never sees a partial directory.
  Whatever fails, the temporary directory is removed.

  Args:
    path: the directory to publish.
    fill: writes the directory's files into the directory it is given.
    kept: what the caller's earlier output is when writing fails (in the
      error, `errors.write_failed`); a callable is asked at that moment.
    marker: a file that a complete `path` holds: when the rename fails and
      `path` holds it, another process published the same directory first
      and this one is dropped.
    replace: a non-empty directory at `path` is moved aside, replaced, then
      removed (put back if the rename fails); else the rename fails on it.
    check: called after `fill`, before the rename (e.g. to refuse to replace
      what has appeared at `path` meanwhile); its errors are raised as they are.

  Raises:
    OSError: naming `path` (`errors.write_failed`): the temporary directory
      could not be made, `fill` raised an OSError, or the rename failed.
  """
  path = os.fspath(path)
  parent, name = os.path.split(os.path.abspath(path))
  tmp = os.path.join(parent, f".{name}.tmp-{uuid.uuid4().hex[:12]}")
  try:
    os.makedirs(parent, exist_ok=True)
    os.mkdir(tmp)
  except OSError as e:
    raise write_failed(path, e) from e
  def failed(error: OSError) -> OSError:
    return write_failed(path, error, kept() if callable(kept) else kept)

  try:
    try:
      fill(tmp)
    except OSError as e:
      raise failed(e) from e
    if check is not None:
      check()
    try:
      _publish(tmp, path, marker, replace)
    except OSError as e:
      raise failed(e) from e
  finally:
    shutil.rmtree(tmp, ignore_errors=True)


def _publish(tmp: str, path: str, marker: str | None, replace: bool) -> None:
  """Renames the complete directory `tmp` to `path` (`write_directory_atomically`)."""
  if replace and os.path.isdir(path) and os.listdir(path):
    parent, name = os.path.split(os.path.abspath(path))
    old = os.path.join(parent, f".{name}.old-{uuid.uuid4().hex[:12]}")
    os.rename(path, old)
    try:
      os.rename(tmp, path)
    except OSError:
      os.rename(old, path)
      raise
    shutil.rmtree(old, ignore_errors=True)
    return
  try:
    os.rename(tmp, path)   # onto nothing or an empty directory; never a full one
  except OSError:
    if marker is None or not os.path.isfile(os.path.join(path, marker)):
      raise
