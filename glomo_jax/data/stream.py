"""The token stream: a corpus tokenized once, documents joined by eos.

A `TokenStream` holds the whole (shard of the) corpus as one int32 array in
which every document is followed by the tokenizer's eos id, so windows may
cross document boundaries and a window longer than every document still
works. For the synthetic corpus it also holds the planted arcs per token.

`build_stream` reads a corpus, tokenizes it and, given a cache directory,
saves the arrays as .npy files under a key of (corpus spec, input files'
sizes and mtimes, tokenizer fingerprint, shard) so that the next run loads
them instead of tokenizing again; an entry whose files differ from the
sha256 hashes in its meta.json (damaged, or made before the hashes) is
tokenized again.

`split_stream` keeps the last documents apart as the held-out split.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import os
import shutil
from typing import Any, Iterable, Mapping

import numpy as np

from glomo_jax.data.corpus import CorpusSpec, CorpusStats, iter_documents, matching_files
from glomo_jax.data.synthetic import SyntheticDocument, generate_corpus
from glomo_jax.data.tokenizer import Tokenizer
from glomo_jax.errors import InputError
from glomo_jax.io import file_sha256, write_directory_atomically

logger = logging.getLogger(__name__)

CACHE_VERSION = 1


@dataclasses.dataclass(frozen=True)
class TokenStream:
  """Tokenized documents, each followed by eos, concatenated.

  Attributes:
    tokens: int32 [num_tokens].
    doc_starts: int64 [num_documents + 1]; document d (its eos included) is
      ``tokens[doc_starts[d]:doc_starts[d + 1]]``.
    tokenizer_fingerprint: `Tokenizer.fingerprint` of the tokenizer used.
    arc_source: optional int64 [num_tokens]: for a token that is the target of
      a planted arc (synthetic corpus), the stream position of its source
      (always earlier, in the same document); -1 elsewhere.
    arc_kind: optional int8 [num_tokens]: synthetic.ARC_* code of that arc,
      0 (ARC_NONE) elsewhere.
  """
  tokens: np.ndarray
  doc_starts: np.ndarray
  tokenizer_fingerprint: str
  arc_source: np.ndarray | None = None
  arc_kind: np.ndarray | None = None

  def __post_init__(self):
    n = len(self.tokens)
    if self.doc_starts[0] != 0 or self.doc_starts[-1] != n:
      raise ValueError(f"doc_starts must run from 0 to {n}, got "
                       f"{self.doc_starts[0]}..{self.doc_starts[-1]}")
    if (self.arc_source is None) != (self.arc_kind is None):
      raise ValueError("arc_source and arc_kind go together")
    if self.arc_source is not None and (len(self.arc_source) != n or len(self.arc_kind) != n):
      raise ValueError("arc arrays must have one entry per token")

  @property
  def num_tokens(self) -> int:
    return len(self.tokens)

  @property
  def num_documents(self) -> int:
    return len(self.doc_starts) - 1

  @property
  def has_arcs(self) -> bool:
    return self.arc_source is not None

  def document(self, index: int) -> np.ndarray:
    """Tokens of one document, its trailing eos included."""
    return self.tokens[self.doc_starts[index]:self.doc_starts[index + 1]]

  def slice_documents(self, start: int, stop: int) -> "TokenStream":
    """Documents start..stop-1 as a stream of their own (arc positions rebased)."""
    if not 0 <= start < stop <= self.num_documents:
      raise ValueError(f"bad document range {start}:{stop} of {self.num_documents}")
    lo, hi = int(self.doc_starts[start]), int(self.doc_starts[stop])
    arc_source = arc_kind = None
    if self.has_arcs:
      src = self.arc_source[lo:hi]
      arc_source = np.where(src >= 0, src - lo, -1)
      arc_kind = self.arc_kind[lo:hi].copy()
    return TokenStream(self.tokens[lo:hi].copy(), self.doc_starts[start:stop + 1] - lo,
                       self.tokenizer_fingerprint, arc_source, arc_kind)


def _assemble(id_lists: list[list[int]], eos_id: int) -> tuple[np.ndarray, np.ndarray]:
  """Lists of ids -> (flat int32 tokens with eos after each, doc_starts)."""
  lengths = np.fromiter((len(x) + 1 for x in id_lists), dtype=np.int64,
                        count=len(id_lists))
  doc_starts = np.zeros(len(id_lists) + 1, dtype=np.int64)
  np.cumsum(lengths, out=doc_starts[1:])
  tokens = np.full(int(doc_starts[-1]), eos_id, dtype=np.int32)
  body = np.ones(len(tokens), dtype=bool)
  body[doc_starts[1:] - 1] = False  # eos slots
  tokens[body] = np.fromiter(itertools.chain.from_iterable(id_lists), dtype=np.int32,
                             count=int(body.sum()))
  return tokens, doc_starts


def tokenize_documents(documents: Iterable[str], tokenizer: Tokenizer, *,
                       chunk_documents: int = 512, num_threads: int = 1) -> TokenStream:
  """Encodes documents (in chunks, `num_threads` SentencePiece threads)."""
  tokens, starts = [], []
  offset = 0
  docs = iter(documents)
  while True:
    chunk = list(itertools.islice(docs, chunk_documents))
    if not chunk:
      break
    t, s = _assemble(tokenizer.encode_batch(chunk, num_threads=num_threads),
                     tokenizer.eos_id)
    tokens.append(t)
    starts.append(s[1:] + offset)
    offset += len(t)
  if not tokens:
    raise ValueError("no document to tokenize")
  return TokenStream(np.concatenate(tokens),
                     np.concatenate([np.zeros(1, np.int64)] + starts),
                     tokenizer.fingerprint)


def tokenize_synthetic(documents: Iterable[SyntheticDocument],
                       tokenizer: Tokenizer) -> TokenStream:
  """Encodes synthetic documents word by word and maps their arcs to tokens.

  An arc (target word, source word) becomes (first piece of the target word,
  first piece of the source word); with `train_word_tokenizer` pieces and
  words coincide. Arcs touching a word with no piece are dropped.
  """
  id_lists, arc_lists = [], []
  for doc in documents:
    ids, word_start = tokenizer.encode_words(doc.words)
    id_lists.append(ids.tolist())
    lengths = np.diff(word_start)
    keep = (lengths[doc.arcs[:, 0]] > 0) & (lengths[doc.arcs[:, 1]] > 0)
    arc_lists.append((word_start[doc.arcs[keep, 0]], word_start[doc.arcs[keep, 1]],
                      doc.kinds[keep]))
  if not id_lists:
    raise ValueError("no document to tokenize")
  tokens, doc_starts = _assemble(id_lists, tokenizer.eos_id)
  arc_source = np.full(len(tokens), -1, dtype=np.int64)
  arc_kind = np.zeros(len(tokens), dtype=np.int8)
  for offset, (targets, sources, kinds) in zip(doc_starts[:-1], arc_lists):
    arc_source[offset + targets] = offset + sources
    arc_kind[offset + targets] = kinds
  return TokenStream(tokens, doc_starts, tokenizer.fingerprint, arc_source, arc_kind)


def _cache_key(spec: CorpusSpec, tokenizer: Tokenizer, shard_index: int,
               num_shards: int) -> str:
  described: dict[str, Any] = {
      "version": CACHE_VERSION, "spec": spec.to_dict(),
      "tokenizer": tokenizer.fingerprint, "shard": [shard_index, num_shards]}
  if spec.source == "files":
    described["files"] = [(f, os.path.getsize(f), os.path.getmtime(f))
                          for f in matching_files(spec.pattern)]
  blob = json.dumps(described, sort_keys=True, default=str).encode()
  return hashlib.sha256(blob).hexdigest()[:20]


_ARRAYS = ("tokens", "doc_starts", "arc_source", "arc_kind")


def save_stream(stream: TokenStream, directory: str, meta: Mapping[str, Any] = ()) -> None:
  """Writes the stream's arrays as .npy files plus meta.json (with each
  file's sha256), atomically (`io.write_directory_atomically`; when another
  process wrote the same cache entry first, its copy is kept)."""
  def fill(tmp):
    for name in _ARRAYS:
      value = getattr(stream, name)
      if value is not None:
        np.save(os.path.join(tmp, f"{name}.npy"), value)
    info = dict(meta, version=CACHE_VERSION, num_tokens=stream.num_tokens,
                num_documents=stream.num_documents,
                tokenizer_fingerprint=stream.tokenizer_fingerprint,
                files={name: file_sha256(os.path.join(tmp, name))
                       for name in sorted(os.listdir(tmp))})
    with open(os.path.join(tmp, "meta.json"), "w") as f:
      json.dump(info, f, indent=1, sort_keys=True, default=str)
  write_directory_atomically(directory, fill, kept="no partial cache was left",
                             marker="meta.json")


def load_stream(directory: str) -> TokenStream:
  """Reads a stream written by `save_stream`.

  Raises:
    InputError: another cache version, or a damaged cache (a file missing,
      cut short or changed: its sha256 differs from meta.json's).
  """
  try:
    with open(os.path.join(directory, "meta.json"), encoding="utf-8") as f:
      meta = json.load(f)
    if not isinstance(meta, dict):
      raise ValueError("meta.json does not hold a JSON object")
    if meta.get("version") != CACHE_VERSION:
      raise ValueError(f"cache version {meta.get('version')}, expected {CACHE_VERSION}")
    files = meta.get("files")
    if not isinstance(files, dict) or "tokens.npy" not in files:
      raise ValueError("no file hashes (made by an older glomo_jax)")
    for name, digest in files.items():
      if file_sha256(os.path.join(directory, name)) != digest:
        raise ValueError(f"{name}'s sha256 hash differs from the one recorded")
    arrays = {name: np.load(os.path.join(directory, f"{name}.npy"))
              if f"{name}.npy" in files else None for name in _ARRAYS}
    return TokenStream(tokenizer_fingerprint=meta["tokenizer_fingerprint"], **arrays)
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise InputError(directory, f"damaged token stream cache: {e}") from None


def build_stream(spec: CorpusSpec | Mapping[str, Any], tokenizer: Tokenizer, *,
                 cache_dir: str | None = None, shard_index: int = 0,
                 num_shards: int = 1, num_threads: int = 1,
                 stats: CorpusStats | None = None) -> TokenStream:
  """Reads, tokenizes (or loads from the cache) one shard of a corpus.

  Args:
    spec: the corpus (CorpusSpec or dict).
    tokenizer: the tokenizer; its fingerprint is part of the cache key.
    cache_dir: directory of cached streams (None: no cache). An entry is a
      sub-directory named by the cache key with tokens.npy, doc_starts.npy,
      [arc_source.npy, arc_kind.npy] and meta.json.
    shard_index, num_shards: corpus shard to read (see `iter_documents`).
    num_threads: SentencePiece encoding threads.
    stats: optional corpus counters (only filled when the corpus is read).

  Returns:
    the TokenStream; with arcs when spec.source == 'synthetic'.
  """
  if not isinstance(spec, CorpusSpec):
    spec = CorpusSpec.from_dict(spec)
  entry = None
  if cache_dir is not None:
    entry = os.path.join(cache_dir, _cache_key(spec, tokenizer, shard_index, num_shards))
    if os.path.lexists(entry):
      logger.info("loading token stream from cache %s", entry)
      try:
        return load_stream(entry)
      except InputError as e:
        logger.warning("%s; tokenizing again", e)
        shutil.rmtree(entry, ignore_errors=True)
  stats = stats if stats is not None else CorpusStats()
  if spec.source == "synthetic":
    config = spec.synthetic
    if shard_index >= config.num_documents:
      raise ValueError(f"empty corpus: no document in shard {shard_index} of "
                       f"{num_shards} of {spec.describe()}")
    docs = generate_corpus(config, shard_index, num_shards)
    if spec.max_documents is not None:
      docs = itertools.islice(docs, spec.max_documents)
    stream = tokenize_synthetic(docs, tokenizer)
    stats.documents += stream.num_documents
  else:
    stream = tokenize_documents(iter_documents(spec, shard_index, num_shards, stats),
                                tokenizer, num_threads=num_threads)
  if entry is not None:
    save_stream(stream, entry, {"spec": spec.to_dict(), "shard": [shard_index, num_shards],
                                "corpus_stats": dataclasses.asdict(stats)})
  return stream


def split_stream(stream: TokenStream,
                 heldout_fraction: float) -> tuple[TokenStream, TokenStream]:
  """(train, held-out): the last ceil(fraction · documents) documents held out.

  Raises:
    ValueError: unless 0 < heldout_fraction < 1 and both parts keep at least
      one document.
  """
  if not 0 < heldout_fraction < 1:
    raise ValueError(f"heldout_fraction must be in (0, 1), got {heldout_fraction}")
  n = stream.num_documents
  held = int(np.ceil(heldout_fraction * n))
  if n < 2 or held >= n:
    raise ValueError(f"cannot hold out {heldout_fraction:.0%} of {n} document(s) "
                     "and keep one for training")
  return stream.slice_documents(0, n - held), stream.slice_documents(n - held, n)
