r"""The paper's ablation table (Table 2) at one token budget: pretrain the full
model and each ablation, then measure each one the same way.

  python -m experiments.ablations --pretrain_config=experiments/configs/wiki_cpu.py \
      --pretrain_config.corpus.pattern='../shared/data/wiki_text/enwiki2015_wikiextractor_part[123].jsonl.xz' \
      --pretrain_config.tokenizer_path=runs/wiki_cpu/tokenizer.model \
      --pretrain_config.eval_every=250 --root=runs/ablations --steps=1500 \
      --conllu=../shared/data/ud_english_ewt/en_ewt-ud-dev.conllu.gz \
      --transfer_config=experiments/configs/mnli.py --parallel=2 -- \
      --config.files.train=../shared/data/mnli/mnli_train_subset_9k.jsonl.xz \
      --config.optim.epochs=1

(`--pretrain_config.*` change the pretraining config; the `--config.*` after
`--` every transfer run's. The table of experiments/RESULTS.md, with every
option it used, took 2 hours on 2 cores.)

Ablations (DESIGN.md; `--ablations` picks some): full; no_decouple (graphs
from the feature predictor's own features); no_sparse (softmax instead of
the squared ReLU); no_hierarchical (L = 1); no_unit_level (the sentence
objective); no_sequence (D = 1). Two more rows try the authors' other
thresholds against dead heads: scalar_threshold (one learned θ per layer,
their sparse_mode 2) and zero_threshold (θ = 0, their sparse_mode 1).
Each is pretrained for `--steps` steps in ROOT/NAME (the same batches, so
the same token budget), and gets:
* the held-out loss per predicted token, comparable only between runs with
  the same objective and D (all but no_unit_level and no_sequence);
* the dead heads and the share of empty rows over all graph layers, from
  the held-out evaluation (`glomo_jax.eval.row_health`), at the end and at
  every evaluation (the second table: how heads die over steps);
* with `--conllu`: the syntax alignment of the mean of all its heads
  (`experiments.syntax_alignment`'s 'fw+bw mean' row: head share, UUAS);
* with `--transfer_config`: GLoMo on embeddings for every seed
  (`experiments.grid`, ROOT/NAME/transfer), and once the uniform graph
  (ROOT/uniform), the paper's "uniform graph" row. Arguments after `--` go
  to every transfer run.
Everything resumes: a finished pretraining or transfer run is not repeated.
Writes ROOT/ablations.md (and prints it).
"""
from __future__ import annotations

import json
import os
import statistics

from absl import flags
from ml_collections import config_flags

from experiments import cli
from experiments.grid import finished_results, mean_std, run_grid

_CONFIG = config_flags.DEFINE_config_file("pretrain_config", None,
                                          "Pretraining config file.", lock_config=True)
_ROOT = flags.DEFINE_string("root", None, "Directory of every run and the table.")
_STEPS = flags.DEFINE_integer("steps", None, "Pretraining steps of every ablation "
                              "(default: the config's num_steps).")
_ABLATIONS = flags.DEFINE_list("ablations", None, "Which ablations (default: all).")
_CONLLU = flags.DEFINE_string("conllu", None, "CoNLL-U treebank for the syntax alignment.")
_TRANSFER = flags.DEFINE_string("transfer_config", None, "Transfer config (with :preset).")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Transfer seeds.")
_PARALLEL = flags.DEFINE_integer("parallel", 1, "Transfer runs at once, one core each.")
flags.mark_flags_as_required(["pretrain_config", "root"])

ABLATIONS = {   # name -> model overrides
    "full": {},
    "no_decouple": {"decoupled": False},
    "no_sparse": {"sparsity": "softmax"},
    "no_hierarchical": {"num_graph_layers": 1},
    "no_unit_level": {"objective": "sentence"},
    "no_sequence": {"context_length": 1},
    "scalar_threshold": {"threshold": "scalar"},
    "zero_threshold": {"threshold": "zero"},
}
COMPARABLE_LOSS = ("full", "no_decouple", "no_sparse", "no_hierarchical",
                   "scalar_threshold", "zero_threshold")
SUMMARY = "ablation.json"


def ablation_config(base: dict, name: str, steps: int | None):
  """The PretrainConfig of one ablation."""
  from glomo_jax.pretraining import PretrainConfig  # noqa: PLC0415
  if name not in ABLATIONS:
    raise ValueError(f"unknown ablation {name!r}: one of {list(ABLATIONS)}")
  values = json.loads(json.dumps(base))
  values["model"] = dict(values.get("model", {}), **ABLATIONS[name])
  if steps is not None:
    values["num_steps"] = steps
  return PretrainConfig.from_dict(values)


def row_health_totals(heldout: dict) -> dict:
  """Dead heads over all graph layers and their mean share of empty rows,
  from one held-out evaluation's per-layer metrics."""
  empty = [v for k, v in heldout.items() if k.startswith("empty_rows_")]
  return {"dead_heads": sum(v for k, v in heldout.items() if k.startswith("dead_heads_")),
          "empty_rows": statistics.fmean(empty) if empty else None}


