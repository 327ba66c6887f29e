r"""Where graph transfer should help most: accuracy against training-set size,
on the built-in language (whose dependency arcs are known) or on real text.

  python -m experiments.data_efficiency --export=runs/demo/export \
      --root=runs/data_efficiency --parallel=2

  python -m experiments.data_efficiency --task=sst2 --export=runs/wiki_cpu/export \
      --root=runs/curve_sst2 --sizes=500,1000,2000,5000 --seeds=0,1,2,3,4 --parallel=2 -- \
      --config.files.train=../shared/data/sst2/sst2_train.tsv.gz \
      --config.files.test=../shared/data/sst2/sst2_dev.tsv.gz \
      --config.glove_path=../shared/data/glove/glove.6B.100d.top2604.txt.gz

Trains `--task` (`TASKS`: agreement, experiments/configs/agreement.py: does
every verb agree with its subject?; sst2, imdb, mnli: their configs in
experiments/configs) on `--sizes` training examples, for every variant
(`--variants`: baseline, uniform graph, GLoMo on embeddings) and seed, each
for the same number of optimiser steps (`--steps`; the epochs follow from the
size; validation every `--steps`/20 steps), with the best validation
checkpoint tested on the task's held-out split. Real tasks draw a seeded
subset of train (`max_train_examples`, the same for every seed and variant);
validation is carved from the whole train file, so every size selects its
checkpoint on the same examples; the local IMDB and MNLI files have no test
split, so a 0.1 share of train is carved as one (`test_fraction`).
Runs go through `experiments.grid` (ROOT/nSIZE/VARIANT_sSEED, resumable: a
finished run is not repeated) and share one graph cache (ROOT/graph_cache).
Writes ROOT/curve.md (test accuracy, mean ± sample std over seeds, per size
and variant) and ROOT/curve.png (the learning curves). Arguments after `--`
go to every run (data paths, GloVe). The predictor must be pretrained on what
the task reads: for agreement, the synthetic configuration
(`experiments.demo` is: 3,000 documents, seed 0); for real text, Wikipedia
(`experiments.pretrain`, `experiments.export`). With `--arcs` (agreement
only, default on), one more row: GLoMo on embeddings fed the planted arcs
themselves as graphs (`graph_source='arcs'`, ROOT/nSIZE/arcs/), the best a
predictor could give, which separates a weak predictor from a transfer path
that cannot use even perfect graphs.
"""
from __future__ import annotations

import dataclasses
import os
import statistics

from absl import flags

from experiments import cli
from experiments.grid import finished_results, run_grid


@dataclasses.dataclass(frozen=True)
class CurveTask:
  """One task of the curve: its config, the flag that sets the training
  size, the results.json key of its held-out split, and what it says."""
  config: str
  size_flag: str
  held_out: str
  examples: str
  title: str
  chance: float
  fixed: tuple[str, ...] = ()


TASKS = {
    "agreement": CurveTask("agreement.py", "--config.synthetic.train", "test",
                           "training sentences", "Agreement on the built-in language", 50.0),
    "sst2": CurveTask("sst2.py", "--config.max_train_examples", "test", "training sentences",
                      "SST-2 (GLUE dev as test)", 50.0),
    "imdb": CurveTask("imdb.py", "--config.max_train_examples", "test", "training reviews",
                      "IMDB (test: 0.1 of train held out)", 50.0,
                      ("--config.test_fraction=0.1",)),
    "mnli": CurveTask("mnli.py", "--config.max_train_examples", "matched", "training pairs",
                      "MNLI sample (matched: 0.1 of train held out)", 100 / 3,
                      ("--config.test_fraction=0.1",)),
}

_TASK = flags.DEFINE_enum("task", "agreement", list(TASKS), "Task of the curve.")
_EXPORT = flags.DEFINE_string("export", None, "Export of the predictor.")
_ROOT = flags.DEFINE_string("root", None, "Directory of the runs and the curve.")
_SIZES = flags.DEFINE_list("sizes", ["500", "1000", "2000", "4000", "8000"],
                           "Training examples.")
_VARIANTS = flags.DEFINE_list("variants", ["baseline", "uniform", "embeddings"], "Variants.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds (config.seed).")
_STEPS = flags.DEFINE_integer("steps", 1000, "Optimiser steps of every run.")
_PARALLEL = flags.DEFINE_integer("parallel", 1, "Runs at once, one CPU core each.")
_PRESET = flags.DEFINE_string("preset", "", "Preset of the task's config.")
_ARCS = flags.DEFINE_bool("arcs", True, "Agreement: also GLoMo on embeddings with the "
                          "planted arcs as graphs (the oracle).")
flags.mark_flags_as_required(["export", "root"])

ARCS = "arcs"          # the oracle row: variant embeddings, graph_source arcs
LABELS = {"baseline": "baseline (no graph)", "uniform": "uniform graph",
          "embeddings": "GLoMo on embeddings", "rnn": "GLoMo on RNN states",
          ARCS: "planted arcs as graphs (oracle)"}


