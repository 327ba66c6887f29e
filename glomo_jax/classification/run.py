"""A text classification run as one library call: `run_classification(config, workdir)`.

Loads the task (`load_task_data`: data files, TFDS or the built-in
agreement task; a validation split is carved from train unless one is
given), builds the vocabulary and the (GloVe) embedding table
(`text.fields.task_vocabulary`), loads the exported graph predictor and its
word-graph caches for the 'embeddings' / 'rnn' variants
(`graphs.task_graphs.task_graphs`), builds the task model (`build_model`), trains it
(`ClassificationTask` on `glomo_jax.downstream`: checkpoints, exact resume,
early stopping on validation accuracy) and writes `<workdir>/results.json`:
config, variant, seed, validation accuracy, the accuracy of each evaluation
split of the task (IMDB / SST-2 / SNLI 'test', MNLI 'matched' /
'mismatched'; null with a note where the data has none, e.g. the
train-only local files), best step, wall time and the validation curve.

Variants: baseline (no graph); embeddings / rnn → graphs fused into the
embeddings / the first RNN's states; uniform → the uniform-graph ablation
(no predictor). With graph_source='arcs' (agreement task only) the
embeddings / rnn variants read the known arcs instead of a predictor's
graphs: the oracle a predictor could at best match.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Any

from glomo_jax.classification.agreement import load_agreement_task
from glomo_jax.classification.config import EVAL_SPLITS, ClassificationConfig
from glomo_jax.classification.esim import ESIM
from glomo_jax.classification.task import ClassificationTask
from glomo_jax.classification.text_classifier import TextClassifier
from glomo_jax.classification.verb_number import SCORE_GROUPS, load_number_task
from glomo_jax.data.synthetic import SyntheticConfig
from glomo_jax.downstream.run import load_predictor, train_and_report
from glomo_jax.downstream.task import VALIDATION
from glomo_jax.graphs.task_graphs import ArcGraphs, task_graphs
from glomo_jax.text.fields import task_vocabulary
from glomo_jax.text.layers import embedding_initializer
from glomo_jax.text.readers import load_task
from glomo_jax.text.splits import TaskData
from glomo_jax.train.workdir import holding_workdir

logger = logging.getLogger("glomo_jax.classification")


def load_task_data(config: ClassificationConfig) -> TaskData:
  """The task's splits from the configured source."""
  if config.source == "synthetic":
    syn = config.synthetic
    return load_agreement_task(
        syn.train, syn.validation, syn.test, seed=config.data_seed,
        synthetic=SyntheticConfig(num_documents=syn.num_documents, seed=syn.seed))
  subsets = dict(val_fraction=config.val_fraction, seed=config.data_seed,
                 max_train_examples=config.max_train_examples,
                 max_eval_examples=config.max_eval_examples)
  files = {n: p for n, p in dataclasses.asdict(config.files).items() if p}
  if config.task == "verb_number":
    oracle = config.oracle_arcs if config.reads_graphs and config.graph_source == "arcs" else None
    return load_number_task(files, lowercase=config.lowercase, oracle=oracle,
                            max_words=config.max_words, **subsets)
  subsets["test_fraction"] = config.test_fraction
  if config.source == "files":
    return load_task(config.task, "files", files=files, **subsets)
  t = config.tfds
  return load_task(config.task, "tfds", validation=t.validation, data_dir=t.data_dir,
                   tfds_reader=t.reader, download=t.download, **subsets)


def build_model(config: ClassificationConfig, data: TaskData, vocab_size: int, table,
                predictor_layers: int | None = None):
  """TextClassifier for one text field, ESIM for two, with the config's
  variant and the embedding table `table` [vocab_size, D]; `predictor_layers`:
  L of the graphs it reads (None: model.transfer's, 3 by default)."""
  m = config.model
  common = dict(vocab_size=vocab_size, embed_dim=m.embed_dim, hidden=m.hidden,
                num_classes=data.num_classes, dropout_rate=m.dropout_rate,
                embedding_init=embedding_initializer(table),
                freeze_embeddings=m.freeze_embeddings, variant=config.variant,
                transfer=m.transfer.for_predictor(predictor_layers))
  if len(data.text_fields) == 1:          # imdb, sst2, agreement: one text
    return TextClassifier(rnn_layers=m.rnn_layers, **common)
  return ESIM(self_attention=m.self_attention, rnn_layers=m.rnn_layers, **common)