def pretrain_and_measure(name: str, base: dict, root: str, steps: int | None,
                         conllu: str | None) -> dict | None:
  """Pretrains one ablation (resuming) and measures it; returns its record
  (also written to ROOT/NAME/ablation.json), or None if it was preempted."""
  from glomo_jax.eval.conllu import read_conllu  # noqa: PLC0415
  from glomo_jax.eval.treebank_alignment import score_treebank  # noqa: PLC0415
  from glomo_jax.export import load_graph_predictor  # noqa: PLC0415
  from glomo_jax.io import write_json  # noqa: PLC0415
  from glomo_jax.pretraining import train_and_evaluate  # noqa: PLC0415
  workdir = os.path.join(root, name)
  path = os.path.join(workdir, SUMMARY)
  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  config = ablation_config(base, name, steps)
  summary = train_and_evaluate(config, workdir,
                               compilation_cache_dir=cli.compilation_cache_dir(workdir))
  if summary["preempted"]:
    return None
  heldout = summary["eval"].get("heldout", {})
  record = {"ablation": name, "step": summary["step"], "export": summary["export"],
            "heldout_loss": heldout.get("loss"),
            "heads": 2 * config.model.num_graph_layers * config.model.num_heads,
            **row_health_totals(heldout),
            "health_by_step": [{"step": e["step"], **row_health_totals(e["heldout"])}
                               for e in summary["history"] if "heldout" in e]}
  if conllu:
    scores = score_treebank(list(read_conllu(conllu)),
                            {"": load_graph_predictor(summary["export"])})
    record["syntax_sentences"] = scores["sentences"]
    record["syntax"] = scores["graphs"].get("fw+bw mean")    # None: nothing scored
  write_json(path, record)
  return record


def transfer_accuracies(folder: str, variant: str) -> list[float]:
  """Validation accuracies (%) of the finished runs FOLDER/VARIANT_sSEED."""
  return [100 * r["validation_accuracy"] for r in finished_results(folder, variant)]


def ablation_table(records: list[dict], transfer: dict[str, list[float]]) -> str:
  lines = ["| ablation | held-out loss | dead heads | empty rows | syntax: head | "
           "syntax: UUAS | transfer accuracy (%) |", "|---|---|---|---|---|---|---|"]
  for r in records:
    loss = (f"{r['heldout_loss']:.3f}" if r["ablation"] in COMPARABLE_LOSS
            else f"({r['heldout_loss']:.3f}, not comparable)")
    syntax = r.get("syntax") or {}
    cells = [r["ablation"], loss, f"{r['dead_heads']:.0f} of {r['heads']}",
             "–" if r["empty_rows"] is None else f"{r['empty_rows']:.3f}",
             f"{syntax['head']:.3f}" if syntax else "–",
             f"{syntax['uuas']:.3f}" if syntax else "–",
             mean_std(transfer.get(r["ablation"], []))]
    lines.append("| " + " | ".join(cells) + " |")
  if "uniform" in transfer:
    lines.append(f"| uniform graph (at transfer) | – | – | – | – | – | "
                 f"{mean_std(transfer['uniform'])} |")
  return "\n".join(lines) + (
      "\n\nHeld-out loss: nats per predicted token. Empty rows: mean over the graph "
      "layers. Syntax: the mean of all heads against the treebank. Transfer: "
      "validation accuracy, mean ± sample std over seeds.\n")


def health_table(records: list[dict]) -> str:
  """Dead heads (and the mean share of empty rows) at every evaluation."""
  steps = sorted({h["step"] for r in records for h in r.get("health_by_step", [])})
  lines = ["| ablation | " + " | ".join(f"step {s}" for s in steps) + " |",
           "|---|" + "---|" * len(steps)]
  for r in records:
    at = {h["step"]: h for h in r.get("health_by_step", [])}
    cells = [f"{at[s]['dead_heads']:.0f} / {at[s]['empty_rows']:.2f}"
             if s in at and at[s]["empty_rows"] is not None else "–" for s in steps]
    lines.append(f"| {r['ablation']} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + ("\n\nDead heads (of all directions and layers) / mean "
                             "share of empty rows, at each held-out evaluation.\n")


def main(argv):
  extra = list(argv[1:])
  root = _ROOT.value
  names = _ABLATIONS.value or list(ABLATIONS)
  unknown = [n for n in names if n not in ABLATIONS]
  if unknown:
    raise ValueError(f"unknown ablations {unknown}: choose from {list(ABLATIONS)}")
  if _CONLLU.value and not os.path.exists(_CONLLU.value):
    raise ValueError(f"--conllu={_CONLLU.value} does not exist")
  base = _CONFIG.value.to_dict()
  records, transfer = [], {}
  for name in names:
    record = pretrain_and_measure(name, base, root, _STEPS.value, _CONLLU.value)
    if record is None:
      print("a pretraining run stopped before the end; rerun the same command to resume")
      return
    records.append(record)
    if _TRANSFER.value:
      folder = os.path.join(root, name, "transfer")
      run_grid(_TRANSFER.value, folder, ["embeddings"], _SEEDS.value, _PARALLEL.value,
               extra + [f"--config.predictor_export={record['export']}"])
      transfer[name] = transfer_accuracies(folder, "embeddings")
  if _TRANSFER.value:
    folder = os.path.join(root, "uniform")
    run_grid(_TRANSFER.value, folder, ["uniform"], _SEEDS.value, _PARALLEL.value, extra)
    transfer["uniform"] = transfer_accuracies(folder, "uniform")
  text = ablation_table(records, transfer) + "\n" + health_table(records)
  with open(os.path.join(root, "ablations.md"), "w", encoding="utf-8") as f:
    f.write(text)
  print(text)


if __name__ == "__main__":
  cli.run(main)
