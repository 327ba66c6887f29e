"""Numerical building blocks shared by the models (pure jax functions)."""
from glomo_jax.ops.chunked_cross_entropy import tied_softmax_cross_entropy
from glomo_jax.ops.embedding_lookup import embedding_lookup
from glomo_jax.ops.sparse_graph import allowed_sources, normalize_graph
