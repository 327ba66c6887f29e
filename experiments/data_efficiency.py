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
for at most `--steps` optimiser steps (the epochs follow from the size;
validation every `--steps`/20 steps, stopping early after the config's
`loop.patience` evaluations without a better score), with the best
validation checkpoint tested on the task's held-out split. Real tasks draw
a seeded subset of train (`max_train_examples`, the same for every seed and
variant); validation is carved from the whole train file, so every size
selects its checkpoint on the same examples; the local IMDB and MNLI files
have no test split, so a 0.1 share of train is carved as one
(`test_fraction`); validation and test are cut to 1,000 examples each.
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

import os

from absl import flags

from experiments import cli
from experiments.curves import (ARCS, TASKS, collect, curve_table, held_out_size, plot_curve,
                                size_arguments)
from experiments.grid import run_grid

_TASK = flags.DEFINE_enum("task", "agreement", list(TASKS), "Task of the curve.")
_EXPORT = flags.DEFINE_string("export", None, "Export of the predictor.")
_ROOT = flags.DEFINE_string("root", None, "Directory of the runs and the curve.")
_SIZES = flags.DEFINE_list("sizes", ["500", "1000", "2000", "4000", "8000"],
                           "Training examples.")
_VARIANTS = flags.DEFINE_list("variants", ["baseline", "uniform", "embeddings"], "Variants.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds (config.seed).")
_STEPS = flags.DEFINE_integer("steps", 1000, "Optimiser steps of every run (at most).")
_PARALLEL = flags.DEFINE_integer("parallel", 1, "Runs at once (each pinned to one CPU core "
                                 "unless --pin=false).")
_PIN = flags.DEFINE_bool("pin", True, "With --parallel: one CPU core and one XLA thread per run "
                         "(CPU hosts); --pin=false where the runs share an accelerator.")
_PRESET = flags.DEFINE_string("preset", "", "Preset of the task's config.")
_ARCS = flags.DEFINE_bool("arcs", True, "Agreement: also GLoMo on embeddings with the "
                          "planted arcs as graphs (the oracle).")
flags.mark_flags_as_required(["export", "root"])


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
             _PARALLEL.value, arguments, pin=_PIN.value)
    if arcs:
      run_grid(config, os.path.join(root, f"n{size}", ARCS), ["embeddings"], _SEEDS.value,
               _PARALLEL.value, arguments + ["--config.graph_source=arcs"], pin=_PIN.value)
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
