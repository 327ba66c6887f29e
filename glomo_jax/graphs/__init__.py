"""Producing and caching word graphs: the frozen predictor's graphs of texts,
aligned from its pieces to the task's words ([..., target, source]), and the
per-dataset caches task models read them from. The layer that turns them
into task features is `glomo_jax.transfer`.

* Pieces → words: `piece_to_unit`, `align_graphs` (align.py: the math);
  the predictor's inputs from word lists or, by characters, from raw texts:
  `encode_word_lists`, `encode_texts`, `unit_of_piece_from_spans`
  (encode.py); batch shapes by backend (shapes.py); the whole path,
  `word_graphs`, `text_graphs`, `unit_graphs` (unit_graphs.py).
* Dataset caches: `cached_word_graphs`, `WordGraphCache` (cache.py; its
  key, formats, files and build in cache_key.py, cache_stores.py,
  cache_files.py, cache_build.py; packed sparse rows in sparse_rows.py).
* A task's graphs: `TaskGraphs` (task_graphs.py), one cache per split and
  text field, or `OnTheFlyGraphs` (computed per batch); `task_graphs.task_graphs`,
  the caches a text config's `TextFields` set.
"""
from glomo_jax.graphs.align import align_graphs, piece_to_unit
from glomo_jax.graphs.cache import WordGraphCache, cached_word_graphs
from glomo_jax.graphs.cache_key import cache_key, dataset_fingerprint
from glomo_jax.graphs.encode import encode_texts, encode_word_lists, unit_of_piece_from_spans
from glomo_jax.graphs.task_graphs import OnTheFlyGraphs, TaskGraphs
from glomo_jax.graphs.unit_graphs import text_graphs, unit_graphs, word_graphs

__all__ = ["OnTheFlyGraphs", "TaskGraphs", "WordGraphCache", "align_graphs", "cache_key",
           "cached_word_graphs", "dataset_fingerprint", "encode_texts", "encode_word_lists",
           "piece_to_unit", "text_graphs", "unit_graphs", "unit_of_piece_from_spans",
           "word_graphs"]
