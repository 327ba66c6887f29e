"""The pixel context window: which pixels a position predicts.

The paper (§3.5): "a PixelCNN-like setup, with a sequence prediction window of
size 3×3 (essentially only predicting the bottom-right quarter under the
mask)". Our reading: the window is the 3×3 block centred on the position
(r, c); under the raster-order mask the position may predict only the window
pixels that come after it, which are

  (r, c+1), (r+1, c−1), (r+1, c), (r+1, c+1)        (`WINDOW_OFFSETS`)

in raster order: the right neighbour and the three pixels below, i.e. the
bottom-right quarter (2×2 without the centre) plus the bottom-left pixel,
which also follows the position in raster order. Window pixels outside the
image are not predicted (weight 0): the last column has no right or
bottom-right target, the first column no bottom-left one, the last row only
its right neighbour, and the last pixel none.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

WINDOW_OFFSETS = ((0, 1), (1, -1), (1, 0), (1, 1))   # (row, column) steps, raster order


def window_targets(height: int, width: int, positions) -> tuple[jax.Array, jax.Array]:
  """Raster indices of the window pixels each position predicts.

  Args:
    height, width: image size H, W.
    positions: int [n] raster indices t = r·W + c of the predicting pixels.

  Returns:
    (indices int32 [n, 4], valid bool [n, 4]): target pixel t' of each
    `WINDOW_OFFSETS` entry (0 where invalid) and whether it lies in the image.
  """
  positions = jnp.asarray(positions, jnp.int32)
  offsets = jnp.asarray(WINDOW_OFFSETS, jnp.int32)
  rows = positions[:, None] // width + offsets[None, :, 0]
  cols = positions[:, None] % width + offsets[None, :, 1]
  valid = (rows < height) & (cols >= 0) & (cols < width)
  return jnp.where(valid, rows * width + cols, 0), valid
