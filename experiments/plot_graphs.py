r"""Draw a sentence's graphs (every layer and head) as a heatmap PNG, as the
paper's Figure 3.

  python -m experiments.plot_graphs --export=/tmp/glomo_demo/export \
      --text="the dogs near the old cat run ." --out=/tmp/graphs.png

Rows: forward layers then backward layers; columns: heads; each cell is the
T×T graph with targets on the y-axis and sources on the x-axis.
"""
from __future__ import annotations

from absl import flags

from experiments import cli

_EXPORT = flags.DEFINE_string("export", None, "Export directory of a graph predictor.")
_TEXT = flags.DEFINE_string("text", None, "The sentence to draw.")
_OUT = flags.DEFINE_string("out", "graphs.png", "Output PNG.")
_MEAN = flags.DEFINE_bool("mean_over_heads", False, "One cell per layer (mean over heads).")
flags.mark_flags_as_required(["export", "text"])


def main(argv):
  del argv
  from glomo_jax.visualize import plot_sentence  # noqa: PLC0415
  print(plot_sentence(_EXPORT.value, _TEXT.value, _OUT.value, _MEAN.value))


if __name__ == "__main__":
  cli.run(main)
