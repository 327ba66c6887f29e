"""Graph transfer (paper §2.2–2.3; docs/design.md §4): frozen predictor graphs → task
features.

* `GraphTransfer` (layer.py): the layer task models call, mode 'glomo' |
  'uniform' | 'none'.
* Its parts: `graph_candidates` / `propagated_candidates` (candidates.py),
  `GraphMixture` (mixture.py), `uniform_graphs` (uniform.py), `graph_features`
  / `GatedFusion` (fusion.py).
* Pieces → words: `piece_to_unit`, `align_graphs` (align.py: the math);
  the predictor's inputs from word lists or, by characters, from raw texts:
  `encode_word_lists`, `encode_texts`, `unit_of_piece_from_spans`
  (encode.py); batch shapes by backend (shapes.py); the whole path,
  `word_graphs`, `text_graphs`, `unit_graphs` (unit_graphs.py).
* Dataset caches: `cached_word_graphs`, `WordGraphCache` (cache.py; its
  key, formats, files and build in cache_key.py, cache_stores.py,
  cache_files.py, cache_build.py).
"""
from glomo_jax.transfer.align import align_graphs, piece_to_unit
from glomo_jax.transfer.cache import WordGraphCache, cached_word_graphs
from glomo_jax.transfer.cache_key import cache_key, dataset_fingerprint
from glomo_jax.transfer.candidates import (candidate_names, graph_candidates,
                                           propagated_candidates)
from glomo_jax.transfer.encode import encode_texts, encode_word_lists, unit_of_piece_from_spans
from glomo_jax.transfer.fusion import GatedFusion, graph_features
from glomo_jax.transfer.layer import MODES, GraphTransfer
from glomo_jax.transfer.mixture import GraphMixture
from glomo_jax.transfer.uniform import uniform_graphs
from glomo_jax.transfer.unit_graphs import text_graphs, unit_graphs, word_graphs

__all__ = ["GraphTransfer", "MODES", "GraphMixture", "GatedFusion", "WordGraphCache",
           "align_graphs", "cache_key", "cached_word_graphs", "candidate_names",
           "dataset_fingerprint", "encode_texts", "encode_word_lists", "graph_candidates",
           "graph_features", "piece_to_unit", "propagated_candidates", "text_graphs",
           "uniform_graphs", "unit_graphs", "unit_of_piece_from_spans", "word_graphs"]
