r"""The verb-number experiments: rows (variants and oracles) × seeds, then the
table with paired differences.

  # the oracle experiment: train on UD EWT train, test on UD EWT dev
  python -m experiments.verb_number_grid --root=runs/vn_ud --config=experiments/configs/verb_number.py:ud \
      --rows=baseline,uniform,glomo,subject_arc,gold_tree --seeds=0,1,2,3,4 --parallel=2 -- \
      --config.files.train=runs/verb_number_data/ud_train.jsonl.gz \
      --config.files.gold=runs/verb_number_data/ud_dev.jsonl.gz \
      --config.glove_path=../shared/data/glove/glove.6B.100d.top2604.txt.gz \
      --config.predictor_export=runs/wiki_cpu/export

  # a learning-curve point: N rule-labelled Wikipedia examples, tested on
  # held-out Wikipedia and on every gold UD instance
  python -m experiments.verb_number_grid --root=runs/vn_wiki_8000 --rows=baseline,uniform,glomo \
      --seeds=0,1,2,3,4 --parallel=2 -- --config.max_train_examples=8000 \
      --config.files.train=runs/verb_number_data/wiki_train.jsonl.gz \
      --config.files.test=runs/verb_number_data/wiki_test.jsonl.gz \
      --config.files.gold=runs/verb_number_data/ud_all.jsonl.gz ...

Rows: baseline, uniform (the uniform graph), glomo / glomo_rnn (the
predictor's graphs on the embeddings / the first RNN layer's states),
subject_arc and gold_tree (the gold arcs as graphs; UD data only). Each run
is `experiments.classify` in ROOT/ROW_sSEED (`grid.run_commands`: a finished
run is not repeated, so rerunning resumes); the GLoMo rows share one graph
cache (ROOT/graph_cache). ROOT/table.md gets, per row, the accuracy of each
score (mean ± std over seeds) and the paired difference to the baseline and
to the uniform graph (mean ± standard error over the seeds both have).
"""
from __future__ import annotations

import os

from absl import flags

from experiments import cli
from experiments.grid import paired_table, run_command, run_commands, write_table

ROWS = {
    "baseline": ("baseline", []),
    "uniform": ("uniform", []),
    "glomo": ("embeddings", []),
    "glomo_rnn": ("rnn", []),
    "subject_arc": ("embeddings", ["--config.graph_source=arcs",
                                   "--config.oracle_arcs=subject"]),
    "gold_tree": ("embeddings", ["--config.graph_source=arcs", "--config.oracle_arcs=tree"]),
}
_CONFIG = flags.DEFINE_string("config", "experiments/configs/verb_number.py", "Config file.")
_ROOT = flags.DEFINE_string("root", None, "Directory of the runs (ROOT/ROW_sSEED).")
_ROWS = flags.DEFINE_list("rows", ["baseline", "uniform", "glomo"], f"Rows: {list(ROWS)}.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2", "3", "4"], "Seeds (config.seed).")
_PARALLEL = flags.DEFINE_integer("parallel", 1, "Runs at once, one CPU core each.")
_TABLE_ONLY = flags.DEFINE_bool("table_only", False, "Only tabulate existing results.")
flags.mark_flags_as_required(["root"])


def main(argv):
  extra = list(argv[1:])
  root = _ROOT.value
  unknown = [r for r in _ROWS.value if r not in ROWS]
  if unknown:
    raise ValueError(f"unknown rows {unknown}: use {list(ROWS)}")
  if not _TABLE_ONLY.value:
    todo = []
    for name in _ROWS.value:
      variant, args = ROWS[name]
      cache = [f"--config.graph_cache_dir={os.path.join(root, 'graph_cache')}"]
      for seed in _SEEDS.value:
        workdir = os.path.join(root, f"{name}_s{seed}")
        todo.append((run_command(_CONFIG.value, variant, seed, workdir,
                                 extra + args + cache), workdir))
    run_commands(todo, _PARALLEL.value)
  text = paired_table(root, _ROWS.value)
  write_table(root, text)


if __name__ == "__main__":
  cli.run(main)
