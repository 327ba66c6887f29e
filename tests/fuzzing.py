"""Strategies and the property shared by the fuzz tests (`test_fuzz_*.py`).

A fuzz test starts from a valid input, damages it the way files get damaged
(`damaged_bytes`: cut short at an offset of each class, bytes overwritten,
inserted or appended, random bytes, an empty file, another encoding, a huge
line; `damaged_json`: one field of a valid record wrong: another type, out
of range, missing, or an extra one), and calls the reader. The property
(`read_or_input_error`): the reader returns data (which the test then
checks is valid) or raises an `InputError` whose message is one line naming
the input, and which the entry points print as that line (`cli.one_line`).

How many examples each test tries is `examples(n)`: n in the bounded CI
profile (tests/conftest.py: derandomized, no example database), n ×
`LONG_FACTOR` under ``HYPOTHESIS_PROFILE=long`` (random seeds; a failure
prints the seed that reproduces it).
"""
from __future__ import annotations

import bz2
import gzip
import json
import lzma
import math
import os

from hypothesis import strategies as st

from glomo_jax.errors import InputError

LONG_FACTOR = 100
HUGE_LINE = 300_000          # characters of the "huge line" damage


def examples(n: int) -> int:
  """Examples of a fuzz test: n, or n × LONG_FACTOR in the long profile."""
  return n * LONG_FACTOR if os.environ.get("HYPOTHESIS_PROFILE") == "long" else n


def compress(data: bytes, suffix: str) -> bytes:
  """`data` as the file of that suffix ('', '.gz', '.xz' or '.bz2') holds it."""
  if suffix == ".gz":
    return gzip.compress(data, mtime=0)
  if suffix == ".xz":
    return lzma.compress(data)
  if suffix == ".bz2":
    return bz2.compress(data)
  return data


def _offset(n: int) -> st.SearchStrategy[int]:
  """An offset in [0, n): in the first 16 bytes (headers), the last 16
  (end-of-stream markers, checksums) or anywhere."""
  if n <= 0:
    return st.just(0)
  return st.one_of(st.integers(0, min(16, n) - 1), st.integers(max(0, n - 16), n - 1),
                   st.integers(0, n - 1))


@st.composite
def damaged_bytes(draw, data: bytes, text: bool = True) -> bytes:
  """`data` damaged once (module docstring); `text`: also other encodings
  and a huge line."""
  kinds = ["cut", "overwrite", "insert", "append", "random", "empty"]
  if text:
    kinds += ["utf16", "latin1", "bad_utf8", "huge_line"]
  kind = draw(st.sampled_from(kinds))
  n = len(data)
  if kind == "cut":
    return data[:draw(_offset(n))]
  if kind == "overwrite":
    at = draw(_offset(n))
    patch = draw(st.binary(min_size=1, max_size=8))
    return data[:at] + patch + data[at + len(patch):]
  if kind == "insert":
    at = draw(_offset(n + 1))
    return data[:at] + draw(st.binary(min_size=1, max_size=64)) + data[at:]
  if kind == "append":
    return data + draw(st.binary(min_size=1, max_size=64))
  if kind == "random":
    return draw(st.binary(max_size=512))
  if kind == "empty":
    return b""
  decoded = data.decode("utf-8", errors="replace")
  if kind == "utf16":
    return decoded.encode("utf-16")
  if kind == "latin1":
    return decoded.encode("latin-1", errors="replace")
  if kind == "bad_utf8":
    at = draw(_offset(n + 1))
    return data[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\x80\x80", b"\xed\xa0\x80"])) \
        + data[at:]
  line = draw(st.sampled_from(["x" * HUGE_LINE, "word " * (HUGE_LINE // 5)]))
  at = data.find(b"\n") + 1
  return data[:at] + line.encode() + b"\n" + data[at:]


@st.composite
def damaged_file(draw, content: bytes, suffix: str) -> bytes:
  """The bytes of a `suffix` file holding `content`, damaged: either the
  content before compression or (compressed files) the file's own bytes."""
  if suffix and draw(st.booleans()):
    return draw(damaged_bytes(compress(content, suffix), text=False))
  return compress(draw(damaged_bytes(content)), suffix)


def _paths(value, prefix=()):
  """Every path (tuple of keys / indices) into a JSON value, itself first."""
  yield prefix
  if isinstance(value, dict):
    for key, item in value.items():
      yield from _paths(item, prefix + (key,))
  elif isinstance(value, list):
    for i, item in enumerate(value):
      yield from _paths(item, prefix + (i,))


_OTHER_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.sampled_from([-1, 0, 10**9]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["", "-", "x" * 5000]),
    st.text(max_size=20), st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))


@st.composite
def damaged_json(draw, value):
  """A copy of JSON `value` with one field wrong: replaced by a value of
  another type or range, removed, or joined by an extra field."""
  value = json.loads(json.dumps(value))
  path = draw(st.sampled_from(list(_paths(value))))
  if not path:
    return draw(_OTHER_VALUES)
  parent = value
  for key in path[:-1]:
    parent = parent[key]
  kind = draw(st.sampled_from(["replace", "remove", "extra"]))
  if kind == "replace":
    parent[path[-1]] = draw(_OTHER_VALUES)
  elif kind == "remove":
    del parent[path[-1]]
  elif isinstance(parent, dict):
    parent[draw(st.text(min_size=1, max_size=8))] = draw(_OTHER_VALUES)
  else:
    parent.append(draw(_OTHER_VALUES))
  return value


@st.composite
def damaged_jsonl(draw, records, suffix: str) -> bytes:
  """The bytes of a `suffix` JSON-lines file of `records`, damaged: either
  one field of the records wrong (`damaged_json`) or the file's bytes
  (`damaged_file`)."""
  if draw(st.booleans()):
    wrong = draw(damaged_json(records))
    lines = wrong if isinstance(wrong, list) else [wrong]
    return compress(b"".join(json_bytes(r) + b"\n" for r in lines), suffix)
  return draw(damaged_file(b"".join(json_bytes(r) + b"\n" for r in records), suffix))


def json_bytes(value) -> bytes:
  """`value` as JSON text (NaN and Infinity allowed, as Python writes them)."""
  return json.dumps(value, ensure_ascii=False).encode("utf-8")


def read_or_input_error(read, *names: str):
  """`read()`'s result, or None when it raised an InputError that passes
  the property (one line, naming one of `names`, printed as is by the
  entry points); any other exception fails the test."""
  from experiments import cli  # noqa: PLC0415
  try:
    return read()
  except InputError as e:
    message = str(e)
    assert "\n" not in message and message.strip(), repr(message)
    assert any(os.fspath(name) in message for name in names), (message, names)
    assert cli.one_line(e) == message and isinstance(e, cli.user_errors())
    return None


def finite(x: float) -> bool:
  return isinstance(x, (int, float)) and math.isfinite(x)
