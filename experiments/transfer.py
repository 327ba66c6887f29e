r"""Downstream transfer: IMDB / MNLI / SNLI classifiers with or without GLoMo graphs.

  python -m experiments.transfer --config=experiments/configs/imdb.py \
      --config.files.train=../shared/data/imdb/imdb_train.jsonl.gz \
      --workdir=runs/imdb_baseline [--config.variant=embeddings \
      --config.predictor_export=runs/wiki_cpu/export] [--config.seed=1]

  python -m experiments.transfer --config=experiments/configs/mnli.py \
      --config.files.train=../shared/data/mnli/mnli_train_subset_9k.jsonl.xz \
      --workdir=runs/mnli_baseline

Loads the task (`glomo_jax.tasks.load_task`; a validation split is carved from
train unless one is given), builds the vocabulary and the (GloVe) embedding
table, loads the exported graph predictor for the 'embeddings' / 'rnn'
variants with an on-disk word-graph cache, trains (`train_classifier`, early
stopping on validation accuracy) and writes `<workdir>/results.json`:
config, variant, seed, validation accuracy, the accuracy of each evaluation
split of the task (IMDB / SNLI 'test', MNLI 'matched' / 'mismatched'; null
with a note where the data has none, e.g. the train-only local files), best
step, wall time and the validation curve. Each run overwrites its own
results.json and writes nothing else outside the graph cache.

Variants: baseline → the model's glomo='none'; embeddings / rnn → graphs
fused into the embeddings / the first RNN's states; uniform → the
uniform-graph ablation (no predictor).
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Mapping

import ml_collections
from ml_collections import config_dict

VARIANTS = {"baseline": "none", "embeddings": "embeddings", "rnn": "rnn",
            "uniform": "uniform"}
EVAL_SPLITS = {"imdb": ("test",), "snli": ("test",), "mnli": ("matched", "mismatched"),
               "agreement": ("test",)}
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}


def _opt(kind, value=None):
  """A field that may be None, overridable with a `kind` value."""
  ref = config_dict.placeholder(kind)
  if value is not None:
    ref.set(value)
  return ref


def tiny_preset(config: ml_collections.ConfigDict, max_words: int) -> None:
  """Shrinks a transfer config in place to a seconds-long smoke run."""
  config.max_words = max_words
  config.max_train_examples, config.max_eval_examples = 64, 32
  config.vocab.max_size = 2000
  config.model.embed_dim, config.model.hidden = 16, 16
  config.optim.batch_size, config.optim.steps, config.optim.eval_every = 8, 6, 3
  config.optim.patience = None
  config.compile_fast = True


def transfer_config(task: str, *, max_words: int, model: Mapping[str, Any],
                    optim: Mapping[str, Any]) -> ml_collections.ConfigDict:
  """Every field of a transfer run (the configs fill in the task's values)."""
  model_fields = {"embed_dim": 100, "hidden": 128, "dropout_rate": 0.2,
                  "freeze_embeddings": False, "oov_scale": 0.1,
                  "transfer_layers": _opt(int), "num_mixtures": 2, "conditioned": True,
                  "transfer_features": _opt(int)}
  for key, value in model.items():
    model_fields[key] = _opt(int, None) if key == "rnn_layers" and value is None else value
  optim_fields = {"learning_rate": 1e-3, "clip_norm": _opt(float), "batch_size": 32,
                  "eval_batch_size": _opt(int), "epochs": _opt(float), "steps": _opt(int),
                  "eval_every": _opt(int), "patience": _opt(int)}
  for key, value in optim.items():
    field = optim_fields.get(key)
    if isinstance(field, config_dict.FieldReference):
      field.set(value)
    else:
      optim_fields[key] = value
  return ml_collections.ConfigDict({
      "task": task,                      # 'imdb' | 'mnli' | 'snli' | 'agreement'
      "source": "files",                 # 'files' (JSON lines) | 'tfds' | 'synthetic'
      # JSON-lines paths (source='files'); 'train' is required, 'validation'
      # replaces the carved split, the others are evaluation splits.
      "files": {name: _opt(str) for name in ("train", "validation", "test", "matched",
                                               "mismatched")},
      "tfds": {"data_dir": _opt(str), "validation": _opt(str), "reader": "auto",
               "download": False},
      # source='synthetic' (task 'agreement', glomo_jax.tasks.agreement):
      # sentences of the built-in language after the pretraining corpus
      # `synthetic` (its num_documents and seed), split sizes below.
      "synthetic": {"num_documents": 2000, "seed": 0, "train": 2000, "validation": 500,
                    "test": 1000},
      "val_fraction": 0.1,               # of train, when no validation split is given
      "data_seed": 0,                    # validation carve and subsets (not `seed`)
      "max_train_examples": _opt(int),
      "max_eval_examples": _opt(int),
      "vocab": {"min_count": 1, "max_size": _opt(int)},
      "glove_path": _opt(str),           # None: random embeddings
      "max_words": _opt(int, max_words),  # cut every text (and graph) to this many words
      "length_multiple": 8,
      "bucket_batches": 0,
      "model": model_fields,
      "variant": "baseline",             # 'baseline' | 'embeddings' | 'rnn' | 'uniform'
      "predictor_export": _opt(str),     # required for 'embeddings' / 'rnn'
      "graph_source": "disk",            # 'disk' (cache) | 'memory' | 'fly'
      "graph_cache_dir": _opt(str),      # default <workdir>/graph_cache
      "graph_cache_dtype": "float16",
      "graph_batch_size": 32,            # predictor batch while building the cache
      "graph_memory_bytes": 1 << 30,     # bound of graph_source='memory'
      "optim": optim_fields,
      "seed": 0,                         # init, dropout and shuffling
      "compile_fast": False,             # cheap XLA compiles (CPU smoke runs)
  })


def _check(config) -> None:
  if config.task not in EVAL_SPLITS:
    raise ValueError(f"unknown task {config.task!r}: one of {sorted(EVAL_SPLITS)}")
  if config.variant not in VARIANTS:
    raise ValueError(f"unknown variant {config.variant!r}: one of {list(VARIANTS)}")
  if config.source not in ("files", "tfds", "synthetic"):
    raise ValueError(f"unknown source {config.source!r}: 'files', 'tfds' or 'synthetic'")
  if (config.task == "agreement") != (config.source == "synthetic"):
    raise ValueError("task 'agreement' reads source='synthetic' (the built-in language), "
                     f"and only it does: got task {config.task!r}, source {config.source!r}")
  if config.source == "files":
    if not config.files.train:
      raise ValueError("source='files' needs --config.files.train=PATH (JSON lines, e.g. "
                       "../shared/data/imdb/imdb_train.jsonl.gz)")
    wrong = [n for n, p in config.files.items()
             if p and n not in ("train", "validation") + EVAL_SPLITS[config.task]]
    if wrong:
      raise ValueError(f"task {config.task!r} has no split {wrong}; its evaluation "
                       f"splits are {list(EVAL_SPLITS[config.task])}")
  if VARIANTS[config.variant] in ("embeddings", "rnn"):
    if not config.predictor_export:
      raise ValueError(f"variant {config.variant!r} needs --config.predictor_export=DIR "
                       "(an export of experiments.pretrain / experiments.export)")
    if config.graph_source not in ("disk", "memory", "fly"):
      raise ValueError(f"unknown graph_source {config.graph_source!r}: "
                       "'disk', 'memory' or 'fly'")
    if config.graph_source == "disk" and not config.max_words:
      raise ValueError("the on-disk graph cache needs max_words")


def _say(line: str) -> None:
  from absl import logging  # noqa: PLC0415
  logging.info("%s", line)


def run(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
  """One transfer run; returns (and writes) the results.json dict."""
  _check(config)
  start = time.time()
  from glomo_jax import tasks  # noqa: PLC0415

  os.makedirs(workdir, exist_ok=True)
  task, glomo = config.task, VARIANTS[config.variant]
  if config.source == "synthetic":
    from glomo_jax.data import SyntheticConfig  # noqa: PLC0415
    syn = config.synthetic
    data = tasks.load_agreement_task(
        syn.train, syn.validation, syn.test, seed=config.data_seed,
        synthetic=SyntheticConfig(num_documents=syn.num_documents, seed=syn.seed))
  elif config.source == "files":
    files = {n: p for n, p in config.files.items() if p}
    data = tasks.load_task(task, "files", files=files, val_fraction=config.val_fraction,
                           seed=config.data_seed,
                           max_train_examples=config.max_train_examples,
                           max_eval_examples=config.max_eval_examples)
  else:
    data = tasks.load_task(task, "tfds", validation=config.tfds.validation,
                           val_fraction=config.val_fraction, seed=config.data_seed,
                           max_train_examples=config.max_train_examples,
                           max_eval_examples=config.max_eval_examples,
                           data_dir=config.tfds.data_dir, tfds_reader=config.tfds.reader,
                           download=config.tfds.download)
  _say(f"{task}: {data.summary()}")
  vocab = data.build_vocabulary(min_count=config.vocab.min_count,
                                max_size=config.vocab.max_size)
  m = config.model
  table, coverage = tasks.embedding_matrix(
      vocab, config.glove_path, dim=m.embed_dim, oov_scale=m.oov_scale,
      seed=config.data_seed)
  _say(f"vocabulary {len(vocab)} words; {coverage}")

  predictor = graph_fn = None
  if glomo in ("embeddings", "rnn"):
    from glomo_jax.export import load_graph_predictor  # noqa: PLC0415
    predictor = load_graph_predictor(config.predictor_export)
    _say(f"predictor {config.predictor_export}: L={predictor.config.num_graph_layers} "
         f"K={predictor.config.num_heads}")
    if config.graph_source == "disk":
      root = config.graph_cache_dir or os.path.join(workdir, "graph_cache")
      t0 = time.time()
      graph_fn = tasks.precomputed_graphs(root, predictor, data, config.max_words,
                                          dtype=config.graph_cache_dtype,
                                          batch_size=config.graph_batch_size)
      _say(f"graph cache {root} ready ({time.time() - t0:.1f} s)")
    elif config.graph_source == "memory":
      graph_fn = tasks.GraphCache(tasks.predictor_graph_fn(predictor),
                                  max_bytes=config.graph_memory_bytes)
    else:
      graph_fn = tasks.predictor_graph_fn(predictor)

  transfer_layers = m.transfer_layers
  if predictor is not None:
    layers = predictor.config.num_graph_layers
    if transfer_layers is not None and transfer_layers != layers:
      raise ValueError(f"model.transfer_layers={transfer_layers} but the predictor has "
                       f"L={layers} graph layers")
    transfer_layers = layers
  common = dict(vocab_size=len(vocab), embed_dim=m.embed_dim, hidden=m.hidden,
                num_classes=data.num_classes, dropout_rate=m.dropout_rate,
                embedding_init=tasks.embedding_initializer(table),
                freeze_embeddings=m.freeze_embeddings, glomo=glomo,
                transfer_layers=transfer_layers or 3, num_mixtures=m.num_mixtures,
                conditioned=m.conditioned, transfer_features=m.transfer_features)
  if len(data.text_fields) == 1:          # imdb, agreement: one text
    model = tasks.IMDBClassifier(rnn_layers=m.get("rnn_layers"), **common)
  else:
    model = tasks.ESIM(self_attention=m.get("self_attention", True), **common)

  o = config.optim
  out = tasks.train_classifier(
      model, data, vocab, learning_rate=o.learning_rate, clip_norm=o.clip_norm or None,
      batch_size=o.batch_size, eval_batch_size=o.eval_batch_size,
      max_words=config.max_words, epochs=o.epochs, steps=o.steps,
      eval_every=o.eval_every, patience=o.patience, seed=config.seed,
      graph_fn=graph_fn, length_multiple=config.length_multiple,
      bucket_batches=config.bucket_batches,
      compiler_options=FAST_COMPILE if config.compile_fast else None)

  results = {"task": task, "variant": config.variant, "glomo": glomo,
             "seed": config.seed, "validation_accuracy": out["results"]["validation"]}
  missing = []
  for name in EVAL_SPLITS[task]:
    results[name] = out["results"].get(name)
    if results[name] is None:
      missing.append(name)
  if missing:
    carved = not (config.files.validation if config.source == "files"
                  else config.tfds.validation)
    results["note"] = (f"the data has no held-out {'/'.join(missing)} split (e.g. the "
                       "train-only local files): only validation accuracy is reported"
                       + (f" (validation: a {config.val_fraction:g} share carved from "
                          "train)" if carved else ""))
  results.update({
      "best_step": out["best_step"], "steps": out["steps"],
      "stopped_early": out["stopped_early"], "train_time_s": out["wall_time_s"],
      "wall_time_s": time.time() - start,
      "examples": {n: len(s) for n, s in data.splits.items()},
      "vocabulary": len(vocab), "glove": str(coverage),
      "predictor": predictor.directory if predictor is not None else None,
      "curves": out["curves"],
      "config": config.to_dict(),
  })
  path = os.path.join(workdir, "results.json")
  tmp = path + ".tmp"
  with open(tmp, "w", encoding="utf-8") as f:
    json.dump(results, f, indent=1, default=str)
    f.write("\n")
  os.replace(tmp, path)
  _say(f"wrote {path}")
  return results


def main(argv):
  del argv
  from absl import logging  # noqa: PLC0415
  from experiments.console import quiet_libraries  # noqa: PLC0415
  quiet_libraries()
  config, workdir = _FLAGS["config"].value, _FLAGS["workdir"].value
  results = run(config, workdir)
  logging.info("results: %s", json.dumps(
      {k: v for k, v in results.items() if k not in ("curves", "config")}, default=str))
  print(json.dumps({k: v for k, v in results.items() if k not in ("curves", "config")},
                   default=str, indent=1))


_FLAGS: dict[str, Any] = {}


def _define_flags() -> None:
  """Flags are defined only when run as a program, so tests (and the configs,
  which import `transfer_config`) can import this module next to other entry
  points without flag clashes."""
  from absl import flags  # noqa: PLC0415
  from ml_collections import config_flags  # noqa: PLC0415
  _FLAGS["config"] = config_flags.DEFINE_config_file(
      "config", None, "Transfer config file (experiments/configs/imdb.py, mnli.py).",
      lock_config=True)
  _FLAGS["workdir"] = flags.DEFINE_string("workdir", None,
                                          "Directory for results.json and the graph cache.")
  flags.mark_flags_as_required(["config", "workdir"])


if __name__ == "__main__":
  from absl import app  # noqa: PLC0415
  _define_flags()
  app.run(main)
