"""Heatmaps of learned graphs, in the spirit of the paper's Figure 3.

`plot_graphs` draws one T×T heatmap per (layer, head): rows are the layers
(the L forward layers, then the L backward layers), columns the heads. In each
cell the target position j is on the y-axis (top to bottom) and the source
position i on the x-axis, so row j shows where token j takes its weight
G_ji from. `plot_layer_means` draws one cell per layer, averaged over heads.

Rendering is headless (matplotlib's Agg canvas; pyplot's global state is not
touched). Figure size is deterministic: a grid of R rows and C columns of
T_shown tokens is ``(C·s + 1.2) × (R·s + 1.3)`` inches at `dpi`, where the cell
side s = clip(0.16·T_shown + 0.9, 1.6, 10) inches.

Typical use with an export::

  graphs, tokens, mask, pieces = predictor.graphs_from_text(["the cat sat ."])
  plot_graphs(graphs[0], pieces[0], "graphs.png")
"""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np

DEFAULT_DPI = 100


def cell_inches(num_tokens: int) -> float:
  """Side of one heatmap cell in inches for `num_tokens` shown tokens."""
  return float(np.clip(0.16 * num_tokens + 0.9, 1.6, 10.0))


def figure_inches(rows: int, cols: int, num_tokens: int) -> tuple[float, float]:
  """(width, height) in inches of a rows × cols grid (see module docstring)."""
  side = cell_inches(num_tokens)
  return cols * side + 1.2, rows * side + 1.3


def _prepare(graphs, pieces: Sequence[str], max_tokens: int | None):
  """Validates graphs [2L, K, T, T] against pieces and crops to the shown tokens.

  `pieces` may be shorter than T only if the graphs are zero beyond it (the
  padding of a batch); then the padding is cropped.
  """
  graphs = np.asarray(graphs)
  if graphs.ndim != 4 or graphs.shape[-1] != graphs.shape[-2]:
    hint = (" (one example of a batch: pass graphs[i])" if graphs.ndim == 5 else "")
    raise ValueError(f"graphs must be [2L, K, T, T], got shape {graphs.shape}{hint}")
  if graphs.shape[0] % 2:
    raise ValueError(f"graphs must hold 2L layers (forward then backward), got "
                     f"{graphs.shape[0]}")
  if isinstance(pieces, str):
    raise ValueError("pieces must be a sequence of token strings, not one string")
  pieces = [str(p) for p in pieces]
  length = graphs.shape[-1]
  if len(pieces) > length:
    raise ValueError(f"shape mismatch: {len(pieces)} pieces but graphs cover only "
                     f"T={length} tokens (graphs shape {graphs.shape})")
  if len(pieces) < length:
    tail = np.concatenate([graphs[..., len(pieces):, :].ravel(),
                           graphs[..., :, len(pieces):].ravel()])
    if np.any(tail != 0):
      raise ValueError(f"shape mismatch: {len(pieces)} pieces but graphs cover "
                       f"T={length} tokens with weight beyond position "
                       f"{len(pieces) - 1} (graphs shape {graphs.shape}); pass one "
                       "piece per token")
  shown = len(pieces) if max_tokens is None else min(len(pieces), max_tokens)
  if shown < 1:
    raise ValueError("nothing to plot: no pieces")
  graphs = graphs[..., :shown, :shown].astype(np.float32)
  return graphs, pieces[:shown]


def _indices(selection, size: int, what: str) -> list[int]:
  if selection is None:
    return list(range(size))
  chosen = [int(i) for i in selection]
  bad = [i for i in chosen if not 0 <= i < size]
  if bad or not chosen:
    raise ValueError(f"{what} {chosen} must be a non-empty selection of "
                     f"0..{size - 1}")
  return chosen


def layer_name(index: int, num_layers: int) -> str:
  """'fw 1', …, 'fw L', 'bw 1', …, 'bw L' for index 0 … 2L−1."""
  half = num_layers // 2
  return f"fw {index + 1}" if index < half else f"bw {index - half + 1}"


