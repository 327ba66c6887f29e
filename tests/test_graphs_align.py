"""Pieces -> units: piece_to_unit and the pooling rule of align_graphs."""
import numpy as np
import pytest

from glomo_jax.graphs import align_graphs, piece_to_unit


def normalised(rng, shape):
  g = rng.uniform(0.1, 1.0, shape)
  return (g / g.sum(-1, keepdims=True)).astype(np.float32)


def test_piece_to_unit():
  starts = np.array([0, 2, 3, 3, 5])               # word 2 has no piece
  np.testing.assert_array_equal(piece_to_unit(starts, 7), [0, 0, 1, 3, 3, -1, -1])
  np.testing.assert_array_equal(piece_to_unit(starts, 4), [0, 0, 1, 3])
  np.testing.assert_array_equal(piece_to_unit(np.array([0]), 3), [-1, -1, -1])
  with pytest.raises(ValueError):
    piece_to_unit(np.array([0, 3, 2]), 3)


def test_two_piece_word_row_is_the_mean_and_columns_are_summed():
  rng = np.random.default_rng(0)
  g = normalised(rng, (1, 1, 4, 4))                 # rows are distributions
  unit = np.array([[0, 0, 1, 2]])                   # word 0 = pieces 0, 1
  out = np.asarray(align_graphs(g, unit, 3, self_loops=True))
  assert out.shape == (1, 1, 3, 3)
  r = g[0, 0]
  def pooled(row):
    return np.array([row[0] + row[1], row[2], row[3]])
  np.testing.assert_allclose(out[0, 0, 0], pooled((r[0] + r[1]) / 2), rtol=1e-6)
  np.testing.assert_allclose(out[0, 0, 1], pooled(r[2]), rtol=1e-6)
  np.testing.assert_allclose(out[0, 0, 2], pooled(r[3]), rtol=1e-6)
  np.testing.assert_allclose(out.sum(-1), 1.0, rtol=1e-6)


def test_weight_outside_units_is_dropped_and_rows_renormalised():
  g = np.zeros((1, 4, 4), np.float32)
  g[0, 2] = [0.2, 0.2, 0.3, 0.3]                    # 0.3 on piece 3 (in no unit)
  g[0, 3] = [1.0, 0.0, 0.0, 0.0]                    # a piece in no unit: no row
  g[0, 1] = [0.0, 0.0, 0.0, 1.0]                    # all of it outside the units
  unit = np.array([[0, 0, 1, -1]])
  out = np.asarray(align_graphs(g, unit, 4, self_loops=True))
  np.testing.assert_allclose(out[0, 1], [0.4 / 0.7, 0.3 / 0.7, 0, 0], rtol=1e-6)
  # unit 0 = mean(row 0 = 0, row 1 = all outside) -> nothing left: a zero row
  np.testing.assert_array_equal(out[0, 0], 0.0)
  # units 2, 3 have no pieces: zero rows and columns
  np.testing.assert_array_equal(out[0, 2:], 0.0)
  np.testing.assert_array_equal(out[0, :, 2:], 0.0)


def test_self_loops_are_dropped_by_default():
  g = np.zeros((1, 3, 3), np.float32)
  g[0, 1] = [1.0, 0.0, 0.0]                         # piece 1 reads piece 0: same word
  g[0, 2] = [0.5, 0.25, 0.25]
  unit = np.array([[0, 0, 1]])
  kept = np.asarray(align_graphs(g, unit, 2, self_loops=True))
  np.testing.assert_allclose(kept[0], [[1.0, 0.0], [0.75, 0.25]], rtol=1e-6)
  dropped = np.asarray(align_graphs(g, unit, 2))
  np.testing.assert_allclose(dropped[0], [[0.0, 0.0], [1.0, 0.0]], rtol=1e-6)


def test_rows_remain_distributions_with_leading_axes():
  rng = np.random.default_rng(1)
  g = normalised(rng, (2, 3, 2, 7, 7))
  g[:, :, :, 0] = 0.0                               # some all-zero rows
  unit = np.array([[0, 0, 1, 1, 1, 2, -1], [0, 1, 1, 3, 3, 3, 3]])
  out = np.asarray(align_graphs(g, unit, 5, self_loops=True))
  assert out.shape == (2, 3, 2, 5, 5)
  sums = out.sum(-1)
  assert np.all((np.abs(sums - 1) < 1e-5) | (sums == 0))
  assert np.all(out >= 0)
  # leading axes are independent: slice by slice gives the same
  single = np.asarray(align_graphs(g[:, 1, 0], unit, 5, self_loops=True))
  np.testing.assert_allclose(out[:, 1, 0], single, rtol=1e-6)
  # example 1: unit 2 has no pieces, unit 4 does not exist -> zero rows
  np.testing.assert_array_equal(sums[1, ..., [2, 4]], 0.0)


def test_mismatched_shapes_are_rejected():
  with pytest.raises(ValueError):
    align_graphs(np.zeros((1, 4, 4)), np.zeros((1, 3), np.int32), 2)


