"""Causal 2-D convolution stacks over pixels in raster order (the key and query
CNNs of the graph predictor when the units are pixels).

Units are the H·W pixels of an image in raster order, t = r·W + c. Output t
must depend only on the pixels at raster positions ≤ t: the rows above, and
the pixels of its own row up to and including itself. A stack of masked k×k
convolutions (PixelCNN's mask B) misses part of that region (the "blind
spot"); like the gated PixelCNN (van den Oord et al. 2016) two stacks are
used instead:

  vertical    v_0 = x shifted down one row (row r holds row r − 1; row 0 zeros)
              v_l = act(norm(conv_{k×k, rows r−k+1 … r}(v_{l−1})))
  horizontal  h_0 = x
              h_l = act(norm(conv_{1×k, columns c−k+1 … c}(h_{l−1}) + W_l v_l))

v_l at row r sees only rows < r (its input was shifted once; the k×k
convolution reaches rows ≤ r of its input), k // 2 columns further either
side per layer, so the region above has no hole; h_l adds the same row up to
column c. The output is h_L. Convolutions are im2col + one GEMM (`ops.dense`),
as the text stacks, so the kernel gradient is a GEMM on every backend.
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from glomo_jax.models.causal_conv import NormedConv
from glomo_jax.models.initializers import fan_in_uniform
from glomo_jax.ops.dense import dense


def conv2d(x: jax.Array, kernel: jax.Array, rows: tuple[int, int],
           cols: tuple[int, int], bias: jax.Array | None = None) -> jax.Array:
  """2-D convolution as im2col + one GEMM.

  Args:
    x: [batch, H, W, c_in].
    kernel: [kh, kw, c_in, c_out].
    rows, cols: zeros padded (before, after) on each axis.
    bias: optional [c_out].

  Returns:
    [batch, H + Σrows − kh + 1, W + Σcols − kw + 1, c_out]; output (p, q) =
    Σ_{i,j} x_padded[p + i, q + j] · kernel[i, j] (+ bias).
  """
  kh, kw, c_in, c_out = kernel.shape
  xp = jnp.pad(x, ((0, 0), rows, cols, (0, 0)))
  n, m = xp.shape[1] - kh + 1, xp.shape[2] - kw + 1
  patches = jnp.concatenate([xp[:, i:i + n, j:j + m] for i in range(kh)
                             for j in range(kw)], axis=-1)      # [B, n, m, kh·kw·c_in]
  return dense(patches, kernel.reshape(kh * kw * c_in, c_out), bias)


class PixelConvStack(NormedConv):
  """Vertical + horizontal causal stacks (module docstring) on pixel units.

  Attributes:
    num_layers: L_conv ≥ 1 layers of each stack.
    features: output channels (both stacks).
    image_shape: (H, W); the unit axis of the input holds H·W pixels.
    kernel_size: k, odd: the vertical k×k window is centred on the column.
    (and the keyword-only `NormedConv` fields: norm 'batch' is over batch
    and pixels, 'layer' per pixel.)
  """
  num_layers: int
  features: int
  image_shape: tuple[int, int]
  kernel_size: int = 3

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array | None, train: bool) -> jax.Array:
    """x: [batch, H·W, d] in raster order; mask: optional [batch, H·W] (1 = real
    pixel; others are zeroed first) -> [batch, H·W, features]; output t
    depends only on inputs at raster positions ≤ t (with norm 'layer', or
    'batch' in evaluation: in training, batch statistics are taken over
    every pixel of the batch, as the text stacks' over every position)."""
    height, width = self.image_shape
    b, t, c = x.shape
    k = self.kernel_size
    if t != height * width:
      raise ValueError(f"{t} units are not the {height}×{width} pixels of image_shape")
    if k % 2 != 1:
      raise ValueError(f"pixel convolutions need an odd kernel_size, got {k}")
    if mask is not None:
      x = x * mask[:, :, None].astype(x.dtype)
    x = x.astype(self.dtype).reshape(b, height, width, c)
    v = jnp.pad(x, ((0, 0), (1, 0), (0, 0), (0, 0)))[:, :height]  # row r ← row r − 1
    h = x
    for i in range(self.num_layers):
      c_in = v.shape[-1]
      kernel = lambda name, shape, fan: self.param(  # noqa: E731
          name, fan_in_uniform(fan), shape, self.param_dtype)
      v_kernel = kernel(f"vertical_{i}_kernel", (k, k, c_in, self.features), k * k * c_in)
      v_bias = kernel(f"vertical_{i}_bias", (self.features,), k * k * c_in)
      v = conv2d(v, v_kernel.astype(self.dtype), (k - 1, 0), (k // 2, k // 2), v_bias)
      v = jax.nn.relu(self.normalise(v, f"vertical_{i}_norm", train))
      h_kernel = kernel(f"horizontal_{i}_kernel", (1, k, c_in, self.features), k * c_in)
      h_bias = kernel(f"horizontal_{i}_bias", (self.features,), k * c_in)
      link = kernel(f"link_{i}_kernel", (self.features, self.features), self.features)
      y = conv2d(h, h_kernel.astype(self.dtype), (0, 0), (k - 1, 0), h_bias)
      y = y + dense(v, link.astype(self.dtype))
      h = jax.nn.relu(self.normalise(y, f"horizontal_{i}_norm", train))
    return h.reshape(b, t, self.features)
