"""`TransferConfig`: every field of a downstream transfer run, as dataclasses.

Experiments build it from a ConfigDict (`TransferConfig.from_dict(config.
to_dict())`); unknown keys are errors. `check()` reports a config that
cannot run (missing data path, a graph variant without a predictor, ...)
before any work is done.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping

import optax

from glomo_jax.config import DictConfig
from glomo_jax.io import write_json
from glomo_jax.transfer.layer import APPLY_AS

# Variant → the task model's `glomo` field.
VARIANTS = {"baseline": "none", "embeddings": "embeddings", "rnn": "rnn",
            "uniform": "uniform"}
GRAPH_VARIANTS = ("embeddings", "rnn")
# Each task's evaluation splits (reported as results, besides validation).
EVAL_SPLITS = {"imdb": ("test",), "snli": ("test",), "mnli": ("matched", "mismatched"),
               "agreement": ("test",)}
SOURCES = ("files", "tfds", "synthetic")
GRAPH_SOURCES = ("predictor", "arcs")
# Fields a resumed run may change (how long it trains and how often it
# reports or saves); any other change would mix two configs' results.
CONFIG_FILE = "config.json"    # the run's config, in its workdir
RESUMABLE_CHANGES = ("optim.steps", "optim.epochs", "optim.log_every",
                     "optim.checkpoint_every", "graph_cache_dir",
                     "model.graph_apply",                 # the same math, another order
                     "num_steps", "log_every", "checkpoint_every")   # the last: image pretraining


def changed_fields(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
  """Dotted names of the fields whose values differ between two config dicts.
  A field only `new` has is a field added to the code since `old` was
  written; its default keeps the old behaviour, so it is not a change."""
  out = []
  for key in sorted(set(old) | set(new)):
    if key not in old:
      continue
    a, b = old.get(key), new.get(key)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
      out += changed_fields(a, b, f"{prefix}{key}.")
    elif a != b:
      out.append(f"{prefix}{key}")
  return out


def record_run_config(ctx, config: Mapping[str, Any]) -> None:
  """Writes a run's config dict to <workdir>/config.json; a resumed run
  (ctx.state.step > 0) must have the same one up to `RESUMABLE_CHANGES`.
  ctx: the training loop's RunContext (in a task's on_start)."""
  path = os.path.join(ctx.workdir, CONFIG_FILE)
  now = json.loads(json.dumps(config))
  resumable = RESUMABLE_CHANGES
  if (now.get("optim") or {}).get("schedule") == "cosine":   # the length is the schedule's
    resumable = tuple(k for k in resumable if k not in ("optim.steps", "optim.epochs"))
  if int(ctx.state.step) > 0 and os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      changed = [k for k in changed_fields(json.load(f), now) if k not in resumable]
    if changed:
      raise ValueError(f"{ctx.workdir} holds a run of another config (changed: "
                       f"{', '.join(changed)}); rerun with its settings ({path}) or use a "
                       "new --workdir")
  if ctx.is_main:
    write_json(path, now)


@dataclasses.dataclass(frozen=True)
class TaskFiles:
  """JSON-lines paths (source='files'): 'train' is required, 'validation'
  replaces the carved split, the others are evaluation splits."""
  train: str | None = None
  validation: str | None = None
  test: str | None = None
  matched: str | None = None
  mismatched: str | None = None


@dataclasses.dataclass(frozen=True)
class TfdsOptions:
  """source='tfds': data directory, a TFDS split to use as validation instead
  of carving one, the reader ('auto', 'data_source', 'tf'), download."""
  data_dir: str | None = None
  validation: str | None = None
  reader: str = "auto"
  download: bool = False


@dataclasses.dataclass(frozen=True)
class AgreementData:
  """source='synthetic' (task 'agreement'): sentences of the built-in language
  after the pretraining corpus `num_documents` / `seed`; split sizes."""
  num_documents: int = 2000
  seed: int = 0
  train: int = 2000
  validation: int = 500
  test: int = 1000


@dataclasses.dataclass(frozen=True)
class VocabOptions:
  min_count: int = 1
  max_size: int | None = None


@dataclasses.dataclass(frozen=True)
class ClassifierOptions:
  """The task model's fields (`IMDBClassifier` for one text, `ESIM` for two).

  transfer_layers: None = the predictor's L (3 for 'uniform'); rnn_layers:
  stacked BiGRUs of IMDBClassifier, input-encoding BiLSTMs of ESIM (None: 1,
  or 2 for the 'rnn' variant; 2 with 'baseline' is that variant's baseline of
  the same depth); self_attention: ESIM only; oov_scale, glove_scale: the
  random rows' std and the GloVe rows' factor (`tasks.glove.embedding_matrix`);
  graph_apply: `GraphTransfer.apply_as` ('auto', 'candidates' or 'mixtures').
  """
  embed_dim: int = 100
  hidden: int = 128
  dropout_rate: float = 0.2
  freeze_embeddings: bool = False
  oov_scale: float = 0.1
  glove_scale: float = 1.0
  rnn_layers: int | None = None
  self_attention: bool = True
  transfer_layers: int | None = None
  num_mixtures: int = 2
  conditioned: bool = True
  transfer_features: int | None = None
  graph_apply: str = "auto"


@dataclasses.dataclass(frozen=True)
class OptimOptions:
  """`optimizer` ('adam'; 'adadelta' as document-qa's SQuAD model; 'sgd' with
  `momentum`, Nesterov, as CIFAR ResNets) at `learning_rate`, constant or
  decayed to 0 by a cosine over the run (`schedule` 'cosine'), with L2
  `weight_decay` added to the gradients and global-norm clipping (clip_norm
  None: none); training length
  `steps`, else `epochs` (default 1); `eval_every` steps between validation
  evaluations (default one epoch); early stopping after `patience`
  evaluations without a better validation accuracy (None: never);
  `log_every` steps between progress lines; `checkpoint_every` steps between
  checkpoints (default: every evaluation)."""
  optimizer: str = "adam"
  learning_rate: float = 1e-3
  clip_norm: float | None = None
  batch_size: int = 32
  eval_batch_size: int | None = None
  epochs: float | None = None
  steps: int | None = None
  eval_every: int | None = None
  patience: int | None = None
  log_every: int = 100
  checkpoint_every: int | None = None
  momentum: float = 0.9
  weight_decay: float = 0.0
  schedule: str = "constant"


OPTIMIZERS = {  # name -> (learning rate or schedule, OptimOptions) -> transformation
    "adam": lambda lr, o: optax.adam(lr),
    "adadelta": lambda lr, o: optax.adadelta(lr),
    "sgd": lambda lr, o: optax.sgd(lr, o.momentum or None, nesterov=True)}
SCHEDULES = ("constant", "cosine")


def make_optimizer(o: OptimOptions, num_steps: int | None = None
                   ) -> optax.GradientTransformation:
  """The optimiser of `o`: clipping (if any), L2 weight decay (if any), then
  Adam, Adadelta or SGD; a 'cosine' schedule needs the run's `num_steps`."""
  check_optim(o)
  lr = o.learning_rate
  if o.schedule == "cosine":
    if not num_steps:
      raise ValueError("the cosine schedule needs the run's number of steps")
    lr = optax.cosine_decay_schedule(o.learning_rate, num_steps)
  clip = [optax.clip_by_global_norm(o.clip_norm)] if o.clip_norm else []
  decay = [optax.add_decayed_weights(o.weight_decay)] if o.weight_decay else []
  return optax.chain(*clip, *decay, OPTIMIZERS[o.optimizer](lr, o))


