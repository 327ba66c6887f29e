r"""Runs a text classification, SQuAD or CIFAR-10 config for several variants and seeds,
then tabulates them.

  python -m experiments.classify_grid --config=experiments/configs/imdb.py \
      --root=runs/grid/imdb --variants=baseline,embeddings,uniform --seeds=0,1,2 \
      --parallel=2 -- \
      --config.files.train=../shared/data/imdb/imdb_train.jsonl.gz \
      --config.predictor_export=runs/wiki_cpu/export

  python -m experiments.classify_grid --entry=squad \
      --config=experiments/configs/squad.py:cpu --root=runs/grid/squad -- ...

Every run is `python -m experiments.ENTRY --config=CONFIG --config.variant=V
--config.seed=S --workdir=ROOT/V_sS` (ENTRY: a downstream run kind of
experiments/kinds.py: classify, squad or cifar) plus the arguments after
`--` (the same for every run; `predictor_export` is dropped for variants
that read no graphs). A run whose results.json exists is not repeated, so rerunning the
command resumes. With --parallel=N, N runs go at once, each pinned to its own
CPU core (taskset) with one XLA thread, which on a small CPU host is faster
than N·threads in one process for these small-matrix models (`--pin=false`
where the runs share a GPU).

Finally ROOT/table.md (and stdout) gets one row per variant: validation
(and test / matched / mismatched) accuracy, or SQuAD's validation and dev
EM / F1, as mean ± sample std over seeds, the number of seeds, training
wall time, and the command of that row.
"""
from __future__ import annotations

from absl import flags

from experiments import cli
from experiments.grid import run_grid, table, write_table
from experiments.kinds import DOWNSTREAM_KINDS

_ENTRY = flags.DEFINE_enum("entry", "classify", list(DOWNSTREAM_KINDS),
                           "The downstream run kind (experiments/kinds.py): "
                           "experiments.classify (IMDB, NLI, agreement, ...), experiments.squad "
                           "or experiments.cifar.")
_CONFIG = flags.DEFINE_string("config", None, "Classification, SQuAD or CIFAR config file (with :preset).")
_ROOT = flags.DEFINE_string("root", None, "Directory of the runs (ROOT/VARIANT_sSEED).")
_VARIANTS = flags.DEFINE_list("variants", ["baseline", "embeddings", "uniform"], "Variants.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds (config.seed).")
_PARALLEL = flags.DEFINE_integer("parallel", 1, "Runs at once, one CPU core each.")
_PIN = flags.DEFINE_bool("pin", True, "With --parallel: one CPU core and one XLA thread per run "
                         "(CPU hosts); --pin=false where the runs share an accelerator.")
_TABLE_ONLY = flags.DEFINE_bool("table_only", False, "Only tabulate existing results.")
flags.mark_flags_as_required(["config", "root"])


def main(argv):
  extra = list(argv[1:])
  root = _ROOT.value
  if not _TABLE_ONLY.value:
    run_grid(_CONFIG.value, root, _VARIANTS.value, _SEEDS.value, _PARALLEL.value, extra,
             _ENTRY.value, pin=_PIN.value)
  text = table(_CONFIG.value, root, _VARIANTS.value, extra, _ENTRY.value)
  write_table(root, text)


if __name__ == "__main__":
  cli.run(main)
