r"""A graph predictor's quality at a fixed budget: one row per config change,
one table.

  python -m experiments.predictor_table --pretrain_config=experiments/configs/wiki_cpu.py \
      --pretrain_config.corpus.pattern='../shared/data/wiki_text/enwiki2015_wikiextractor_part[123].jsonl.xz' \
      --root=runs/table_1500 --steps=1500 --rows=optimizer,structure,fixed_graphs \
      --conllu=../shared/data/ud_english_ewt/en_ewt-ud-dev.conllu.gz \
      --select_conllu=../shared/data/ud_english_ewt/en_ewt-ud-train.conllu.gz

Rows come from the named sets of `experiments/predictor_rows.py`
(`--rows`; `--only` keeps some of their names) and from `--row='NAME:
field=value field=value'` (dotted `PretrainConfig` paths, e.g.
`--row='deep: model.key_layers=4 model.query_layers=4'`). Every row is
pretrained from the same config, tokenizer (trained once into ROOT unless
the config names one) and batches for `--steps` steps (`steps_fraction`
scales one row's), for each of `--pretrain_seeds`, in ROOT/NAME_sSEED, and
gets, from its final held-out evaluation and its export:

* held-out loss per predicted token (comparable between rows with the same
  objective and context length);
* dead heads and the share of empty rows over all graph layers, with the
  running BatchNorm statistics and with the batch's (as in training), also
  at every evaluation (the second table);
* locality on the held-out windows (`glomo_jax.eval.locality`): the weight
  on the previous unit (forward layers) and the next one (backward), and
  the mean source distance, each beside a uniform graph's;
* with `--conllu`: the UD alignment (`glomo_jax.eval.treebank_alignment`)
  of the mean of all heads and of the best single head (head share, UUAS),
  the head picked on `--select_conllu` (its first `--select_sentences`
  sentences; default: on the reported treebank itself), beside the same
  architecture untrained and the best fixed offset;
* steps/s of the run (wall time in the loop, evaluations included) and the
  tokens it read;
* with `--classify_config`: GLoMo on embeddings for every `--seeds` and
  once the uniform graph (`experiments.grid`); arguments after `--` go to
  every classification run (`--config.*` there are the classification config's; the
pretraining config's overrides are `--pretrain_config.*`).

Rows with fixed graphs (graph_source other than 'predicted') train no
predictor: they give the held-out loss and the locality of their graphs.
Everything resumes: a measured row is not repeated. Writes ROOT/table.md.
"""
from __future__ import annotations

import json
import os
import statistics

from absl import flags
from ml_collections import config_flags

from experiments import cli
from experiments.predictor_rows import ROW_SETS
from experiments.grid import finished_results, run_grid
from experiments.table_format import (arc_table, health_table, losses_comparable, quality_table,
                                      transfer_table)
from experiments.table_rows import row_config, table_rows

_CONFIG = config_flags.DEFINE_config_file("pretrain_config", None, "Pretraining config file.",
                                          lock_config=True)
_ROOT = flags.DEFINE_string("root", None, "Directory of every run and the table.")
_STEPS = flags.DEFINE_integer("steps", None, "Steps of every row (default: the config's).")
_ROWS = flags.DEFINE_list("rows", [], f"Named row sets: {sorted(ROW_SETS)}.")
_ONLY = flags.DEFINE_list("only", None, "Keep only these rows of the named sets.")
_ROW = flags.DEFINE_multi_string("row", [], "A row 'NAME: field=value field=value'.")
_PRETRAIN_SEEDS = flags.DEFINE_list("pretrain_seeds", ["0"], "Pretraining seeds of every row.")
_CONLLU = flags.DEFINE_string("conllu", None, "CoNLL-U treebank the alignment is reported on.")
_SELECT = flags.DEFINE_string("select_conllu", None,
                              "CoNLL-U treebank the best head is picked on.")
_SELECT_N = flags.DEFINE_integer("select_sentences", 2000, "Sentences of --select_conllu.")
_CLASSIFY = flags.DEFINE_string("classify_config", None,
                                "Classification config (with :preset).")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Transfer seeds.")
_PARALLEL = flags.DEFINE_integer("parallel", 1, "Transfer runs at once, one core each.")
flags.mark_flags_as_required(["pretrain_config", "root"])

RECORD = "record.json"


