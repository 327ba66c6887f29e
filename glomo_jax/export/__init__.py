"""Exporting the frozen graph predictor, and loading it without the training loop.

  export_graph_predictor("/exports/glomo", config, state_variables, tokenizer,
                         metadata={"step": 100_000})
  predictor = load_graph_predictor("/exports/glomo")
  graphs, tokens, mask, pieces = predictor.graphs_from_text(["a sentence ."])

The package has three parts:
  format     what is written: the export tree, the manifest and format_version
             1 (documented in its docstring), hashing, atomic writes, reading
             and verifying an export.
  subset     which parameters an export holds: those `GLoMo.graphs` (or, for
             pixels, `PixelGLoMo.graphs`) reads.
  predictor  the loaded object, `ExportedGraphPredictor`, and
             `load_graph_predictor`, built on the format's reader.
The runtime depends on the format, never the reverse.
"""
from glomo_jax.export.format import (FORMAT_VERSION, GRAPH_LAYOUT, KIND,
                                     MANIFEST_FILENAME, PARAMS_FILENAME,
                                     TOKENIZER_FILENAME, export_graph_predictor)
from glomo_jax.export.predictor import (ExportedGraphPredictor, ExportedPixelGraphPredictor,
                                        load_graph_predictor)
from glomo_jax.export.subset import COLLECTIONS, graph_predictor_variables

__all__ = [
    "COLLECTIONS", "FORMAT_VERSION", "GRAPH_LAYOUT", "KIND", "MANIFEST_FILENAME",
    "PARAMS_FILENAME", "TOKENIZER_FILENAME", "ExportedGraphPredictor",
    "ExportedPixelGraphPredictor",
    "export_graph_predictor", "graph_predictor_variables", "load_graph_predictor",
]
