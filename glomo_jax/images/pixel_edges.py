"""A pixel's edges in every (layer, head), drawn over the image (paper Fig. 4).

For a chosen pixel (r, c) = raster position t = r·W + c, row t of each
graph [2L, K, n, n] holds the weights G[t, s] the pixel takes from every
source pixel s; reshaped to [H, W] it is a map over the image. Forward
layers' sources come before t in raster order (above, and to the left on
its row), backward layers' after it.

`plot_pixel_edges` draws a grid: one row per layer (fw 1..L, bw 1..L), the
image first (the pixel marked), then one cell per head with the weights as
a heat map over the greyed image, scaled to each cell's maximum. Headless
(matplotlib's Agg canvas).
"""
from __future__ import annotations

import os

import numpy as np

from glomo_jax.images.data import downsample, read_npz_images
from glomo_jax.visualize import layer_name


def pixel_edges(graphs, pixel: tuple[int, int], image_shape: tuple[int, int]) -> np.ndarray:
  """[2L, K, n, n] graphs of one image -> [2L, K, H, W]: row t = r·W + c of
  every graph (the weights pixel (r, c) takes from each source)."""
  graphs = np.asarray(graphs)
  height, width = image_shape
  r, c = pixel
  if graphs.ndim != 4 or graphs.shape[-1] != height * width or \
      graphs.shape[-2] != height * width:
    raise ValueError(f"graphs must be [2L, K, {height * width}, {height * width}] for "
                     f"{height}×{width} images, got {graphs.shape}")
  if not (0 <= r < height and 0 <= c < width):
    raise ValueError(f"pixel {pixel} is outside the {height}×{width} image")
  return graphs[:, :, r * width + c].reshape(graphs.shape[:2] + (height, width))


def plot_pixel_edges(image, graphs, pixel: tuple[int, int], path: str,
                     title: str | None = None, dpi: int = 100, cmap: str = "magma") -> str:
  """Draws `pixel_edges` over uint8 image [H, W, 3] to the PNG `path`."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
  from matplotlib.figure import Figure  # noqa: PLC0415
  from matplotlib.patches import Rectangle  # noqa: PLC0415

  image = np.asarray(image)
  edges = pixel_edges(graphs, pixel, image.shape[:2])
  layers, heads = edges.shape[:2]
  side = 1.6
  fig = Figure(figsize=((heads + 1) * side + 0.8, layers * side + 0.9), dpi=dpi)
  FigureCanvasAgg(fig)
  grey = image.astype(np.float32).mean(-1) / 255.0
  mark = lambda ax: ax.add_patch(Rectangle((pixel[1] - 0.5, pixel[0] - 0.5), 1, 1,  # noqa: E731
                                           fill=False, edgecolor="cyan", linewidth=1.2))
  axes = fig.subplots(layers, heads + 1, squeeze=False)
  for l in range(layers):
    axes[l, 0].imshow(image, interpolation="nearest")
    mark(axes[l, 0])
    axes[l, 0].set_ylabel(layer_name(l, layers), fontsize=9)
    for h in range(heads):
      ax = axes[l, h + 1]
      cell = edges[l, h]
      ax.imshow(grey, cmap="gray", vmin=0, vmax=1, interpolation="nearest")
      vmax = float(cell.max()) if cell.max() > 0 else 1.0
      ax.imshow(np.ma.masked_where(cell <= 0, cell), cmap=cmap, vmin=0, vmax=vmax,
                alpha=0.85, interpolation="nearest")
      mark(ax)
      if l == 0:
        ax.set_title(f"head {h + 1}", fontsize=9)
  for ax in axes.flat:
    ax.set_xticks([])
    ax.set_yticks([])
  axes[0, 0].set_title("image", fontsize=9)
  if title:
    fig.suptitle(title, fontsize=10)
  path = os.fspath(path)
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, format="png", dpi=dpi)
  return path


def draw_pixel_edges(export_dir: str, images_file: str, index: int,
                     pixel: tuple[int, int], path: str, factor: int = 1) -> str:
  """Image `index` of an .npz (box-downsampled by `factor`), its graphs from
  the exported pixel predictor, and `plot_pixel_edges` to `path`."""
  from glomo_jax.export import load_graph_predictor  # noqa: PLC0415
  predictor = load_graph_predictor(export_dir)
  if predictor.manifest.get("units") != "pixels":
    raise ValueError(f"{export_dir} is a text predictor: draw its graphs with "
                     "experiments/plot_graphs.py")
  images = read_npz_images(images_file).images
  if not 0 <= index < len(images):
    raise ValueError(f"image index {index} is outside 0..{len(images) - 1} of {images_file}")
  image = downsample(images[index:index + 1], factor)
  graphs = np.asarray(predictor(image))[0]
  return plot_pixel_edges(image[0], graphs, pixel, path,
                          title=f"pixel {tuple(pixel)} of image {index}")
