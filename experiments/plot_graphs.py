r"""Draw a sentence's graphs (every layer and head) as a heatmap PNG, as the
paper's Figure 3.

  python -m experiments.plot_graphs --export=/tmp/glomo_demo/export \
      --text="the dogs near the old cat run ." --out=/tmp/graphs.png

Rows: forward layers then backward layers; columns: heads; each cell is the
T×T graph with targets on the y-axis and sources on the x-axis.
"""
from __future__ import annotations

from absl import app, flags

_EXPORT = flags.DEFINE_string("export", None, "Export directory of a graph predictor.")
_TEXT = flags.DEFINE_string("text", None, "The sentence to draw.")
_OUT = flags.DEFINE_string("out", "graphs.png", "Output PNG.")
_MEAN = flags.DEFINE_bool("mean_over_heads", False, "One cell per layer (mean over heads).")
flags.mark_flags_as_required(["export", "text"])


def plot_sentence(export_dir: str, text: str, out: str, mean_over_heads: bool = False) -> str:
  from glomo_jax.export import load_graph_predictor  # noqa: PLC0415
  from glomo_jax.visualize import plot_graphs, plot_layer_means  # noqa: PLC0415
  predictor = load_graph_predictor(export_dir)
  graphs, _, _, pieces = predictor.graphs_from_text([text])
  draw = plot_layer_means if mean_over_heads else plot_graphs
  return draw(graphs[0], pieces[0], out, title=text)


def main(argv):
  del argv
  print(plot_sentence(_EXPORT.value, _TEXT.value, _OUT.value, _MEAN.value))


if __name__ == "__main__":
  app.run(main)
