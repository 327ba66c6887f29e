r"""Where graph transfer should help most: accuracy against training-set size on
the built-in language, whose dependency arcs are known.

  python -m experiments.data_efficiency --export=runs/demo/export \
      --root=runs/data_efficiency --parallel=2

Trains the agreement task (experiments/configs/agreement.py: does every verb
agree with its subject?) on `--sizes` training sentences, for every variant
(`--variants`: baseline, uniform graph, GLoMo on embeddings) and seed, each
for the same number of optimiser steps (`--steps`; the epochs follow from the
size), with the best validation checkpoint tested on the same 1,000 test
sentences. Runs go through `experiments.transfer_grid` (ROOT/nSIZE/VARIANT_sSEED,
resumable: a finished run is not repeated). Writes ROOT/curve.md (test
accuracy, mean ± sample std over seeds, per size and variant) and
ROOT/curve.png (the learning curves). Arguments after `--` go to every run.
The predictor must be pretrained on the synthetic configuration the task
reads (`experiments.demo` is: 3,000 documents, seed 0). With `--arcs`
(default on), one more row: GLoMo on embeddings fed the planted arcs
themselves as graphs (`graph_source='arcs'`, ROOT/nSIZE/arcs/), the best a
predictor could give, which separates a weak predictor from a transfer path
that cannot use even perfect graphs.
"""
from __future__ import annotations

import os
import statistics

from absl import flags

from experiments import cli
from experiments.grid import finished_results, run_grid

_EXPORT = flags.DEFINE_string("export", None, "Export of the predictor (synthetic language).")
_ROOT = flags.DEFINE_string("root", None, "Directory of the runs and the curve.")
_SIZES = flags.DEFINE_list("sizes", ["500", "1000", "2000", "4000", "8000"],
                           "Training sentences.")
_VARIANTS = flags.DEFINE_list("variants", ["baseline", "uniform", "embeddings"], "Variants.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds (config.seed).")
_STEPS = flags.DEFINE_integer("steps", 1000, "Optimiser steps of every run.")
_PARALLEL = flags.DEFINE_integer("parallel", 1, "Runs at once, one CPU core each.")
_PRESET = flags.DEFINE_string("preset", "", "Preset of experiments/configs/agreement.py.")
_ARCS = flags.DEFINE_bool("arcs", True, "Also GLoMo on embeddings with the planted arcs as "
                          "graphs (the oracle).")
flags.mark_flags_as_required(["export", "root"])

CONFIG = os.path.join("experiments", "configs", "agreement.py")
ARCS = "arcs"          # the oracle row: variant embeddings, graph_source arcs
LABELS = {"baseline": "baseline (no graph)", "uniform": "uniform graph",
          "embeddings": "GLoMo on embeddings", "rnn": "GLoMo on RNN states",
          ARCS: "planted arcs as graphs (oracle)"}


def size_arguments(size: int, steps: int, export: str) -> list[str]:
  """The config overrides of one size (`steps` optimiser steps, whatever the
  number of epochs that makes)."""
  if size < 1 or steps < 1:
    raise ValueError(f"sizes and --steps must be positive, got {size} and {steps}")
  return [f"--config.synthetic.train={size}", f"--config.optim.steps={steps}",
          f"--config.predictor_export={export}"]


def collect(root: str, sizes, variants) -> dict:
  """{size: {variant: [test accuracy in % per seed]}} of the finished runs."""
  out = {}
  for size in sizes:
    out[size] = {}
    for variant in variants:
      if variant == ARCS:
        found = finished_results(os.path.join(root, f"n{size}", ARCS), "embeddings")
      else:
        found = finished_results(os.path.join(root, f"n{size}"), variant)
      out[size][variant] = [100 * r["test"] for r in found]
  return out


def _cell(values: list[float]) -> str:
  if not values:
    return "–"
  each = ", ".join(f"{v:.1f}" for v in values)
  if len(values) == 1:
    return each
  return f"{statistics.fmean(values):.1f} ± {statistics.stdev(values):.1f} ({each})"


def curve_table(results: dict, variants, steps: int) -> str:
  lines = ["| training sentences | " + " | ".join(LABELS.get(v, v) for v in variants) + " |",
           "|---|" + "---|" * len(variants)]
  for size, row in results.items():
    lines.append(f"| {size} | " + " | ".join(_cell(row[v]) for v in variants) + " |")
  return "\n".join(lines) + (
      f"\n\nTest accuracy in % (1,000 sentences, chance 50), mean ± sample std over "
      f"seeds (each seed in brackets); every run {steps} steps, best validation checkpoint.\n")


def plot_curve(results: dict, variants, path: str) -> str:
  import matplotlib  # noqa: PLC0415
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415
  figure, axis = plt.subplots(figsize=(6, 4))
  for variant in variants:
    points = [(size, row[variant]) for size, row in results.items() if row[variant]]
    if not points:
      continue
    axis.errorbar([s for s, _ in points], [statistics.fmean(v) for _, v in points],
                  yerr=[statistics.stdev(v) if len(v) > 1 else 0 for _, v in points],
                  marker="o", capsize=3, label=LABELS.get(variant, variant))
  axis.set_xscale("log")
  axis.set_xticks(list(results), [str(size) for size in results])
  axis.minorticks_off()
  axis.set_xlabel("training sentences")
  axis.set_ylabel("test accuracy (%)")
  axis.axhline(50, color="grey", linewidth=0.5)
  axis.legend()
  axis.set_title("Agreement on the built-in language")
  figure.tight_layout()
  figure.savefig(path, dpi=120)
  plt.close(figure)
  return path


def main(argv):
  extra = list(argv[1:])
  root = _ROOT.value
  if not os.path.isdir(_EXPORT.value):
    raise ValueError(f"--export={_EXPORT.value} is not a directory: pretrain one with "
                     "python -m experiments.demo")
  sizes = [int(s) for s in _SIZES.value]
  config = CONFIG + (f":{_PRESET.value}" if _PRESET.value else "")
  variants = list(_VARIANTS.value) + ([ARCS] if _ARCS.value else [])
  for size in sizes:
    arguments = size_arguments(size, _STEPS.value, _EXPORT.value) + extra
    run_grid(config, os.path.join(root, f"n{size}"), _VARIANTS.value, _SEEDS.value,
             _PARALLEL.value, arguments)
    if _ARCS.value:
      run_grid(config, os.path.join(root, f"n{size}", ARCS), ["embeddings"], _SEEDS.value,
               _PARALLEL.value, arguments + ["--config.graph_source=arcs"])
  results = collect(root, sizes, variants)
  text = curve_table(results, variants, _STEPS.value)
  with open(os.path.join(root, "curve.md"), "w", encoding="utf-8") as f:
    f.write(text)
  print(text)
  print(f"learning curves: {plot_curve(results, variants, os.path.join(root, 'curve.png'))}")


if __name__ == "__main__":
  cli.run(main)