def transfer_layers(configured: int | None, predictor_layers: int | None) -> int:
  """The task model's L: the predictor's when there is one (a configured
  value must agree with it), else the configured one, else 3."""
  if predictor_layers is not None:
    if configured is not None and configured != predictor_layers:
      raise ValueError(f"model.transfer_layers={configured} but the predictor has "
                       f"L={predictor_layers} graph layers")
    return predictor_layers
  return configured or 3


def loop_values(o: OptimOptions, batches_per_epoch: int, select_metric: str) -> dict:
  """LoopConfig fields of a downstream run from its optimiser options:
  length (`steps`, else `epochs` of `batches_per_epoch`, default 1),
  evaluations (default once an epoch), checkpoints (default at each
  evaluation), best-variable selection by `select_metric` (max) and patience."""
  steps = o.steps if o.steps is not None else max(
      1, int(round((o.epochs if o.epochs is not None else 1) * batches_per_epoch)))
  eval_every = o.eval_every or batches_per_epoch
  return dict(num_steps=steps, log_every=o.log_every, eval_every=eval_every,
              checkpoint_every=o.checkpoint_every or eval_every, keep_checkpoints=2,
              select_metric=select_metric, select_mode="max", patience=o.patience,
              keep_best=True)


def check_graph_apply(value: str) -> None:
  """Raises ValueError unless `value` is a `GraphTransfer.apply_as`."""
  if value not in APPLY_AS:
    raise ValueError(f"unknown model.graph_apply {value!r}: one of {list(APPLY_AS)} "
                     "('auto' picks the cheaper for the shapes)")