def one_hot_alignment(graphs, unit, num_units, self_loops):
  """The alignment as one-hot membership products (glomo_jax before segment
  sums), in float64: rows pooled by R^T G, columns by G M."""
  member = (unit[..., None] == np.arange(num_units)).astype(np.float64)   # [B, P, U]
  row_mean = member / np.maximum(member.sum(1), 1)[:, None, :]
  flat = graphs.reshape(graphs.shape[0], -1, *graphs.shape[-2:]).astype(np.float64)
  pooled = np.einsum("bpu,bnpq,bqv->bnuv", row_mean, flat, member)
  if not self_loops:
    pooled = pooled * (1 - np.eye(num_units))
  total = pooled.sum(-1, keepdims=True)
  pooled = np.where(total > 0, pooled / np.where(total > 0, total, 1), 0)
  return pooled.reshape(*graphs.shape[:-2], num_units, num_units)


@pytest.mark.parametrize("self_loops", [False, True])
def test_segment_sums_equal_the_one_hot_products(self_loops):
  """Units of 1 to 5 pieces, padding pieces, a unit without pieces, a piece
  between units in none, pieces of a unit not side by side, float16 graphs
  with empty rows (dead heads)."""
  rng = np.random.default_rng(2)
  batch, pieces, units = 3, 24, 9
  g = normalised(rng, (batch, 2, 3, pieces, pieces)) * (rng.random((batch, 2, 3, pieces, 1)) < 0.8)
  g = g.astype(np.float16)
  unit = np.full((batch, pieces), -1, np.int32)
  unit[0, :20] = np.repeat(np.arange(8), [1, 2, 1, 5, 3, 1, 4, 3])
  unit[1, :15] = [0, 0, 1, -1, 2, 3, 3, 4, 6, 6, 6, 7, 8, 8, 8]     # unit 5 has no piece
  unit[2, :] = rng.integers(-1, units, pieces)                     # any order
  out = np.asarray(align_graphs(g, unit, units, self_loops=self_loops))
  assert out.dtype == np.float32
  np.testing.assert_allclose(out, one_hot_alignment(g, unit, units, self_loops),
                             rtol=2e-6, atol=1e-7)


def test_whole_word_rows_come_from_the_last_piece_forward_and_the_first_backward():
  rng = np.random.default_rng(3)
  g = normalised(rng, (1, 2, 5, 5))                 # [B, 2L = 2 (forward, backward), P, P]
  unit = np.array([[0, 1, 1, 1, 2]])                # word 1 = pieces 1, 2, 3
  out = np.asarray(align_graphs(g, unit, 3, rows="whole_word"))
  mean = np.asarray(align_graphs(g, unit, 3))
  def pooled(row, word):                            # columns summed, own word dropped
    cols = np.array([row[0], row[1] + row[2] + row[3], row[4]])
    cols[word] = 0
    return cols / cols.sum()
  np.testing.assert_allclose(out[0, 0, 1], pooled(g[0, 0, 3], 1), rtol=1e-6)   # last piece
  np.testing.assert_allclose(out[0, 1, 1], pooled(g[0, 1, 1], 1), rtol=1e-6)   # first piece
  assert not np.allclose(out[0, :, 1], mean[0, :, 1])
  np.testing.assert_allclose(out[0, :, [0, 2]], mean[0, :, [0, 2]], rtol=1e-6)  # one piece


def test_whole_word_rows_equal_the_one_hot_products_of_the_end_pieces():
  """Against NumPy: the end pieces found by loops, the rest by the one-hot
  reference; heads after the layer axis, padding, pieces of a unit apart."""
  rng = np.random.default_rng(4)
  batch, pieces, units = 2, 16, 7
  g = normalised(rng, (batch, 4, 2, pieces, pieces))   # 2L = 4: 2 forward, 2 backward
  unit = np.full((batch, pieces), -1, np.int32)
  unit[0, :13] = np.repeat(np.arange(6), [1, 3, 1, 2, 4, 2])
  unit[1, :] = rng.integers(-1, units, pieces)
  reading = np.zeros((batch, 4, 1, pieces, 1))
  for b in range(batch):
    for u in set(unit[b]) - {-1}:
      where = np.flatnonzero(unit[b] == u)
      reading[b, :2, 0, where.max()] = 1           # forward: the last piece
      reading[b, 2:, 0, where.min()] = 1           # backward: the first
  want = one_hot_alignment(g * reading, unit, units, self_loops=False)
  out = np.asarray(align_graphs(g, unit, units, rows="whole_word"))
  np.testing.assert_allclose(out, want, rtol=2e-6, atol=1e-7)
  with pytest.raises(ValueError, match="2L"):
    align_graphs(g[:, :3], unit, units, rows="whole_word")
  with pytest.raises(ValueError, match="rows must be"):
    align_graphs(g, unit, units, rows="last")