def size_arguments(task: CurveTask, size: int, steps: int, export: str, root: str
                   ) -> list[str]:
  """The config overrides of one size (`steps` optimiser steps, whatever the
  number of epochs that makes, validation every steps/20), before the
  user's."""
  if size < 1 or steps < 1:
    raise ValueError(f"sizes and --steps must be positive, got {size} and {steps}")
  return [f"{task.size_flag}={size}", f"--config.optim.steps={steps}",
          f"--config.optim.eval_every={max(1, steps // 20)}",
          f"--config.predictor_export={export}",
          f"--config.graph_cache_dir={os.path.join(root, 'graph_cache')}", *task.fixed]


def collect(root: str, sizes, variants, held_out: str = "test") -> dict:
  """{size: {variant: [held-out accuracy in % per seed]}} of the finished runs."""
  out = {}
  for size in sizes:
    out[size] = {}
    for variant in variants:
      if variant == ARCS:
        found = finished_results(os.path.join(root, f"n{size}", ARCS), "embeddings")
      else:
        found = finished_results(os.path.join(root, f"n{size}"), variant)
      out[size][variant] = [100 * r[held_out] for r in found if r.get(held_out) is not None]
  return out


def _cell(values: list[float]) -> str:
  if not values:
    return "–"
  each = ", ".join(f"{v:.1f}" for v in values)
  if len(values) == 1:
    return each
  return f"{statistics.fmean(values):.1f} ± {statistics.stdev(values):.1f} ({each})"


def held_out_size(root: str, sizes, variants, held_out: str) -> int | None:
  """Examples in the held-out split, from a finished run's results.json."""
  for size in sizes:
    for variant in variants:
      sub = (os.path.join(root, f"n{size}", ARCS) if variant == ARCS
             else os.path.join(root, f"n{size}"))
      for result in finished_results(sub, "embeddings" if variant == ARCS else variant):
        if held_out in result.get("examples", {}):
          return result["examples"][held_out]
  return None


def curve_table(results: dict, variants, steps: int, task: CurveTask = TASKS["agreement"],
                held_out_examples: int | None = None) -> str:
  lines = [f"| {task.examples} | " + " | ".join(LABELS.get(v, v) for v in variants) + " |",
           "|---|" + "---|" * len(variants)]
  for size, row in results.items():
    lines.append(f"| {size} | " + " | ".join(_cell(row[v]) for v in variants) + " |")
  count = f"{held_out_examples:,} examples, " if held_out_examples else ""
  return "\n".join(lines) + (
      f"\n\n{task.title}: {task.held_out} accuracy in % ({count}chance {task.chance:.0f}), "
      f"mean ± sample std over seeds (each seed in brackets); every run at most {steps} "
      "steps, best validation checkpoint.\n")


def plot_curve(results: dict, variants, path: str, task: CurveTask = TASKS["agreement"]
               ) -> str:
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
  axis.set_xlabel(task.examples)
  axis.set_ylabel(f"{task.held_out} accuracy (%)")
  axis.axhline(task.chance, color="grey", linewidth=0.5)
  axis.legend()
  axis.set_title(task.title)
  figure.tight_layout()
  figure.savefig(path, dpi=120)
  plt.close(figure)
  return path


def main(argv):
  extra = list(argv[1:])
  root = _ROOT.value
  task = TASKS[_TASK.value]
  if not os.path.isdir(_EXPORT.value):
    raise ValueError(f"--export={_EXPORT.value} is not a directory: pretrain one with "
                     + ("python -m experiments.demo" if _TASK.value == "agreement" else
                        "python -m experiments.pretrain, then experiments.export"))
  sizes = [int(s) for s in _SIZES.value]
  config = (os.path.join("experiments", "configs", task.config)
            + (f":{_PRESET.value}" if _PRESET.value else ""))
  arcs = _ARCS.value and _TASK.value == "agreement"
  variants = list(_VARIANTS.value) + ([ARCS] if arcs else [])
  for size in sizes:
    arguments = size_arguments(task, size, _STEPS.value, _EXPORT.value, root) + extra
    run_grid(config, os.path.join(root, f"n{size}"), _VARIANTS.value, _SEEDS.value,
             _PARALLEL.value, arguments)
    if arcs:
      run_grid(config, os.path.join(root, f"n{size}", ARCS), ["embeddings"], _SEEDS.value,
               _PARALLEL.value, arguments + ["--config.graph_source=arcs"])
  results = collect(root, sizes, variants, task.held_out)
  text = curve_table(results, variants, _STEPS.value, task,
                     held_out_size(root, sizes, variants, task.held_out))
  with open(os.path.join(root, "curve.md"), "w", encoding="utf-8") as f:
    f.write(text)
  print(text)
  print(f"learning curves: "
        f"{plot_curve(results, variants, os.path.join(root, 'curve.png'), task)}")


if __name__ == "__main__":
  cli.run(main)
