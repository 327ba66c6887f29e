"""Evaluations of learned graphs."""
from glomo_jax.eval.arcs import ArcAccumulator, arc_scores
from glomo_jax.eval.graph_stats import graph_statistics, row_health, uniform_reference
from glomo_jax.eval.pixel_stats import pixel_graph_statistics
from glomo_jax.eval.conllu import Sentence, read_conllu
from glomo_jax.eval.syntax import SyntaxScores, maximum_spanning_trees
from glomo_jax.eval.treebank_alignment import score_treebank, untrained_twin
