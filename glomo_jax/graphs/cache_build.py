"""Building a word-graph cache: the predictor's graphs of every example,
written by the format's store (`cache_stores`) under a temporary name and
renamed into place, so a reader never sees a partial cache.

The build overlaps the host and the device: while the device computes the
graphs of the next batch (dispatched, not waited for), the host stores the
previous batch's. Examples go shortest first, so batches of similar length
pad little and compile few shapes (`shapes.batch_width`; the alignment
costs O(words · pieces²) a graph).
"""
from __future__ import annotations

import datetime
import itertools
import json
import logging
import os
import time

import jax
import numpy as np

from glomo_jax.graphs.cache_files import LENGTHS, META, OFFSETS, file_record, sealed
from glomo_jax.graphs.cache_stores import DenseStore, SparseStore
from glomo_jax.graphs.encode import checked_tokenizer, encode_texts, encode_word_lists
from glomo_jax.graphs.shapes import batch_width
from glomo_jax.graphs.unit_graphs import device_unit_graphs
from glomo_jax.io import write_directory_atomically

logger = logging.getLogger(__name__)


def build_cache(path, request, predictor, tokenizer, word_lists, batch_size, texts=None,
                word_spans=None, progress_every_s: float = 30.0) -> None:
  """Writes the cache of `request` (`cache_key.cache_request`) to `path`.

  Raises:
    OSError: the cache could not be written (naming it; nothing partial is left).
  """
  def fill(tmp):
    _write_cache(tmp, os.path.basename(path), request, predictor, tokenizer, word_lists,
                 batch_size, texts, word_spans, progress_every_s)
  write_directory_atomically(path, fill, kept="no partial cache was left", marker=META)


def _write_cache(tmp, key, request, predictor, tokenizer, word_lists, batch_size, texts,
                 word_spans, progress_every_s) -> None:
  """The cache's files, written into the directory `tmp` (`build_cache`)."""
  config = predictor.config
  prefix = (2 * config.num_graph_layers, config.num_heads)
  per = prefix[0] * prefix[1]
  max_words = request["max_words"]
  lengths = np.array([min(len(words), max_words) for words in word_lists], np.int32)
  k = request.get("top_k")
  store = (DenseStore(tmp, lengths, per, request["dtype"]) if k is None else
           SparseStore(tmp, lengths, per, request["dtype"], k, max_words))
  order = np.argsort(lengths, kind="stable")
  tokenizer = checked_tokenizer(predictor, tokenizer)
  cut = dict(max_pieces=request["max_pieces"])

  def dispatched():          # (rows, their graphs on the device, not waited for)
    for start in range(0, len(word_lists), batch_size):
      rows = order[start:start + batch_size]
      width = batch_width(lengths[rows], max_words)
      arrays = (encode_word_lists(tokenizer, [word_lists[i][:width] for i in rows], width, **cut)
                if texts is None else
                encode_texts(tokenizer, [texts[i] for i in rows],
                             [np.asarray(word_spans[i])[:width] for i in rows], width, **cut))
      yield rows, device_unit_graphs(predictor, arrays, width, request["self_loops"],
                                     dtype=store.fetch_dtype)

  began = last = time.perf_counter()
  done, previous = 0, None
  for current in itertools.chain(dispatched(), [None]):
    if previous is not None:
      rows, graphs = previous
      graphs = np.asarray(jax.device_get(graphs))
      for row, i in enumerate(rows):
        n = int(lengths[i])
        if graphs[row, ..., n:, :].any() or graphs[row, ..., :n, n:].any():
          raise RuntimeError("word_graphs put weight outside the example's words")
        store.put(i, graphs[row, ..., :n, :n])
      done += len(rows)
      if time.perf_counter() - last >= progress_every_s and done < len(word_lists):
        last = time.perf_counter()
        logger.info("graph cache: %d/%d examples, %.1f examples/s", done, len(word_lists),
                    done / (last - began))
    previous = current
  offsets, extra = store.finish()
  np.save(os.path.join(tmp, LENGTHS), lengths)
  np.save(os.path.join(tmp, OFFSETS), offsets)
  meta = dict(request, **extra, key=key, num_examples=len(lengths),
              graph_prefix=list(prefix), total_values=int(offsets[-1]),
              files=file_record(tmp),
              created=datetime.datetime.now(datetime.timezone.utc).isoformat(
                  timespec="seconds"))
  with open(os.path.join(tmp, META), "w", encoding="utf-8") as f:
    json.dump(sealed(meta), f, indent=2, sort_keys=True)
