"""Graph transfer (paper §2.2–2.3, DESIGN.md §3): frozen predictor graphs → task
features.

* `GraphTransfer` (layer.py): the layer task models call, mode 'glomo' |
  'uniform' | 'none'.
* Its parts: `graph_candidates` / `propagated_candidates` (candidates.py),
  `GraphMixture` (mixture.py), `uniform_graphs` (uniform.py), `graph_features`
  / `GatedFusion` (fusion.py).
* Pieces → words: `piece_to_unit`, `align_graphs`, `word_graphs`; from raw
  text by characters: `unit_of_piece_from_spans`, `text_graphs` (align.py).
* Dataset caches: `cached_word_graphs`, `WordGraphCache` (cache.py).
"""
from glomo_jax.transfer.align import (align_graphs, encode_texts, encode_word_lists,
                                      piece_to_unit, text_graphs, unit_graphs,
                                      unit_of_piece_from_spans, word_graphs)
from glomo_jax.transfer.cache import (WordGraphCache, cache_key, cached_word_graphs,
                                      dataset_fingerprint)
from glomo_jax.transfer.candidates import (candidate_names, graph_candidates,
                                           propagated_candidates)
from glomo_jax.transfer.fusion import GatedFusion, graph_features
from glomo_jax.transfer.layer import MODES, GraphTransfer
from glomo_jax.transfer.mixture import GraphMixture
from glomo_jax.transfer.uniform import uniform_graphs

__all__ = ["GraphTransfer", "MODES", "GraphMixture", "GatedFusion", "WordGraphCache",
           "align_graphs", "cache_key", "cached_word_graphs", "candidate_names",
           "dataset_fingerprint", "encode_texts", "encode_word_lists", "graph_candidates",
           "graph_features", "piece_to_unit", "propagated_candidates", "text_graphs",
           "uniform_graphs", "unit_graphs", "unit_of_piece_from_spans", "word_graphs"]
