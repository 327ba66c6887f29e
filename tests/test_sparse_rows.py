"""Packed graph rows (`glomo_jax.graphs.sparse_rows`) on hand-made blocks."""
import numpy as np
import pytest

from glomo_jax.graphs.sparse_rows import pack_rows, top_k_rows, uint8_levels, unpack_rows

BLOCK = np.array([[0.5, 0.3, 0.2, 0.0],      # 3 nonzeros, k 2: cut, renormalised
                  [0.6, 0.0, 0.4, 0.0],      # 2 nonzeros: exact
                  [0.0, 0.0, 0.0, 0.0],      # empty
                  [0.25, 0.25, 0.25, 0.25]], np.float32)


def test_top_k_rows_by_hand():
  sources, weights, kept = top_k_rows(BLOCK, 2)
  assert sorted(sources[0]) == [0, 1] and sorted(sources[1]) == [0, 2]
  np.testing.assert_allclose(sorted(weights[0]), [0.375, 0.625], rtol=1e-6)
  np.testing.assert_array_equal(sorted(weights[1]), [np.float32(0.4), np.float32(0.6)])
  np.testing.assert_array_equal(weights[2], [0, 0])
  np.testing.assert_allclose(kept, [0.8, 1, 1, 0.5], rtol=1e-6)
  np.testing.assert_allclose(weights[3].sum(), 1, rtol=1e-6)


def test_pack_keeps_only_nonzero_sources_and_unpacks_by_hand():
  counts, sources, values, kept = pack_rows(BLOCK, 2, "float32")
  assert counts.tolist() == [2, 2, 0, 2]                 # the empty row costs its count
  assert sources.size == values.size == 6
  np.testing.assert_allclose(kept, [0.8, 1, 0.5], rtol=1e-6)   # rows with weight only
  dense = unpack_rows(counts, sources, values, (4, 4))
  np.testing.assert_allclose(dense[0], [0.625, 0.375, 0, 0], rtol=1e-6)
  np.testing.assert_array_equal(dense[1:3], BLOCK[1:3])
  assert np.count_nonzero(dense[3]) == 2 and dense[3].sum() == 1
  # k at least n: every nonzero source is kept, nothing changes
  counts, sources, values, kept = pack_rows(BLOCK, 6, "float32")
  assert counts.tolist() == [3, 2, 0, 4] and (kept == 1).all()
  np.testing.assert_array_equal(unpack_rows(counts, sources, values, (4, 4)), BLOCK)
  # leading axes: rows in C order
  stacked = np.stack([BLOCK, BLOCK[::-1]])
  packed = pack_rows(stacked, 4, "float16")
  np.testing.assert_array_equal(unpack_rows(*packed[:3], (2, 4, 4), "float16"),
                                stacked.astype(np.float16))
  with pytest.raises(ValueError, match="dtype"):
    pack_rows(BLOCK, 2, "int8")


def test_uint8_levels_by_hand():
  levels = uint8_levels(np.array([[0.5, 0.25, 0.001, 0], [0, 0, 0, 0]], np.float32))
  assert levels.tolist() == [[255, 128, 1, 0], [0, 0, 0, 0]]     # 127.5 rounds to even
  # a weight under max / 510 rounds to 0: dropped, and counted as not kept
  row = np.array([[0.7, 0.2995, 0.0005]], np.float32)
  counts, sources, values, kept = pack_rows(row, 3, "uint8")
  assert counts.tolist() == [2] and values.dtype == np.uint8
  assert values.tolist() == [255, 109] and sorted(sources.tolist()) == [0, 1]
  np.testing.assert_allclose(kept, [0.9995], rtol=1e-6)
  back = unpack_rows(counts, sources, values, (1, 3))
  np.testing.assert_allclose(back, [[255 / 364, 109 / 364, 0]], rtol=1e-6)
