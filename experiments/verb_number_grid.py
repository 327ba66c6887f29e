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
is `experiments.transfer` in ROOT/ROW_sSEED (`grid.run_commands`: a finished
run is not repeated, so rerunning resumes); the GLoMo rows share one graph
cache (ROOT/graph_cache). ROOT/table.md gets, per row, the accuracy of each
score (mean ± std over seeds) and the paired difference to the baseline and
to the uniform graph (mean ± standard error over the seeds both have).
"""
from __future__ import annotations

import os
import statistics

from absl import flags

from experiments import cli
from experiments.grid import finished_results, run_command, run_commands, write_table

ROWS = {
    "baseline": ("baseline", []),
    "uniform": ("uniform", []),
    "glomo": ("embeddings", []),
    "glomo_rnn": ("rnn", []),
    "subject_arc": ("embeddings", ["--config.graph_source=arcs",
                                   "--config.oracle_arcs=subject"]),
    "gold_tree": ("embeddings", ["--config.graph_source=arcs", "--config.oracle_arcs=tree"]),
}
SCORES = (("validation", ("validation_accuracy",)), ("test", ("test",)),
          ("gold", ("gold",)), ("gold 0 attr", ("groups", "gold", "attractors_0")),
          ("gold ≥1 attr", ("groups", "gold", "attractors_1+")),
          ("gold d 1", ("groups", "gold", "distance_1")),
          ("gold d 2–3", ("groups", "gold", "distance_2-3")),
          ("gold d ≥4", ("groups", "gold", "distance_4+")))

_CONFIG = flags.DEFINE_string("config", "experiments/configs/verb_number.py", "Config file.")
_ROOT = flags.DEFINE_string("root", None, "Directory of the runs (ROOT/ROW_sSEED).")
_ROWS = flags.DEFINE_list("rows", ["baseline", "uniform", "glomo"], f"Rows: {list(ROWS)}.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2", "3", "4"], "Seeds (config.seed).")
_PARALLEL = flags.DEFINE_integer("parallel", 1, "Runs at once, one CPU core each.")
_TABLE_ONLY = flags.DEFINE_bool("table_only", False, "Only tabulate existing results.")
flags.mark_flags_as_required(["root"])


def score(result: dict, path: tuple[str, ...]) -> float | None:
  """A result's accuracy in % at `path` (None where the run has none)."""
  value = result
  for key in path:
    value = value.get(key) if isinstance(value, dict) else None
  if isinstance(value, dict):
    value = value["accuracy"]
  return None if value is None else 100 * value


def paired(rows: dict, row: str, other: str, path) -> str:
  """'mean ± standard error' of row − other over the seeds both have."""
  a = {r["seed"]: score(r, path) for r in rows.get(row, [])}
  b = {r["seed"]: score(r, path) for r in rows.get(other, [])}
  diffs = [a[s] - b[s] for s in a if s in b and a[s] is not None and b[s] is not None]
  if len(diffs) < 2:
    return "–"
  return (f"{statistics.fmean(diffs):+.2f} ± "
          f"{statistics.stdev(diffs) / len(diffs) ** 0.5:.2f}")


def table(root: str, names) -> str:
  rows = {n: finished_results(root, n) for n in names}
  shown = [(label, path) for label, path in SCORES
           if any(score(r, path) is not None for found in rows.values() for r in found)]
  lines = ["| row | seeds | " + " | ".join(label for label, _ in shown) + " |",
           "|" + "---|" * (len(shown) + 2)]
  for name, found in rows.items():
    if not found:
      continue
    cells = []
    for _, path in shown:
      values = [v for r in found if (v := score(r, path)) is not None]
      cells.append("–" if not values else f"{statistics.fmean(values):.1f}"
                   + (f" ± {statistics.stdev(values):.1f}" if len(values) > 1 else ""))
    lines.append(f"| {name} | {len(found)} | " + " | ".join(cells) + " |")
  for other in ("baseline", "uniform"):
    for name in rows:
      if name not in ("baseline", other) and rows[name] and rows.get(other):
        lines.append(f"| {name} − {other} (paired) | | "
                     + " | ".join(paired(rows, name, other, p) for _, p in shown) + " |")
  n = {r["seed"] for found in rows.values() for r in found}
  example = next((r for found in rows.values() for r in found), {})
  counts = example.get("groups", {}).get("gold", {})
  return ("\n".join(lines) + f"\n\nAccuracy in %, mean ± std over seeds ({len(n)}); paired: "
          "mean ± standard error of the per-seed difference. Gold items per group: "
          + ", ".join(f"{k} {v['examples']}" for k, v in counts.items()) + "\n")


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
  text = table(root, _ROWS.value)
  write_table(root, text)


if __name__ == "__main__":
  cli.run(main)
