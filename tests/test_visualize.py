"""Graph heatmaps: PNGs written with the documented pixel size; clear errors."""
import matplotlib.image
import numpy as np
import pytest

from glomo_jax import visualize

PIECES = ["▁the", "▁cat", "▁sat", "▁on", "▁the", "▁mat"]


def random_graphs(layers=4, heads=3, length=6, seed=0):
  """[2L, K, T, T] row-normalised, forward lower / backward upper triangular."""
  rng = np.random.default_rng(seed)
  g = rng.random((layers, heads, length, length)).astype(np.float32)
  lower = np.tril(np.ones((length, length)), -1)
  g[: layers // 2] *= lower
  g[layers // 2:] *= lower.T
  return g / np.maximum(g.sum(-1, keepdims=True), 1e-9)


def expected_pixels(rows, cols, tokens, dpi=visualize.DEFAULT_DPI):
  width, height = visualize.figure_inches(rows, cols, tokens)
  return round(height * dpi), round(width * dpi)


def read_png(path):
  image = matplotlib.image.imread(path)
  assert image.ndim == 3 and image.shape[2] in (3, 4)
  return image


def assert_size(image, rows, cols, tokens):
  h, w = expected_pixels(rows, cols, tokens)
  assert abs(image.shape[0] - h) <= 1 and abs(image.shape[1] - w) <= 1, (image.shape, h, w)


def test_plot_graphs_writes_a_grid_of_layers_by_heads(tmp_path):
  graphs = random_graphs()
  path = visualize.plot_graphs(graphs, PIECES, str(tmp_path / "sub" / "all.png"),
                               title="tiny")
  assert path == str(tmp_path / "sub" / "all.png")
  image = read_png(path)
  assert_size(image, rows=4, cols=3, tokens=6)
  assert image[..., :3].std() > 0.05  # drawn, not blank
  # a selection of layers and heads gives a smaller grid
  some = read_png(visualize.plot_graphs(graphs, PIECES, str(tmp_path / "some.png"),
                                        layers=[0, 3], heads=[1]))
  assert_size(some, rows=2, cols=1, tokens=6)
  assert some.shape[0] < image.shape[0] and some.shape[1] < image.shape[1]


def test_cells_show_the_graph_weights(tmp_path):
  """A graph that is zero except one block draws dark pixels only there."""
  graphs = np.zeros((2, 1, 6, 6), np.float32)
  graphs[0, 0, 5, 0] = 1.0  # forward: the last target takes from the first source
  image = read_png(visualize.plot_graphs(graphs, PIECES, str(tmp_path / "one.png"),
                                         layers=[0]))
  blue = image[..., 2] - image[..., 0] > 0.25  # the colormap's dark end, not text
  ys, xs = np.nonzero(blue)
  # one block of about a sixth of the cell, in its lower-left corner
  height, width = ys.max() - ys.min() + 1, xs.max() - xs.min() + 1
  side = visualize.cell_inches(6) * visualize.DEFAULT_DPI
  assert 0.1 * side < height < 0.2 * side and 0.1 * side < width < 0.2 * side
  assert len(ys) > 0.8 * height * width
  assert ys.min() > image.shape[0] / 2 and xs.max() < image.shape[1] / 2


def test_plot_layer_means_and_max_tokens(tmp_path):
  graphs = random_graphs(length=6)
  image = read_png(visualize.plot_layer_means(graphs, PIECES, str(tmp_path / "m.png")))
  assert_size(image, rows=1, cols=4, tokens=6)
  cropped = read_png(visualize.plot_graphs(graphs, PIECES, str(tmp_path / "c.png"),
                                           max_tokens=3))
  assert_size(cropped, rows=4, cols=3, tokens=3)


def test_padding_beyond_the_pieces_is_cropped(tmp_path):
  graphs = np.zeros((4, 3, 9, 9), np.float32)
  graphs[..., :6, :6] = random_graphs()
  image = read_png(visualize.plot_graphs(graphs, PIECES, str(tmp_path / "p.png")))
  assert_size(image, rows=4, cols=3, tokens=6)


def test_shape_errors_are_clear(tmp_path):
  graphs = random_graphs()
  out = str(tmp_path / "x.png")
  with pytest.raises(ValueError, match=r"shape mismatch: 7 pieces but graphs cover only T=6"):
    visualize.plot_graphs(graphs, PIECES + ["."], out)
  with pytest.raises(ValueError, match=r"shape mismatch: 5 pieces .* T=6 tokens with weight"):
    visualize.plot_graphs(graphs, PIECES[:5], out)
  with pytest.raises(ValueError, match=r"\[2L, K, T, T\].*pass graphs\[i\]"):
    visualize.plot_graphs(graphs[None], PIECES, out)
  with pytest.raises(ValueError, match=r"\[2L, K, T, T\]"):
    visualize.plot_graphs(graphs[..., :5], PIECES, out)
  with pytest.raises(ValueError, match="2L layers"):
    visualize.plot_graphs(graphs[:3], PIECES, out)
  with pytest.raises(ValueError, match="heads"):
    visualize.plot_graphs(graphs, PIECES, out, heads=[3])
  with pytest.raises(ValueError, match="not one string"):
    visualize.plot_graphs(graphs, "the cat", out)
  import os
  assert not os.path.exists(out)
