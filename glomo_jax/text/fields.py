"""The fields every text task's config shares, and the set-up they drive.

`TextFields` is the one group of word-vector, batching and graph-cache
fields of the text configs (`ClassificationConfig`, `SquadConfig`, and the
next text kind's): a config lists it among its bases, so its fields stay
flat in config.json (`--config.glove_path=...`). `VocabOptions` is the
vocabulary group of tasks whose splits are a `TaskData`. The set-up of a
run reads them: `task_vocabulary` (the training split's words and the
embedding table) and `word_table` (the table of a vocabulary built
otherwise, e.g. SQuAD's); the predictor's graph caches are built by
`glomo_jax.graphs.setup.task_graphs` from the same group.
"""
from __future__ import annotations

import dataclasses
import logging
import os

import numpy as np

from glomo_jax.text.glove import Coverage, embedding_matrix
from glomo_jax.text.splits import TaskData
from glomo_jax.text.words import Vocabulary

logger = logging.getLogger("glomo_jax.text")

GRAPH_TEXTS = ("raw", "words")


@dataclasses.dataclass(frozen=True)
class VocabOptions:
  """The vocabulary of the training split: words seen `min_count` times, the
  `max_size` most frequent (None: all)."""
  min_count: int = 1
  max_size: int | None = None


@dataclasses.dataclass(frozen=True)
class TextFields:
  """The text and graph-cache fields of a text task's config (a base of the
  config dataclass, beside `DownstreamConfig`; a config may give a field
  another default by declaring it again).

  Attributes:
    glove_path: GloVe text file (None: random word vectors).
    length_multiple: padded lengths are rounded up to a multiple of this.
    bucket_batches: length bucketing window in batches
      (`train.batches.batch_order`; 0: none).
    graph_cache_dir: where the word-graph caches go (None: <workdir>/graph_cache).
    graph_cache_dtype: 'float16' or 'float32' (with a top-k, also 'uint8':
      each row's weights as 8-bit levels; `glomo_jax.graphs.cache`).
    graph_batch_size: predictor batch while building the cache.
    graph_self_loops: keep the weight between pieces of one word on the word
      graphs' diagonal (default: no diagonal, as the authors' word graphs;
      `graphs.align_graphs`).
    graph_text: what the predictor reads: 'raw', each text as written (its
      pieces go to the task's words by characters), or 'words', the task's
      lower-cased, PTB-split words joined by spaces.
  """
  glove_path: str | None = None
  length_multiple: int = 8
  bucket_batches: int = 0
  graph_cache_dir: str | None = None
  graph_cache_dtype: str = "float16"
  graph_batch_size: int = 32
  graph_self_loops: bool = False
  graph_text: str = "raw"

  def check_text(self) -> None:
    """Raises ValueError for a text field that cannot work (a config's
    `check` calls it)."""
    if self.graph_text not in GRAPH_TEXTS:
      raise ValueError(f"unknown graph_text {self.graph_text!r}: 'raw' or 'words'")
    small = [n for n in ("length_multiple", "graph_batch_size") if getattr(self, n) < 1]
    if small:
      raise ValueError(f"{small[0]} must be >= 1, got {getattr(self, small[0])}")

  def graph_cache_root(self, workdir: str) -> str:
    """Where the run's graph caches go: graph_cache_dir, else <workdir>/graph_cache."""
    return self.graph_cache_dir or os.path.join(workdir, "graph_cache")

  def graph_cache_options(self) -> dict:
    """The cache options of `graphs.cached_word_graphs` these fields set
    (dtype, build batch, self-loops)."""
    return {"dtype": self.graph_cache_dtype, "batch_size": self.graph_batch_size,
            "self_loops": self.graph_self_loops}


def word_table(fields: TextFields, vocab: Vocabulary, model, seed: int,
               vectors: tuple[dict, int] | None = None) -> tuple[np.ndarray, Coverage]:
  """(the embedding table [len(vocab), model.embed_dim], its GloVe coverage):
  GloVe rows from `fields.glove_path` (or `vectors`, already read from it),
  seeded random rows for the rest (`text.glove.embedding_matrix`). model:
  the task model's options (embed_dim, oov_scale, glove_scale)."""
  return embedding_matrix(vocab, fields.glove_path, dim=model.embed_dim,
                          oov_scale=model.oov_scale, glove_scale=model.glove_scale,
                          seed=seed, vectors=vectors)


def task_vocabulary(fields: TextFields, data: TaskData, vocab: VocabOptions, model,
                    seed: int) -> tuple[Vocabulary, np.ndarray, Coverage]:
  """(vocabulary, embedding table, coverage) of a task: the training split's
  words (`TaskData.build_vocabulary` with `vocab`'s options), their table
  (`word_table`)."""
  words = data.build_vocabulary(min_count=vocab.min_count, max_size=vocab.max_size)
  table, coverage = word_table(fields, words, model, seed)
  logger.info("vocabulary %d words; %s", len(words), coverage)
  return words, table, coverage
