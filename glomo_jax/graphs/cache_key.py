"""The key of a word-graph cache: what the graphs depend on, hashed.

Key: sha256 of the canonical JSON of {format_version, export content_sha256
(``predictor.manifest['content_sha256']``: params, tokenizer and config),
tokenizer fingerprint, dataset fingerprint (`dataset_fingerprint`: every word
of every example, in order), text fingerprint (`text_fingerprint` of the raw
texts and word spans the predictor reads, or null when it reads the words
joined by spaces), max_words, max_pieces, self_loops, dtype, and top_k
when given}. A cache lives in ``<root>/<key>/``, so another export, dataset
or option never reads a stale one; the request is also written into the
cache's meta.json and checked when it is opened.
"""
from __future__ import annotations

import hashlib
import json
import struct
from typing import Sequence

import numpy as np

FORMAT_VERSION = 1          # dense
SPARSE_FORMAT_VERSION = 2   # each row's kept sources, rows end to end
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


def cache_request(predictor, tokenizer, word_lists, max_words, max_pieces, self_loops,
                  dtype, texts=None, word_spans=None, top_k=None) -> dict:
  """The inputs the graphs of a cache depend on (module docstring); its
  hash names the cache.

  Raises:
    ValueError: no content hash in the predictor, or an unknown dtype or top_k.
  """
  content = (getattr(predictor, "manifest", None) or {}).get("content_sha256")
  if not content:
    raise ValueError("the predictor has no manifest['content_sha256'] (load it with "
                     "glomo_jax.export.load_graph_predictor): a cache cannot be keyed")
  if top_k is not None and not 1 <= int(top_k) <= 65535:
    raise ValueError(f"top_k must be None (dense) or in [1, 65535], got {top_k}")
  if dtype not in (DTYPES if top_k is None else SPARSE_DTYPES):
    raise ValueError(f"dtype must be one of {list(DTYPES)} (or 'uint8' with top_k), "
                     f"got {dtype!r}")
  # a dense request has no top_k entry: its key is that of the dense format alone
  sparse = {} if top_k is None else {"top_k": int(top_k)}
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