def _totals(metrics: dict, prefix: str = "") -> dict:
  """Dead heads (all layers) and the mean share of empty rows of one
  held-out evaluation's per-layer metrics (`prefix`: 'batch_stats_')."""
  dead = [v for k, v in metrics.items() if k.startswith(f"{prefix}dead_heads_")]
  empty = [v for k, v in metrics.items() if k.startswith(f"{prefix}empty_rows_")]
  return {"dead_heads": sum(dead) if dead else None,
          "empty_rows": statistics.fmean(empty) if empty else None}


def _layer_mean(metrics: dict, name: str, direction: str | None = None) -> float | None:
  """Mean over layers (of one direction) of a per-layer locality metric."""
  keys = [k for k in metrics if k.startswith(f"{name}_")
          and k[len(name) + 1:].rstrip("0123456789") in ("fw", "bw")]
  if direction:
    keys = [k for k in keys if k[len(name) + 1:].startswith(direction)]
  return statistics.fmean(metrics[k] for k in keys) if keys else None


def heldout_columns(heldout: dict) -> dict:
  """The table's columns from one held-out evaluation."""
  running, batch = _totals(heldout), _totals(heldout, "batch_stats_")
  return {"heldout_loss": heldout.get("loss"),
          "dead_heads": running["dead_heads"], "empty_rows": running["empty_rows"],
          "dead_heads_batch_stats": batch["dead_heads"],
          "empty_rows_batch_stats": batch["empty_rows"],
          "near_fw": _layer_mean(heldout, "near", "fw"),
          "near_bw": _layer_mean(heldout, "near", "bw"),
          "near_uniform_fw": _layer_mean(heldout, "near_uniform", "fw"),
          "near_uniform_bw": _layer_mean(heldout, "near_uniform", "bw"),
          "distance": _layer_mean(heldout, "distance"),
          "distance_uniform": _layer_mean(heldout, "distance_uniform")}


_SENTENCES: dict[tuple[str, int], list] = {}


def _sentences(path: str, limit: int = 0) -> list:
  from glomo_jax.eval.conllu import read_conllu  # noqa: PLC0415
  if (path, limit) not in _SENTENCES:
    sentences = list(read_conllu(path))
    _SENTENCES[(path, limit)] = sentences[:limit] if limit else sentences
  return _SENTENCES[(path, limit)]


def syntax_columns(export: str, conllu: str, select: str | None, select_n: int) -> dict:
  """UD alignment of a predictor (module docstring): {'mean', 'best_head',
  'untrained_mean', 'best_offset'}, each {'head', 'uuas'} (best_head and
  best_offset also 'name'), and 'picked_on'."""
  from glomo_jax.eval.treebank_alignment import (best_by, score_treebank,  # noqa: PLC0415
                                                 single_heads, untrained_twin)
  from glomo_jax.export import load_graph_predictor  # noqa: PLC0415
  predictor = load_graph_predictor(export)
  report = score_treebank(_sentences(conllu),
                          {"": predictor, "untrained": untrained_twin(predictor)})
  picking = report if not select else score_treebank(_sentences(select, select_n),
                                                     {"": predictor})
  graphs = report["graphs"]
  best = best_by(picking, "head", single_heads(list(picking["graphs"])))
  offsets = [n for n in graphs if n.startswith("offset ")]
  offset = best_by(report, "head", offsets)

  def cell(name):
    return {"name": name, "head": graphs[name]["head"], "uuas": graphs[name]["uuas"]}
  return {"mean": cell("fw+bw mean"), "best_head": cell(best),
          "untrained_mean": cell("untrained fw+bw mean"), "best_offset": cell(offset),
          "sentences": report["sentences"],
          "picked_on": f"{select} (first {select_n})" if select else conllu}


