"""Evaluations of learned graphs."""
from glomo_jax.eval.arcs import ArcAccumulator, arc_scores
