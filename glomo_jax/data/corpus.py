"""Documents (str) for pretraining, from TFDS, local files or the synthetic corpus.

A `CorpusSpec` (a frozen dataclass, or a plain dict through `CorpusSpec.from_dict`)
says where documents come from; `iter_documents(spec, shard_index, num_shards)`
yields them as Python strings.

Sources:

* ``tfds``: any TFDS dataset (``name``, e.g. ``wikipedia/20230601.en``), one
  ``split``, one text feature (``text_feature``), read by
  `glomo_jax.data.tfds_source.tfds_records` (readers, sharding and
  ``download`` are described there).
* ``files``: every file matching ``pattern`` (a glob, or several, sorted),
  plain, ``.gz``, ``.xz`` or ``.bz2``. Formats: ``text`` (one document per
  file), ``wikitext`` (WikiText's layout: a line `` = Title = `` with exactly
  one ``=`` on each side starts a new article; `` = = Section = = `` lines do
  not), ``jsonl`` (one JSON object per line, the document in ``text_field``).
  ``auto`` chooses by the name without its compression suffix: ``.jsonl`` /
  ``.json`` -> jsonl, ``.tokens`` -> wikitext, anything else -> text.
  Sharding: document i belongs to shard i mod n (round robin).
* ``synthetic``: `synthetic.generate_corpus(spec.synthetic)`, each document's
  words joined by spaces; the arcs are read by `stream.build_stream`.
  Sharding: document i belongs to shard i mod n.

Text handling: every document is stripped of surrounding whitespace; empty
documents are skipped and counted. WikiText documents are their non-blank
lines, stripped, joined by ``\\n`` (the heading line included).

Non-UTF-8 bytes (``on_decode_error``): ``'replace'`` (default) decodes with
U+FFFD in place of every bad byte, counts the documents this touched in
`CorpusStats.replaced_documents` and logs one warning per file; ``'strict'``
raises an InputError naming the file (and line for jsonl). TFDS text features
are decoded the same way when the reader returns bytes.

Errors: an unknown source, format or reader (when the spec is built); a
files corpus without a pattern or a TFDS corpus without a name, a glob
matching no file, a corpus (or shard) with no non-empty document, a jsonl line that is not a
JSON object or lacks ``text_field`` (or holds a non-string there) all raise an
InputError (`glomo_jax.errors`) naming the spec, the file and the line.
"""
from __future__ import annotations

import dataclasses
import glob as globlib
import logging
import os
import re
from typing import Any, BinaryIO, Iterator, Mapping

from glomo_jax.config import DictConfig
from glomo_jax.data.synthetic import SyntheticConfig, generate_corpus
from glomo_jax.data.tfds_source import READERS as TFDS_READERS
from glomo_jax.data.tfds_source import tfds_records
from glomo_jax.errors import InputError
from glomo_jax.io import decode_utf8, json_lines, open_binary, strip_compression

logger = logging.getLogger(__name__)

SOURCES = ("tfds", "files", "synthetic")
FILE_FORMATS = ("auto", "text", "wikitext", "jsonl")
DECODE_ERRORS = ("replace", "strict")
# ' = Title = ' (exactly one '=' on each side) starts a WikiText article.
_WIKITEXT_TITLE = re.compile(r"^ ?= [^=].* = ?$")


@dataclasses.dataclass(frozen=True)
class CorpusSpec(DictConfig):
  """Where the pretraining documents come from (see the module docstring).

  Attributes:
    source: 'tfds', 'files' or 'synthetic'.
    name: TFDS dataset name, with config/version if needed
      (e.g. 'wikipedia/20230601.en').
    split: TFDS split (slicing syntax allowed, e.g. 'train[:10%]').
    text_feature: TFDS feature holding the text.
    data_dir: TFDS data directory (None: TFDS's default).
    tfds_reader: 'auto', 'data_source' or 'tf'.
    download: call `download_and_prepare` before reading.
    pattern: glob of the input files, or a tuple of globs.
    file_format: 'auto', 'text', 'wikitext' or 'jsonl'.
    text_field: key of the document in each jsonl object.
    on_decode_error: 'replace' or 'strict' (non-UTF-8 bytes).
    synthetic: configuration of the synthetic corpus.
    max_documents: stop after this many non-empty documents of the shard
      (None: all); for quick runs on the first articles of a large corpus.
  """
  source: str = "synthetic"
  name: str = ""
  split: str = "train"
  text_feature: str = "text"
  data_dir: str | None = None
  tfds_reader: str = "auto"
  download: bool = False
  pattern: str | tuple[str, ...] = ""
  file_format: str = "auto"
  text_field: str = "text"
  on_decode_error: str = "replace"
  synthetic: SyntheticConfig = dataclasses.field(default_factory=SyntheticConfig)
  max_documents: int | None = None

  def __post_init__(self):
    _check_choice("source", self.source, SOURCES)
    _check_choice("file_format", self.file_format, FILE_FORMATS)
    _check_choice("tfds_reader", self.tfds_reader, TFDS_READERS)
    _check_choice("on_decode_error", self.on_decode_error, DECODE_ERRORS)
    if self.max_documents is not None and self.max_documents < 1:
      raise ValueError(f"max_documents must be >= 1 or None, got {self.max_documents}")
    if isinstance(self.pattern, list):
      object.__setattr__(self, "pattern", tuple(self.pattern))
    if self.synthetic is None:
      object.__setattr__(self, "synthetic", SyntheticConfig())
    elif isinstance(self.synthetic, Mapping):
      object.__setattr__(self, "synthetic", SyntheticConfig(**self.synthetic))

  def to_dict(self) -> dict[str, Any]:
    """JSON-serialisable form (the inverse of `from_dict`)."""
    out = dataclasses.asdict(self)
    if isinstance(out["pattern"], tuple):
      out["pattern"] = list(out["pattern"])
    return out

  def describe(self) -> str:
    """Short human-readable name for error messages."""
    if self.source == "tfds":
      return f"tfds {self.name!r} split {self.split!r} feature {self.text_feature!r}"
    if self.source == "files":
      return f"files {self.pattern!r} (format {self.file_format!r})"
    return f"synthetic corpus {self.synthetic}"