def check_optim(o: OptimOptions) -> None:
  """Raises ValueError for an optimiser setting that cannot run."""
  if o.optimizer not in OPTIMIZERS:
    raise ValueError(f"unknown optim.optimizer {o.optimizer!r}: one of {sorted(OPTIMIZERS)}")
  if o.schedule not in SCHEDULES:
    raise ValueError(f"unknown optim.schedule {o.schedule!r}: one of {list(SCHEDULES)}")
  for name in ("batch_size", "log_every"):
    if getattr(o, name) < 1:
      raise ValueError(f"optim.{name} must be >= 1, got {getattr(o, name)}")


@dataclasses.dataclass(frozen=True)
class TransferConfig(DictConfig):
  """One transfer run: task data, word vectors, graph source, model, training.

  Attributes:
    task: 'imdb', 'mnli', 'snli' or 'agreement'.
    source: 'files' (JSON lines), 'tfds' or 'synthetic' (task 'agreement').
    files, tfds, synthetic: each source's settings.
    val_fraction: of train, carved as validation when none is given.
    data_seed: validation carve, subsets and random word vectors.
    max_train_examples, max_eval_examples: seeded random subsets.
    vocab: vocabulary of the training split.
    glove_path: GloVe text file (None: random word vectors).
    max_words: cut every text (and graph) to this many words.
    length_multiple: padded lengths are rounded up to a multiple of this.
    bucket_batches: length bucketing window (`batches.batch_order`).
    model: the task model's fields.
    variant: 'baseline', 'embeddings', 'rnn' or 'uniform'.
    predictor_export: a `glomo_jax.export` directory ('embeddings' / 'rnn').
    graph_cache_dir: where the word-graph caches go (None: <workdir>/graph_cache).
    graph_cache_dtype: 'float16' or 'float32', or with graph_cache_topk
      'uint8' (each row's weights as 8-bit levels). graph_cache_topk: None
      stores the graphs dense; k keeps each row's k largest sources (exact
      where k covers the row's nonzeros; `glomo_jax.transfer.cache`). graph_batch_size: predictor
      batch while building the cache. graph_self_loops: keep the weight
      between pieces of one word on the word graphs' diagonal (default: no
      diagonal, as the authors' word graphs; `transfer.align_graphs`).
    graph_source: 'predictor' (the export's graphs) or 'arcs': the known
      dependency arcs as graphs (`tasks.graphs.ArcGraphs`; the agreement
      task only), what a perfect predictor would give; L from
      model.transfer_layers (default 3), one head.
    graph_text: what the predictor reads: 'raw', each text as written (its
      pieces go to the task's words by characters), or 'words', the task's
      lower-cased, PTB-split words joined by spaces.
    optim: optimiser and training length.
    seed: initialisation, dropout and shuffling.
    mesh_data: data-parallel devices (-1: all).
    compile_fast: cheap XLA compiles (CPU smoke runs).
  """
  task: str = "imdb"
  source: str = "files"
  files: TaskFiles = TaskFiles()
  tfds: TfdsOptions = TfdsOptions()
  synthetic: AgreementData = AgreementData()
  val_fraction: float = 0.1
  data_seed: int = 0
  max_train_examples: int | None = None
  max_eval_examples: int | None = None
  vocab: VocabOptions = VocabOptions()
  glove_path: str | None = None
  max_words: int | None = None
  length_multiple: int = 8
  bucket_batches: int = 0
  model: ClassifierOptions = ClassifierOptions()
  variant: str = "baseline"
  predictor_export: str | None = None
  graph_cache_dir: str | None = None
  graph_cache_dtype: str = "float16"
  graph_cache_topk: int | None = None
  graph_batch_size: int = 32
  graph_self_loops: bool = False
  graph_source: str = "predictor"
  graph_text: str = "raw"
  optim: OptimOptions = OptimOptions()
  seed: int = 0
  mesh_data: int = -1
  compile_fast: bool = False

  @property
  def glomo(self) -> str:
    """The task model's `glomo` field for this variant."""
    return VARIANTS[self.variant]

  @property
  def reads_graphs(self) -> bool:
    return self.variant in GRAPH_VARIANTS

  def check(self) -> None:
    """Raises ValueError naming what cannot work, and how to fix it."""
    if self.task not in EVAL_SPLITS:
      raise ValueError(f"unknown task {self.task!r}: one of {sorted(EVAL_SPLITS)}")
    if self.variant not in VARIANTS:
      raise ValueError(f"unknown variant {self.variant!r}: one of {list(VARIANTS)}")
    if self.source not in SOURCES:
      raise ValueError(f"unknown source {self.source!r}: one of {list(SOURCES)}")
    check_graph_apply(self.model.graph_apply)
    if (self.task == "agreement") != (self.source == "synthetic"):
      raise ValueError("task 'agreement' reads source='synthetic' (the built-in language), "
                       f"and only it does: got task {self.task!r}, source {self.source!r}")
    if self.source == "files":
      if not self.files.train:
        raise ValueError("source='files' needs --config.files.train=PATH (JSON lines, e.g. "
                         "../shared/data/imdb/imdb_train.jsonl.gz)")
      wrong = [n for n, p in dataclasses.asdict(self.files).items()
               if p and n not in ("train", "validation") + EVAL_SPLITS[self.task]]
      if wrong:
        raise ValueError(f"task {self.task!r} has no split {wrong}; its evaluation "
                         f"splits are {list(EVAL_SPLITS[self.task])}")
    if self.graph_source not in GRAPH_SOURCES:
      raise ValueError(f"unknown graph_source {self.graph_source!r}: one of "
                       f"{list(GRAPH_SOURCES)}")
    if self.graph_text not in ("raw", "words"):
      raise ValueError(f"unknown graph_text {self.graph_text!r}: 'raw' or 'words'")
    if self.graph_source == "arcs" and self.source != "synthetic":
      raise ValueError("graph_source='arcs' needs known arcs: only the agreement task "
                       "(source='synthetic') has them")
    if self.reads_graphs and self.graph_source == "predictor":
      if not self.predictor_export:
        raise ValueError(f"variant {self.variant!r} needs --config.predictor_export=DIR "
                         "(an export of experiments.pretrain / experiments.export)")
      if not self.max_words:
        raise ValueError(f"variant {self.variant!r} needs max_words (the graph cache "
                         "stores max_words × max_words graphs)")
    check_optim(self.optim)
