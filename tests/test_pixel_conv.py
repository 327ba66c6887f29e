"""Pixel key/query stacks: causal in raster order, no blind spot, conv2d = lax."""
import jax
import numpy as np
import pytest

from glomo_jax.models.pixel_conv import PixelConvStack, conv2d

H, W, C, F = 5, 6, 3, 4


def test_conv2d_is_the_lax_convolution():
  rng = np.random.default_rng(0)
  x = rng.standard_normal((2, H, W, C)).astype(np.float32)
  kernel = rng.standard_normal((3, 3, C, F)).astype(np.float32)
  got = conv2d(x, kernel, (2, 0), (1, 1))
  expected = jax.lax.conv_general_dilated(x, kernel, (1, 1), ((2, 0), (1, 1)),
                                          dimension_numbers=("NHWC", "HWIO", "NHWC"))
  assert got.shape == (2, H, W, F)
  np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("norm", ["batch", "layer"])
def test_output_depends_on_exactly_the_earlier_pixels(norm):
  """d out[t] / d x[s] is 0 for every later pixel s > t, at the borders too;
  and nonzero for the pixel itself, its left neighbour and the pixels above,
  including above-right (no blind spot)."""
  stack = PixelConvStack(2, F, (H, W), kernel_size=3, norm=norm)
  x = np.random.default_rng(1).standard_normal((1, H * W, C)).astype(np.float32)
  variables = stack.init(jax.random.PRNGKey(0), x, None, False)
  jac = jax.jit(jax.jacobian(lambda x: stack.apply(variables, x, None, False)))(x)
  dep = np.abs(np.asarray(jac)[0, :, :, 0]).sum(axis=(1, 3))   # [target t, source s]
  t_idx, s_idx = np.indices(dep.shape)
  assert np.all(dep[s_idx > t_idx] == 0)
  pos = lambda r, c: r * W + c                                  # noqa: E731
  for r, c in [(0, 0), (2, 0), (2, 3), (4, 5)]:
    t = pos(r, c)
    assert dep[t, t] > 0
    if c > 0:
      assert dep[t, pos(r, c - 1)] > 0
    if r > 0:
      for dc in (-1, 0, 1):
        if 0 <= c + dc < W:
          assert dep[t, pos(r - 1, c + dc)] > 0
    if r > 1 and c + 2 < W:
      assert dep[t, pos(r - 2, c + 2)] > 0      # two layers reach two columns right


def test_bad_shapes_are_rejected():
  x = np.zeros((1, H * W, C), np.float32)
  with pytest.raises(ValueError, match="pixels of image_shape"):
    PixelConvStack(1, F, (H, W + 1)).init(jax.random.PRNGKey(0), x, None, False)
  with pytest.raises(ValueError, match="odd kernel_size"):
    PixelConvStack(1, F, (H, W), kernel_size=2).init(jax.random.PRNGKey(0), x, None, False)
