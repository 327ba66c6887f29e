"""From the predictor's pieces to the task model's units (words): the math.

The predictor reads SentencePiece pieces; task models read words (or other
units). `align_graphs` pools piece-level graphs [.., P_target, P_source] into
unit-level graphs [.., U_target, U_source]:

1. target rows: the row of unit u is the mean of the rows of u's pieces;
2. source columns: the weights on the pieces of each unit are summed;
3. weight on pieces outside every unit (unit −1: padding, or pieces the
   caller leaves out) is dropped, and so, by default, is weight between
   pieces of the same unit: the unit graphs are strictly causal, without a
   diagonal, as the authors' word graphs are (``self_loops=True`` keeps it
   on the diagonal, u → u);
4. each row is renormalised to sum to 1; a row with no weight left stays 0.

So unit rows are distributions over other units (or 0 when no weight
survives), and where every piece row of u sums to 1 with all its weight on
other units, step 4 changes nothing: the row of a 2-piece word is then the
mean of its two piece rows, with the columns of each word summed. Units
without pieces have zero rows and columns; the first unit's forward row (and
the last one's backward row) is 0, as at piece level.

``rows="whole_word"`` replaces rule 1 (graphs [B, 2L, ..., P, P], the L
forward layers first): a unit's forward row is its last piece's row and its
backward row its first piece's, the pieces whose causal query has read the
whole unit. Under rule 1 a unit's forward row leans on its first piece's
row, whose query has read nothing of the unit after that piece (its later
pieces' weight on the first piece is dropped by rule 3). Units of one piece
get the same rows either way.

The pieces and their units come from `glomo_jax.graphs.encode`; the whole
path from words or texts to unit graphs is `glomo_jax.graphs.unit_graphs`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def piece_to_unit(word_start, num_pieces: int) -> np.ndarray:
  """Unit index of each piece, from `Tokenizer.encode_words`'s word_start.

  Args:
    word_start: int [U + 1]; unit u covers pieces word_start[u]:word_start[u+1]
      (empty ranges allowed), the last entry is the number of pieces.
    num_pieces: length P of the output (pieces beyond word_start[-1] are
      padding; a P smaller than word_start[-1] cuts the last pieces).

  Returns:
    int32 [P]: the unit of each piece, −1 for pieces in no unit.
  """
  starts = np.asarray(word_start, dtype=np.int64)
  if starts.ndim != 1 or starts.size < 1 or np.any(np.diff(starts) < 0) or starts[0] != 0:
    raise ValueError("word_start must be a non-decreasing int vector starting at 0, "
                     f"got {starts}")
  pieces = np.arange(num_pieces)
  unit = np.searchsorted(starts, pieces, side="right") - 1
  return np.where(pieces < starts[-1], unit, -1).astype(np.int32)


ROWS = ("mean", "whole_word")


def align_graphs(graphs, unit_of_piece, num_units: int, *,
                 self_loops: bool = False, rows: str = "mean") -> jax.Array:
  """Piece-level graphs -> unit-level graphs (rule: module docstring).

  Args:
    graphs: [B, ..., P_target, P_source] (any leading axes after B, e.g. 2L, K;
      [B, 2L, ..., P, P], forward layers first, for rows="whole_word").
    unit_of_piece: int [B, P]: the unit of each piece in [0, num_units), or −1
      for pieces in no unit (padding).
    num_units: U.
    self_loops: keep weight between pieces of the same unit (on the
      diagonal); default False: no diagonal, as the authors' word graphs.
    rows: "mean" (a unit's row from all its pieces' rows) or "whole_word"
      (forward rows from each unit's last piece, backward rows from its
      first; module docstring).

  Returns:
    [B, ..., U_target, U_source], dtype of graphs (at least float32); each row
    sums to 1 or is all 0.
  """
  graphs = jnp.asarray(graphs)
  graphs = graphs.astype(jnp.promote_types(graphs.dtype, jnp.float32))
  unit = jnp.asarray(unit_of_piece)
  if unit.ndim != 2 or graphs.ndim < 3 or graphs.shape[0] != unit.shape[0] or \
      graphs.shape[-2:] != (unit.shape[1], unit.shape[1]):
    raise ValueError(f"graphs [B, ..., P, P] and unit_of_piece [B, P] do not fit: "
                     f"{graphs.shape} and {unit.shape}")
  if rows not in ROWS:
    raise ValueError(f"rows must be one of {ROWS}, got {rows!r}")
  batch, pieces = unit.shape
  lead = graphs.shape[1:-2]
  if rows == "whole_word":
    if not lead or lead[0] % 2:
      raise ValueError("rows='whole_word' needs graphs [B, 2L, ..., P, P] (forward layers, "
                       f"then backward), got {graphs.shape}")
    first, last = jax.vmap(_end_pieces, in_axes=(0, None))(unit, num_units)   # [B, P] each
    reading = jnp.stack([last, first], axis=1).astype(graphs.dtype)          # [B, 2, P]
    reading = reading.reshape(batch, 2, *([1] * (len(lead) - 1)), pieces, 1)
    split = graphs.reshape(batch, 2, lead[0] // 2, *lead[1:], pieces, pieces)
    graphs = (split * reading[:, :, None]).reshape(graphs.shape)
  flat = graphs.reshape(batch, -1, pieces, pieces)
  # sums over the pieces of each unit; a row's sum and its mean (rule 1)
  # differ by a factor that the renormalisation (rule 4) removes
  pooled = jax.vmap(_summed_by_unit, in_axes=(0, 0, None))(flat, unit, num_units)
  if not self_loops:
    pooled = pooled * (1 - jnp.eye(num_units, dtype=pooled.dtype))
  total = pooled.sum(axis=-1, keepdims=True)
  pooled = jnp.where(total > 0, pooled / jnp.where(total > 0, total, 1), 0)
  return pooled.reshape(batch, *lead, num_units, num_units)


def _summed_by_unit(graphs, unit, num_units: int) -> jax.Array:
  """Sums of one example's piece graphs over the pieces of each unit.

  Segment sums, not products with one-hot membership matrices: the rows
  (targets) are summed by unit, then the columns (sources) of the result.
  Pieces of unit −1 are out of the segments' range, so their rows and
  columns are dropped.

  Args:
    graphs: [N, P_target, P_source].
    unit: int [P], the unit of each piece or −1.

  Returns:
    [N, U_target, U_source]: entry (u, v) is the sum of graphs[:, p, q] over
    the pieces p of u and q of v.
  """
  def by_unit(x):                   # [P, ...] -> [U, ...]
    return jax.ops.segment_sum(x, unit, num_units, mode="drop")   # −1: dropped
  rows = jax.vmap(by_unit)(graphs)                                 # [N, U, P]
  return jax.vmap(lambda r: by_unit(r.T).T)(rows)                  # [N, U, U]


def _end_pieces(unit, num_units: int) -> tuple[jax.Array, jax.Array]:
  """bool [P] each: whether a piece is the first, and the last, of its unit
  (False for pieces of unit −1). unit: int [P]."""
  position = jnp.arange(unit.shape[0])
  first = jax.ops.segment_min(position, unit, num_units, mode="drop")
  last = jax.ops.segment_max(position, unit, num_units, mode="drop")
  own = jnp.clip(unit, 0, num_units - 1)
  inside = unit >= 0
  return inside & (position == first[own]), inside & (position == last[own])



# compiled once per (shapes, num_units, self_loops, rows)
align_graphs_jit = jax.jit(align_graphs, static_argnames=("num_units", "self_loops", "rows"))
