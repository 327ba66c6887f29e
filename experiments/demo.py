r"""The main job: pretrain on the built-in corpus, export, draw, and show
whether the graphs learned the planted dependencies.

  python -m experiments.demo --workdir=runs/demo

1. pretrains GLoMo on the synthetic corpus (experiments/configs/demo.py;
   a few minutes on 2 CPU cores), which exports the graph predictor;
2. loads the export as another program would and draws a sentence's graphs
   (<workdir>/graphs.png, every layer and head);
3. prints how much graph weight falls on the planted true arcs (agreement,
   brackets, copied names) for the trained predictor, the untrained one and a
   uniform graph (chance).
"""
from __future__ import annotations

import json
import os

from absl import app, flags
from ml_collections import config_flags

from experiments.console import quiet_libraries
from glomo_jax.host_memory import reexec_with_tuned_malloc

_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(os.path.dirname(__file__), "configs", "demo.py"),
    "Pretraining config.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", "runs/demo", "Run directory.")


def held_out_sentences(config, words: int = 30) -> str:
  """The start of the last synthetic document (in the held-out split)."""
  from glomo_jax.data import SyntheticConfig, generate_document  # noqa: PLC0415
  synthetic = SyntheticConfig(**config.corpus.get("synthetic", {}))
  return " ".join(generate_document(synthetic, synthetic.num_documents - 1).words[:words])


def arc_table(record: dict) -> str:
  rows = [("trained", record.get("final", {})), ("untrained", record.get("untrained", {}))]
  lines = ["graph weight on the planted true arcs (held-out windows, forward graphs):",
           f"  {'predictor':<10} {'row':<11} {'best head':>9} {'mean':>7} {'top-1':>7} "
           f"{'chance':>7}  arcs"]
  for name, r in rows:
    for kind in ("predicting", "own"):
      if f"{kind}_best" not in r:
        continue
      lines.append(f"  {name:<10} {kind:<11} {r[f'{kind}_best']:9.3f} {r[f'{kind}_mean']:7.3f} "
                   f"{r[f'{kind}_top1']:7.3f} {r[f'{kind}_chance']:7.3f}  {r[f'{kind}_arcs']}")
  lines.append("  row 'predicting' = the row of the word before the dependent word (it must "
               "predict it); 'own' = the dependent word's row. best head = the best (layer, "
               "head)'s mean weight on the true source; top-1 = share of arcs whose row puts "
               "its largest weight on the true source; chance = a uniform graph's weight.")
  return "\n".join(lines)


def main(argv):
  del argv
  reexec_with_tuned_malloc()  # GLOMO_JAX_MALLOC_TUNE=1: glibc heap kept (CPU speed)
  quiet_libraries()
  from glomo_jax.train import TrainConfig, train_and_evaluate  # noqa: PLC0415
  from experiments.plot_graphs import plot_sentence  # noqa: PLC0415
  workdir = _WORKDIR.value
  summary = train_and_evaluate(TrainConfig.from_dict(_CONFIG.value.to_dict()), workdir)
  if "export" not in summary:
    print("the run stopped before the end; rerun the same command to resume")
    return
  png = plot_sentence(summary["export"], held_out_sentences(_CONFIG.value),
                      os.path.join(workdir, "graphs.png"))
  ev = summary.get("eval", {})
  print(json.dumps({"step": summary["step"], "train_loss": summary.get("train_loss"),
                    "eval_loss": ev.get("loss"), "export": summary["export"],
                    "heatmap": png, "minutes": round(summary["elapsed_s"] / 60, 1)}, indent=1))
  print(arc_table(summary["arcs"]))


if __name__ == "__main__":
  app.run(main)