def _grid(cells, row_labels, col_labels, pieces, path, title, dpi, cmap):
  """Draws cells[r][c] (each [n, n]) and saves a PNG at `path`."""
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  from matplotlib.backends.backend_agg import FigureCanvasAgg  # pylint: disable=g-import-not-at-top

  rows, cols, n = len(cells), len(cells[0]), len(pieces)
  width, height = figure_inches(rows, cols, n)
  fig = Figure(figsize=(width, height), dpi=dpi)
  FigureCanvasAgg(fig)
  side = cell_inches(n)
  fontsize = float(np.clip(90.0 * side / max(n, 1) / 1.4, 3.0, 9.0))
  left, bottom = 1.0 / width, 0.8 / height  # 0.5 in. stay free at the top
  for r in range(rows):
    for c in range(cols):
      x0 = left + c * side / width
      y0 = bottom + (rows - 1 - r) * side / height
      pad = 0.06 * side
      ax = fig.add_axes([x0 + pad / width, y0 + pad / height,
                         (side - 2 * pad) / width, (side - 2 * pad) / height])
      cell = cells[r][c]
      vmax = float(cell.max()) if cell.size and cell.max() > 0 else 1.0
      ax.imshow(cell, cmap=cmap, vmin=0.0, vmax=vmax, interpolation="nearest",
                aspect="auto")
      ticks = np.arange(n)
      ax.set_xticks(ticks)
      ax.set_yticks(ticks)
      ax.set_xticklabels(pieces if r == rows - 1 else [], rotation=90,
                         fontsize=fontsize)
      ax.set_yticklabels(pieces if c == 0 else [], fontsize=fontsize)
      ax.tick_params(length=0, pad=1)
      if r == 0:
        ax.set_title(col_labels[c], fontsize=9)
      if c == 0:
        ax.set_ylabel(f"{row_labels[r]}\ntarget", fontsize=9)
      if r == rows - 1:
        ax.set_xlabel("source", fontsize=8)
  if title:
    fig.suptitle(title, fontsize=11, y=1.0 - 0.1 / height, va="top")
  path = os.fspath(path)
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fig.savefig(path, format="png", dpi=dpi)
  return path


def plot_graphs(graphs, pieces: Sequence[str], path: str,
                layers: Sequence[int] | None = None,
                heads: Sequence[int] | None = None, title: str | None = None,
                max_tokens: int | None = 60, dpi: int = DEFAULT_DPI,
                cmap: str = "Blues") -> str:
  """Heatmap grid of one example's graphs, written as a PNG.

  Args:
    graphs: [2L, K, T, T] ([layer, head, target, source]; numpy or jax), e.g.
      ``predictor.graphs_from_text(texts)[0][i]``.
    pieces: the token strings of positions 0.. (T of them, or fewer if the
      graphs are zero beyond them, i.e. padding).
    path: the PNG file to write.
    layers: indices into the 2L layers to draw (default all: forward, then
      backward).
    heads: indices of the heads to draw (default all).
    title: optional figure title.
    max_tokens: draw only the first max_tokens positions (None: all).
    dpi: pixels per inch; the pixel size follows `figure_inches`.
    cmap: matplotlib colormap; each cell is scaled from 0 to its own maximum.

  Returns:
    `path`.

  Raises:
    ValueError: graphs not [2L, K, T, T], pieces not matching T, bad indices.
  """
  graphs, pieces = _prepare(graphs, pieces, max_tokens)
  total_layers, num_heads = graphs.shape[:2]
  layer_ids = _indices(layers, total_layers, "layers")
  head_ids = _indices(heads, num_heads, "heads")
  cells = [[graphs[l, h] for h in head_ids] for l in layer_ids]
  return _grid(cells, [layer_name(l, total_layers) for l in layer_ids],
               [f"head {h + 1}" for h in head_ids], pieces, path, title, dpi, cmap)


def plot_layer_means(graphs, pieces: Sequence[str], path: str,
                     title: str | None = None, max_tokens: int | None = 60,
                     dpi: int = DEFAULT_DPI, cmap: str = "Blues") -> str:
  """One row of heatmaps, one per layer (fw 1..L, bw 1..L), each the mean of
  the layer's K heads. Arguments as `plot_graphs`; returns `path`."""
  graphs, pieces = _prepare(graphs, pieces, max_tokens)
  means = graphs.mean(axis=1)
  total_layers = means.shape[0]
  return _grid([[means[l] for l in range(total_layers)]], ["mean of heads"],
               [layer_name(l, total_layers) for l in range(total_layers)], pieces,
               path, title, dpi, cmap)


def plot_sentence(export_dir: str, text: str, path: str, mean_over_heads: bool = False) -> str:
  """Draws the graphs an exported predictor gives `text` (every layer and
  head, or one cell per layer) to the PNG `path`; returns the path."""
  from glomo_jax.export import load_graph_predictor  # noqa: PLC0415 (export imports models)
  predictor = load_graph_predictor(export_dir)
  graphs, _, _, pieces = predictor.graphs_from_text([text])
  draw = plot_layer_means if mean_over_heads else plot_graphs
  return draw(graphs[0], pieces[0], path, title=text)