@dataclasses.dataclass
class CorpusStats:
  """Counters filled while documents are read.

  Attributes:
    documents: non-empty documents yielded.
    empty_documents: documents skipped because they were empty after strip.
    replaced_documents: documents that held non-UTF-8 bytes (decoded with
      U+FFFD replacements).
    files: files opened (source 'files').
    characters: characters of the yielded documents.
  """
  documents: int = 0
  empty_documents: int = 0
  replaced_documents: int = 0
  files: int = 0
  characters: int = 0


class CorpusError(InputError):
  """A corpus that cannot be read: no pattern or name, no file, no text
  (`where`: the corpus spec, or its file pattern)."""


def _check_choice(field: str, value: str, choices: tuple[str, ...]) -> None:
  if value not in choices:
    raise ValueError(f"unknown {field} {value!r}; choose one of {choices}")


_REMEDY = "use on_decode_error='replace' to decode it anyway"


def _decode(data: bytes, on_error: str, where: str, line: int | None = None
            ) -> tuple[str, bool]:
  """UTF-8 bytes -> (text, whether bytes were replaced) (`io.decode_utf8`)."""
  return decode_utf8(data, where, line, on_error, _REMEDY)


def file_format_of(path: str) -> str:
  """'jsonl', 'wikitext' or 'text', from the name without compression suffix."""
  ext = os.path.splitext(strip_compression(path))[1].lower()
  if ext in (".jsonl", ".json"):
    return "jsonl"
  if ext == ".tokens":
    return "wikitext"
  return "text"


def matching_files(pattern: str | tuple[str, ...]) -> list[str]:
  """Sorted, de-duplicated files matching a glob or tuple of globs (may be empty)."""
  patterns = (pattern,) if isinstance(pattern, str) else tuple(pattern)
  files = set()
  for p in patterns:
    files.update(f for f in globlib.glob(os.path.expanduser(p), recursive=True)
                 if os.path.isfile(f))
  return sorted(files)


def _jsonl_documents(path: str, text_field: str, on_error: str) -> Iterator[tuple[str, bool]]:
  for number, record, replaced in json_lines(path, on_error, _REMEDY):
    if text_field not in record:
      raise InputError(path, f"missing text field {text_field!r} (fields: "
                       f"{sorted(record)[:20]})", line=number)
    text = record[text_field]
    if not isinstance(text, str):
      raise InputError(path, f"text field {text_field!r} holds {type(text).__name__}, "
                       "not a string", line=number)
    yield text, replaced


def _wikitext_documents(f: BinaryIO, path: str,
                        on_error: str) -> Iterator[tuple[str, bool]]:
  lines: list[str] = []
  replaced = False
  for number, raw in enumerate(f, start=1):
    line, bad = _decode(raw, on_error, path, number)
    line = line.strip("\r\n")
    if _WIKITEXT_TITLE.match(line) and lines:
      yield "\n".join(lines), replaced
      lines, replaced = [], False
    replaced |= bad
    if line.strip():
      lines.append(line.strip())
  if lines:
    yield "\n".join(lines), replaced


def _file_documents(path: str, fmt: str, text_field: str,
                    on_error: str) -> Iterator[tuple[str, bool]]:
  """(document, had non-UTF-8 bytes) for every document of one file."""
  if fmt == "jsonl":
    yield from _jsonl_documents(path, text_field, on_error)
    return
  with open_binary(path) as f:
    if fmt == "wikitext":
      yield from _wikitext_documents(f, path, on_error)
    else:
      yield _decode(f.read(), on_error, path)


