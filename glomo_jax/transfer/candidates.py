"""Candidate graphs for the transfer mixture (paper §2.2, DESIGN.md §3).

From the frozen predictor's graphs G^1 … G^L of one direction (each [K heads,
T_target, T_source]) the candidates are the layers themselves and the products
that propagate connections through several layers:

  Λ^1 = G^1,   Λ^l = G^l Λ^{l−1}   (l = 2 … L),

a matrix product per head in the [target, source] convention:
(G^l Λ^{l−1})[j, i] = Σ_m G^l[j, m] Λ^{l−1}[m, i]. Λ^1 equals G^1, so it is
not repeated: each direction has (2L − 1)·K candidates.

Order of the candidate axis (the authors' SQuAD code, ``gate_fuse 3``): blocks
of K heads, layer by layer with each layer's product right after it,

  [G^1, G^2, Λ^2, G^3, Λ^3, …, G^L, Λ^L],

so candidate c is head ``c % K`` of block ``c // K``; block 0 is G^1, block
2l − 3 is G^l and block 2l − 2 is Λ^l (l ≥ 2, 1-based l). `candidate_names`
spells this out.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def candidate_names(num_layers: int, num_heads: int) -> list[str]:
  """Labels of the candidate axis, e.g. ['G1/h0', …, 'G2/h0', …, 'Λ2/h0', …]."""
  blocks = ["G1"]
  for layer in range(2, num_layers + 1):
    blocks += [f"G{layer}", f"Λ{layer}"]
  return [f"{block}/h{head}" for block in blocks for head in range(num_heads)]


def _direction_candidates(graphs: jax.Array) -> jax.Array:
  """[B, L, K, T, T] of one direction -> [B, (2L−1)K, T, T] (module order)."""
  batch, num_layers, heads, length, _ = graphs.shape
  blocks = [graphs[:, 0]]
  product = graphs[:, 0]                                        # Λ^1 = G^1
  for layer in range(1, num_layers):
    g = graphs[:, layer]
    product = jnp.matmul(g, product, precision=jax.lax.Precision.HIGHEST)
    blocks += [g, product]
  stacked = jnp.stack(blocks, axis=1)                           # [B, 2L−1, K, T, T]
  return stacked.reshape(batch, (2 * num_layers - 1) * heads, length, length)


def graph_candidates(graphs, num_layers: int) -> tuple[jax.Array, jax.Array]:
  """Candidates of both directions.

  Args:
    graphs: [B, 2L, K, T, T] predictor graphs, [.., target, source]: the L
      forward layers, then the L backward layers (in original positions), as
      `ExportedGraphPredictor.predict` returns them.
    num_layers: L.

  Returns:
    (forward, backward), each [B, (2L−1)·K, T_target, T_source] in the order
    of the module docstring, dtype of `graphs`.

  Raises:
    ValueError: `graphs` is not 5-d with 2·num_layers layers and square graphs.
  """
  graphs = jnp.asarray(graphs)
  if graphs.ndim != 5 or graphs.shape[1] != 2 * num_layers or \
      graphs.shape[-1] != graphs.shape[-2]:
    raise ValueError(f"graphs must be [batch, 2L={2 * num_layers}, K, T, T], got "
                     f"shape {graphs.shape}")
  return (_direction_candidates(graphs[:, :num_layers]),
          _direction_candidates(graphs[:, num_layers:]))