@holding_workdir
def run_classification(config: ClassificationConfig, workdir: str, *, devices=None,
                 compilation_cache_dir: str | None = None) -> dict[str, Any]:
  """One text classification run (module docstring); returns (and writes)
  the results.json dict. Rerunning it in the same workdir resumes the run, or,
  once finished, evaluates again without training. devices: the mesh's
  (default all); compilation_cache_dir: JAX's persistent cache (None: off)."""
  config.check()
  start = time.time()
  os.makedirs(workdir, exist_ok=True)
  data = load_task_data(config)
  logger.info("%s: %s", config.task, data.summary())
  vocab, table, coverage = task_vocabulary(config, data, config.vocab, config.model,
                                           config.data_seed)

  predictor = graphs = None
  graph_layers = None
  if config.reads_graphs and config.graph_source == "arcs":
    graph_layers = config.model.transfer.layers_for()
    graphs = ArcGraphs(data, graph_layers)
    logger.info("graphs from the known arcs (L=%d, K=1)", graph_layers)
  elif config.reads_graphs:
    predictor = load_predictor(config.predictor_export)
    root = config.graph_cache_root(workdir)
    t0 = time.time()
    graphs = task_graphs(config, predictor, data, root, config.max_words,
                         top_k=config.graph_cache_topk)
    logger.info("predictor %s (L=%d, K=%d); graph cache %s ready (%.1f s)",
                config.predictor_export, predictor.config.num_graph_layers,
                predictor.config.num_heads, root, time.time() - t0)
    graph_layers = predictor.config.num_graph_layers

  groups = SCORE_GROUPS if config.task == "verb_number" else ()
  task = ClassificationTask(build_model(config, data, len(vocab), table, graph_layers), data,
                            vocab, config, graphs, groups)
  return train_and_report(
      task, workdir, lambda summary: {
          **scores(config, summary["results"]),
          **group_scores(summary.get("held_out_metrics", {})),
          "examples": {n: len(s) for n, s in data.splits.items()},
          "vocabulary": len(vocab), "glove": str(coverage)},
      start=start, predictor=predictor, devices=devices,
      compilation_cache_dir=compilation_cache_dir)


def scores(config: ClassificationConfig, results_of_splits: dict) -> dict:
  """results.json's scores of a finished run: the task, graph source,
  validation accuracy and each evaluation split's (null, with a note, where
  the data has none)."""
  results = {"task": config.task,
             "graph_source": config.graph_source if config.reads_graphs else None,
             "validation_accuracy": results_of_splits[VALIDATION]}
  missing = []
  for name in EVAL_SPLITS[config.task]:
    results[name] = results_of_splits.get(name)
    if results[name] is None:
      missing.append(name)
  notes = []
  if config.test_fraction:
    notes.append(f"{EVAL_SPLITS[config.task][0]}: a {config.test_fraction:g} share carved "
                 "from train (after validation), not an official split")
  if missing:
    carved = not (config.files.validation if config.source == "files"
                  else config.tfds.validation)
    notes.append(f"the data has no held-out {'/'.join(missing)} split (e.g. the train-only "
                 "local files): its accuracy is not reported"
                 + (f" (validation: a {config.val_fraction:g} share carved from train)"
                    if carved else ""))
  if notes:
    results["note"] = "; ".join(notes)
  return results


def group_scores(held_out_metrics: dict) -> dict:
  """{'groups': {split: {group: {'accuracy', 'examples'}}}} of the held-out
  splits scored by group (the verb-number task); {} for none."""
  groups = {}
  for split, metrics in held_out_metrics.items():
    names = [k.partition("/")[2] for k in metrics if k.startswith("accuracy/")]
    if names:
      groups[split] = {n: {"accuracy": metrics[f"accuracy/{n}"],
                           "examples": int(metrics[f"examples/{n}"])} for n in names}
  return {"groups": groups} if groups else {}