def _files_source(spec: CorpusSpec, stats: CorpusStats) -> Iterator[tuple[str, bool]]:
  files = matching_files(spec.pattern)
  if not files:
    raise CorpusError(f"corpus pattern {spec.pattern!r}", "no file matches it: set "
                      "corpus.pattern to a glob of text, WikiText or JSON-lines files")
  for path in files:
    stats.files += 1
    fmt = spec.file_format if spec.file_format != "auto" else file_format_of(path)
    replaced_here = 0
    for text, replaced in _file_documents(path, fmt, spec.text_field,
                                          spec.on_decode_error):
      replaced_here += replaced
      yield text, replaced
    if replaced_here:
      logger.warning("%s: %d document(s) held non-UTF-8 bytes, decoded with "
                     "U+FFFD replacement characters", path, replaced_here)


def _tfds_source(spec: CorpusSpec, shard_index: int,
                 num_shards: int) -> Iterator[tuple[str, bool]]:
  where = f"tfds {spec.name!r} split {spec.split!r}"
  records = tfds_records(spec.name, spec.split, data_dir=spec.data_dir,
                         reader=spec.tfds_reader, download=spec.download,
                         shard_index=shard_index, num_shards=num_shards)
  for number, record in enumerate(records):
    if spec.text_feature not in record:
      raise InputError(where, f"missing text feature {spec.text_feature!r} "
                       f"(features: {sorted(record)})", record=number)
    text = record[spec.text_feature]
    if hasattr(text, "item") and getattr(text, "shape", None) == ():
      text = text.item()  # 0-d numpy array
    if isinstance(text, bytes):
      yield _decode(text, spec.on_decode_error, f"{where} record {number}")
    elif isinstance(text, str):
      yield text, False
    else:
      raise InputError(where, f"text feature {spec.text_feature!r} holds "
                       f"{type(text).__name__}, not text", record=number)


def iter_documents(spec: CorpusSpec | Mapping[str, Any], shard_index: int = 0,
                   num_shards: int = 1,
                   stats: CorpusStats | None = None) -> Iterator[str]:
  """Yields the non-empty documents of one shard of the corpus, stripped.

  Args:
    spec: a CorpusSpec or a dict accepted by `CorpusSpec.from_dict`.
    shard_index, num_shards: which shard this reader takes (e.g.
      jax.process_index(), jax.process_count()); shards are disjoint and
      together cover the corpus.
    stats: optional counters, updated as documents are read.

  Raises:
    InputError: see the module docstring; an empty shard raises when the
      iteration ends.
  """
  if not isinstance(spec, CorpusSpec):
    spec = CorpusSpec.from_dict(spec)
  if not 0 <= shard_index < num_shards:
    raise ValueError(f"need 0 <= shard_index < num_shards, got {shard_index}, {num_shards}")
  stats = stats if stats is not None else CorpusStats()
  if spec.source == "files" and not spec.pattern:
    raise CorpusError("corpus.pattern", "a corpus of source 'files' needs a file pattern: "
                      "set corpus.pattern (e.g. --config.corpus.pattern='data/*.txt')")
  if spec.source == "tfds" and not spec.name:
    raise CorpusError("corpus.name", "a corpus of source 'tfds' needs a dataset name: set "
                      "corpus.name")
  if spec.source == "tfds":
    pairs = _tfds_source(spec, shard_index, num_shards)
    round_robin = False
  elif spec.source == "files":
    pairs = _files_source(spec, stats)
    round_robin = True
  else:
    pairs = ((d.text, False) for d in generate_corpus(
        spec.synthetic, shard_index, num_shards))
    round_robin = False  # generate_corpus shards by itself
  yielded = 0
  for i, (text, replaced) in enumerate(pairs):
    if round_robin and i % num_shards != shard_index:
      continue
    text = text.strip()
    if not text:
      stats.empty_documents += 1
      continue
    stats.replaced_documents += replaced
    stats.documents += 1
    stats.characters += len(text)
    yielded += 1
    yield text
    if spec.max_documents is not None and yielded >= spec.max_documents:
      return
  if not yielded:
    shard = f" (shard {shard_index} of {num_shards})" if num_shards > 1 else ""
    raise CorpusError(spec.describe(), f"empty corpus{shard}: no non-empty document "
                      f"({stats.empty_documents} empty skipped); point the corpus at "
                      "documents that hold text")


def load_documents(spec: CorpusSpec | Mapping[str, Any], shard_index: int = 0,
                   num_shards: int = 1,
                   stats: CorpusStats | None = None) -> list[str]:
  """`iter_documents` collected into a list."""
  return list(iter_documents(spec, shard_index, num_shards, stats))