def pretrain_and_measure(name: str, seed: int, config, changes: dict, root: str,
                         comparable: bool) -> dict | None:
  """Pretrains one row and seed (resuming) and measures it; its record (also
  ROOT/NAME_sSEED/record.json), or None if the run was preempted."""
  from glomo_jax.io import write_json  # noqa: PLC0415
  from glomo_jax.pretraining import train_and_evaluate  # noqa: PLC0415
  workdir = os.path.join(root, f"{name}_s{seed}")
  path = os.path.join(workdir, RECORD)
  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  os.makedirs(workdir, exist_ok=True)
  shared_cache = os.path.join(root, "token_cache")
  os.makedirs(shared_cache, exist_ok=True)
  if not os.path.lexists(os.path.join(workdir, "cache")):   # one tokenized corpus for all rows
    os.symlink(os.path.abspath(shared_cache), os.path.join(workdir, "cache"))
  summary = train_and_evaluate(config, workdir,
                               compilation_cache_dir=cli.compilation_cache_dir(workdir))
  if summary["preempted"]:
    return None
  heldout = summary["eval"].get("heldout", {})
  m = config.model
  record = {"row": name, "seed": seed, "changes": changes, "step": summary["step"],
            "tokens_seen": summary["step"] * config.batch_size * config.bptt,
            "steps_per_s": summary["step"] / max(summary["train_seconds"], 1e-9),
            "comparable": comparable, "graph_source": config.graph_source,
            "heads": 2 * m.num_graph_layers * m.num_heads, "export": summary.get("export"),
            **heldout_columns(heldout),
            "health_by_step": [{"step": e["step"], **_totals(e["heldout"]),
                                "batch_stats": _totals(e["heldout"], "batch_stats_")}
                               for e in summary["history"] if "heldout" in e]}
  arcs = summary.get("arcs") or {}
  if arcs.get("final"):          # the built-in corpus: weight on the planted arcs
    record["arcs"] = {which: {k: arcs[which].get(f"predicting_{k}")
                              for k in ("best", "top1", "chance")}
                      for which in ("final", "untrained") if arcs.get(which)}
  if _CONLLU.value and record["export"]:
    record["syntax"] = syntax_columns(record["export"], _CONLLU.value, _SELECT.value,
                                      _SELECT_N.value)
  write_json(path, record)
  return record


def _transfer_accuracies(folder: str, variant: str) -> list[float]:
  return [100 * r["validation_accuracy"] for r in finished_results(folder, variant)]


def main(argv):
  from glomo_jax.pretraining import prepare_tokenizer, PretrainConfig  # noqa: PLC0415
  extra = list(argv[1:])
  root = _ROOT.value
  rows = table_rows(_ROWS.value, _ONLY.value, _ROW.value)
  for path in (_CONLLU.value, _SELECT.value):
    if path and not os.path.exists(path):
      raise ValueError(f"{path} does not exist")
  base = _CONFIG.value.to_dict()
  if not base.get("tokenizer_path"):     # one tokenizer for every row
    os.makedirs(root, exist_ok=True)
    prepare_tokenizer(PretrainConfig.from_dict(base), root)
    base["tokenizer_path"] = os.path.abspath(os.path.join(root, "tokenizer.model"))
  base_model = PretrainConfig.from_dict(base).model
  groups, transfer = {}, {}
  for name, changes in rows.items():
    for seed in (int(s) for s in _PRETRAIN_SEEDS.value):
      config = row_config(base, changes, _STEPS.value, root, seed)
      record = pretrain_and_measure(name, seed, config, changes, root,
                                    losses_comparable(config.model, base_model))
      if record is None:
        print("a pretraining run stopped before the end; rerun the same command to resume")
        return
      groups.setdefault(name, []).append(record)
    first = groups[name][0]
    if _CLASSIFY.value and first["export"]:
      folder = os.path.join(root, f"{name}_s{first['seed']}", "transfer")
      run_grid(_CLASSIFY.value, folder, ["embeddings"], _SEEDS.value, _PARALLEL.value,
               extra + [f"--config.predictor_export={first['export']}"])
      transfer[name] = _transfer_accuracies(folder, "embeddings")
  if _CLASSIFY.value:
    folder = os.path.join(root, "uniform")
    run_grid(_CLASSIFY.value, folder, ["uniform"], _SEEDS.value, _PARALLEL.value, extra)
    transfer["uniform graph (at transfer)"] = _transfer_accuracies(folder, "uniform")
  text = quality_table(groups) + "\n" + health_table(groups)
  if arc_table(groups):
    text += "\n" + arc_table(groups)
  if transfer:
    text += "\n" + transfer_table(transfer)
  with open(os.path.join(root, "table.md"), "w", encoding="utf-8") as f:
    f.write(text)
  print(text)


if __name__ == "__main__":
  cli.run(main)
