"""Candidate graphs for the transfer mixture (paper §2.2; docs/design.md §4).

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

Two forms of the same candidates:

* `graph_candidates`: the matrices C_c themselves, [B, C, T, T]; the
  products cost O(T³) and the stack C·T² floats an example. For looking at
  graphs and for short inputs (`GraphTransfer` mixes them where
  `mixtures_are_cheaper`).
* `propagated_candidates`: C_c H (each
  candidate applied to the features H [B, T, d]), [B, C, T, d], without
  forming any product matrix: Λ^l H = G^l (Λ^{l−1} H), so every candidate
  costs one [T, T]·[T, d] product and memory stays C·T·d floats an example
  beyond the graphs themselves. This is what makes SQuAD's long passages
  fit: the product matrices grow as C·T² an example.
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


def propagated_candidates(graphs, h, mask, num_layers: int
                          ) -> tuple[jax.Array, jax.Array]:
  """Every candidate applied to the features, without forming the candidates.

  Equal (to float rounding) to ``einsum('bcts,bsd->bctd', C, H)`` with the
  candidates C of `graph_candidates` after zeroing the graphs' padding rows
  and columns, and H zeroed at padding; but built as
  G^l H and G^l (Λ^{l−1} H), one product of a graph with a [T, d] matrix per
  candidate (module docstring).

  Args:
    graphs: [B, 2L, K, T, T] predictor graphs, [.., target, source] (forward
      layers, then backward; any float dtype, read in float32). Entries in
      padding rows or columns are ignored (they must be finite).
    h: [B, T, d] features.
    mask: [B, T] bool (True = real position).
    num_layers: L.

  Returns:
    (forward, backward), each float32 [B, (2L−1)·K, T_target, d], candidate
    order as `graph_candidates`; rows of padding targets are 0.
  """
  graphs = jnp.asarray(graphs)
  batch, length, dim = h.shape
  if graphs.ndim != 5 or graphs.shape[1] != 2 * num_layers or \
      graphs.shape[0] != batch or graphs.shape[-2:] != (length, length):
    raise ValueError(f"graphs must be [batch={batch}, 2L={2 * num_layers}, K, "
                     f"T={length}, T={length}], got shape {graphs.shape}")
  heads = graphs.shape[2]
  rows = jnp.asarray(mask).astype(bool)[:, None, :, None]          # [B, 1, T, 1]
  # Zeroing H at padding sources and the results at padding targets is the
  # same as zeroing the graphs' padding columns and rows.
  h = jnp.where(rows[:, 0], jnp.asarray(h, jnp.float32), 0)
  h_heads = jnp.broadcast_to(h[:, None], (batch, heads, length, dim))

  def apply(layer, x):                        # G^layer x: [B, K, T, w], padding targets 0
    g = graphs[:, layer].astype(jnp.promote_types(graphs.dtype, jnp.float32))
    out = jnp.einsum("bkts,bksw->bktw", g, x, precision=jax.lax.Precision.HIGHEST)
    return jnp.where(rows, out, 0)

  def direction(first: int) -> jax.Array:
    product = apply(first, h_heads)                                # Λ^1 H = G^1 H
    blocks = [product]
    for layer in range(first + 1, first + num_layers):
      both = apply(layer, jnp.concatenate([h_heads, product], axis=-1))
      product = both[..., dim:]                                    # Λ^l H
      blocks += [both[..., :dim], product]                         # G^l H, Λ^l H
    stacked = jnp.stack(blocks, axis=1)                            # [B, 2L−1, K, T, d]
    return stacked.reshape(batch, (2 * num_layers - 1) * heads, length, dim)

  return direction(0), direction(num_layers)


def mixtures_are_cheaper(heads: int, length: int, dim: int, num_layers: int,
                         num_mixtures: int) -> bool:
  """Whether `GraphTransfer` should mix the candidate matrices and apply each
  mixture to H, rather than apply each candidate to H and mix the results.

  Multiply-adds per direction and example, forward and backward (H needs its
  gradient; the graphs get none), with C = (2L − 1)·K candidates and n
  mixtures:

    candidates applied: 2·K·(2L − 1)·T²·d  (G^l [H ; Λ^{l−1} H], and back);
    mixtures formed:    (L − 1)·K·T³       (the products Λ^l, forward only)
                        + 2·n·C·T²         (mixing, and the weights' gradient)
                        + 3·n·T²·d         (M_n H, and its two gradients).

  Mixtures are chosen when they cost fewer multiply-adds and their candidate
  matrices (C·T² floats an example) hold at most twice the applied candidates'
  (C·T·d): T ≤ 2d. With the CPU-scale tasks' L 3, K 4, n 2 and d 100 that is
  T ≤ 200 (IMDB's 128 words, MNLI's 64), not SQuAD's passages of hundreds of words.
  """
  count = (2 * num_layers - 1) * heads
  applied = 2 * heads * (2 * num_layers - 1) * length ** 2 * dim
  formed = ((num_layers - 1) * heads * length ** 3 + 2 * num_mixtures * count * length ** 2
            + 3 * num_mixtures * length ** 2 * dim)
  return formed < applied and length <= 2 * dim
