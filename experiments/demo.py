r"""The main job: pretrain on the built-in corpus, export, draw, and show
whether the graphs learned the planted dependencies.

  python -m experiments.demo --workdir=runs/demo

1. pretrains GLoMo on the synthetic corpus (experiments/configs/demo.py;
   6,000 steps, about 6 minutes on 2 CPU cores), which exports the graph predictor;
2. loads the export as another program would and draws a sentence's graphs
   (<workdir>/graphs.png, every layer and head);
3. prints how much graph weight falls on the planted true arcs (agreement,
   brackets, copied names) for the trained predictor, the untrained one and a
   uniform graph (chance);
4. transfers the frozen graphs into a downstream classifier: subject–verb
   agreement judgements on sentences the predictor never saw
   (experiments/configs/agreement.py: 2,000 training sentences, where the
   data-efficiency curve of experiments/results/agreement.md separates the
   variants),
   trained as the baseline (no graph), with the uniform graph, with the
   predictor's graphs fused into the word embeddings (GLoMo), and with the
   planted arcs themselves as graphs (the oracle); prints their test
   accuracies.
"""
from __future__ import annotations

import json
import os

from absl import flags
from ml_collections import config_flags

from experiments import cli

_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(os.path.dirname(__file__), "configs", "demo.py"),
    "Pretraining config.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", "runs/demo", "Run directory.")
_VARIANTS = flags.DEFINE_list("variants", ["baseline", "uniform", "embeddings", "arcs"],
                              "Variants of the agreement classification runs ('arcs': GLoMo on "
                              "embeddings with the planted arcs as graphs; empty: none).")
_AGREEMENT_PRESET = flags.DEFINE_string(
    "agreement_preset", "", "Preset of experiments/configs/agreement.py ('' or 'tiny').")


def held_out_sentences(synthetic, words: int = 30) -> str:
  """The start of the last synthetic document (in the held-out split)."""
  from glomo_jax.data import generate_document  # noqa: PLC0415
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


def agreement_runs(export: str, synthetic, workdir: str, variants, preset: str = ""
                  ) -> list[dict]:
  """The agreement task (experiments/configs/agreement.py) on sentences after
  the pretraining corpus `synthetic`, once per variant; returns the results."""
  from experiments.configs import agreement  # noqa: PLC0415
  from glomo_jax.classification import ClassificationConfig, run_classification  # noqa: PLC0415
  out = []
  for variant in variants:
    config = agreement.get_config(preset)
    config.synthetic.num_documents = synthetic.num_documents
    config.synthetic.seed = synthetic.seed
    config.variant = "embeddings" if variant == "arcs" else variant
    config.graph_source = "arcs" if variant == "arcs" else "predictor"
    config = ClassificationConfig.from_dict(config.to_dict())
    if config.reads_graphs:
      config = config.replace(predictor_export=export)
    results = run_classification(config, os.path.join(workdir, "agreement", variant))
    if results.get("preempted"):
      break
    out.append(results)
  return out


def agreement_table(results: list[dict]) -> str:
  lines = ["downstream: does every verb agree with its subject? (sentences the predictor "
           "never saw; BiGRU + self-attention classifier)",
           f"  {'variant':<11} {'graph':<22} {'validation':>10} {'test':>7} {'train s':>8}"]
  graph = {"baseline": "none", "uniform": "uniform (mean of words)",
           "embeddings": "GLoMo, on embeddings", "rnn": "GLoMo, on RNN states",
           "arcs": "planted arcs (oracle)"}
  for r in results:
    variant = "arcs" if r.get("graph_source") == "arcs" else r["variant"]
    lines.append(f"  {variant:<11} {graph[variant]:<22} "
                 f"{r['validation_accuracy']:10.3f} {r['test']:7.3f} {r['train_time_s']:8.0f}")
  n = results[0]["examples"] if results else {}
  lines.append(f"  accuracy; {n.get('train')} training sentences, {n.get('test')} test "
               "sentences, half with one verb in the wrong number (chance 0.5)")
  return "\n".join(lines)


def main(argv):
  del argv
  from glomo_jax import tuning  # noqa: PLC0415
  tuning.start_process()  # GLOMO_JAX_CPU_TUNING=1 only; may restart the program
  from glomo_jax.pretraining import PretrainConfig, train_and_evaluate  # noqa: PLC0415
  from glomo_jax.visualize import plot_sentence  # noqa: PLC0415
  workdir = _WORKDIR.value
  config = PretrainConfig.from_dict(_CONFIG.value.to_dict())
  if config.corpus.source != "synthetic":
    raise ValueError("the demo reads the built-in synthetic corpus (its arcs are known): "
                     "use experiments.pretrain for other corpora")
  summary = train_and_evaluate(config, workdir,
                               compilation_cache_dir=cli.compilation_cache_dir(workdir))
  if summary["preempted"]:
    print("the run stopped before the end; rerun the same command to resume")
    return
  png = plot_sentence(summary["export"], held_out_sentences(config.corpus.synthetic),
                      os.path.join(workdir, "graphs.png"))
  heldout = summary["eval"].get("heldout", {})
  print(json.dumps({"step": summary["step"], "train_loss": summary["train"].get("loss"),
                    "eval_loss": heldout.get("loss"), "export": summary["export"],
                    "heatmap": png, "minutes": round(summary["elapsed_s"] / 60, 1)}, indent=1))
  print(arc_table(summary["arcs"]))
  if _VARIANTS.value:
    results = agreement_runs(summary["export"], config.corpus.synthetic, workdir,
                            _VARIANTS.value, _AGREEMENT_PRESET.value)
    if len(results) < len(_VARIANTS.value):
      print("a classification run stopped before the end; rerun the same command to resume")
      return
    print(agreement_table(results))


if __name__ == "__main__":
  cli.run(main)
