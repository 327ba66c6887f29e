"""Graph transfer (paper §2.2–2.3; docs/design.md §4): frozen predictor graphs → task
features. The graphs themselves (from texts, aligned to words, cached per
dataset) are made by `glomo_jax.graphs`.

* `GraphTransfer` (layer.py): the layer task models call, mode 'glomo' |
  'uniform' | 'none'.
* Its parts: `graph_candidates` / `propagated_candidates` (candidates.py),
  `GraphMixture` (mixture.py), `uniform_graphs` (uniform.py), `graph_features`
  / `GatedFusion` (fusion.py).
* The options of a task model's transfer and the variants: `TransferOptions`,
  the variant registry `VARIANTS` (`Variant`: reads graphs, where the layer
  sits), `TEXT_VARIANTS`, `PIXEL_VARIANTS`, `GRAPH_VARIANTS` (options.py).
"""
from glomo_jax.transfer.candidates import (candidate_names, graph_candidates,
                                           propagated_candidates)
from glomo_jax.transfer.fusion import GatedFusion, graph_features
from glomo_jax.transfer.layer import MODES, GraphTransfer
from glomo_jax.transfer.mixture import GraphMixture
from glomo_jax.transfer.uniform import uniform_graphs

__all__ = ["GraphTransfer", "MODES", "GraphMixture", "GatedFusion", "candidate_names",
           "graph_candidates", "graph_features", "propagated_candidates", "uniform_graphs"]
