"""Evaluations of learned graphs."""
from glomo_jax.eval.arcs import ArcAccumulator, arc_scores
from glomo_jax.eval.graph_stats import graph_statistics, row_health, uniform_reference
from glomo_jax.eval.pixel_stats import pixel_graph_statistics
