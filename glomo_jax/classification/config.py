"""`ClassificationConfig`: every field of a text classification run (IMDB, SST-2,
MNLI / SNLI, agreement), as dataclasses on `DownstreamConfig`.

Experiments build it from a ConfigDict (`ClassificationConfig.from_dict(config.
to_dict())`); unknown keys are errors. `check()` reports a config that
cannot run (missing data path, a graph variant without a predictor, ...)
before any work is done.
"""
from __future__ import annotations

import dataclasses

from glomo_jax.classification.verb_number import EVAL_SPLITS as VERB_NUMBER_SPLITS, ORACLE_ARCS
from glomo_jax.downstream.config import DownstreamConfig
from glomo_jax.downstream.options import TfdsOptions
from glomo_jax.text.fields import TextFields, VocabOptions
from glomo_jax.text.readers import TASKS
from glomo_jax.transfer.options import TRANSFER_MOVED_FIELDS, TransferOptions

# Each task's evaluation splits (reported as results, besides validation).
EVAL_SPLITS = {name: spec.eval_splits for name, spec in TASKS.items()}
EVAL_SPLITS["agreement"] = ("test",)
EVAL_SPLITS["verb_number"] = VERB_NUMBER_SPLITS
SOURCES = ("files", "tfds", "synthetic")
GRAPH_SOURCES = ("predictor", "arcs")


@dataclasses.dataclass(frozen=True)
class TaskFiles:
  """Data files (source='files'; JSON lines, or TSV for sst2): 'train' is
  required, 'validation' replaces the carved split, the others are
  evaluation splits ('gold': the verb-number task's gold-parsed set)."""
  train: str | None = None
  validation: str | None = None
  test: str | None = None
  matched: str | None = None
  mismatched: str | None = None
  gold: str | None = None


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
class ClassifierOptions:
  """The task model's fields (`TextClassifier` for one text, `ESIM` for two).

  rnn_layers: stacked BiGRUs of TextClassifier, input-encoding BiLSTMs of
  ESIM (None: 1, or 2 for the 'rnn' variant; 2 with 'baseline' is that
  variant's baseline of the same depth); self_attention: ESIM only;
  oov_scale, glove_scale: the random rows' std and the GloVe rows' factor
  (`text.glove.embedding_matrix`); transfer: the graph transfer's options
  (its num_layers: None = the predictor's L, 3 for 'uniform').
  """
  embed_dim: int = 100
  hidden: int = 128
  dropout_rate: float = 0.2
  freeze_embeddings: bool = False
  oov_scale: float = 0.1
  glove_scale: float = 1.0
  rnn_layers: int | None = None
  self_attention: bool = True
  transfer: TransferOptions = TransferOptions()
  MOVED_FIELDS = TRANSFER_MOVED_FIELDS


@dataclasses.dataclass(frozen=True)
class ClassificationConfig(TextFields, DownstreamConfig):
  """One text classification run: task data, word vectors, graph source,
  model, training; `DownstreamConfig`'s fields (variant, predictor_export,
  optim, loop, seed, data_seed) and the text fields every
  text kind shares (`text.fields.TextFields`: glove_path, length_multiple,
  bucket_batches, graph_cache_dir, graph_cache_dtype, graph_batch_size,
  graph_self_loops, graph_text).

  Attributes:
    task: 'imdb', 'sst2', 'mnli', 'snli', 'agreement' or 'verb_number'
      (`classification.verb_number`: JSON lines; splits train, test, gold).
    source: 'files' (JSON lines; TSV for sst2), 'tfds' or 'synthetic' (task
      'agreement').
    files, tfds, synthetic: each source's settings.
    val_fraction: of train, carved as validation when none is given.
    test_fraction: of train (after the validation carve), carved as the
      task's first evaluation split ('test'; MNLI 'matched': the local
      train-only files' genres) where the data has none; 0: none carved.
    max_train_examples, max_eval_examples: seeded random subsets.
    vocab: vocabulary of the training split (`text.fields.VocabOptions`).
    max_words: cut every text (and graph) to this many words.
    model: the task model's fields.
    graph_cache_topk: None stores the graphs dense; k keeps each row's k
      largest sources (exact where k covers the row's nonzeros;
      `glomo_jax.graphs.cache`), and graph_cache_dtype may be 'uint8'.
    graph_source: 'predictor' (the export's graphs) or 'arcs': the known
      dependency arcs as graphs (`graphs.task_graphs.ArcGraphs`; the agreement
      and verb_number tasks), what a perfect predictor would give; L from
      model.transfer.num_layers (default 3), one head.
    oracle_arcs: verb_number's arcs with graph_source='arcs': 'subject' (the
      row before the verb → the gold subject) or 'tree' (the gold tree).
    lowercase: verb_number: the classifier reads the words lower-cased (the
      predictor always reads them as written).
  """
  task: str = "imdb"
  source: str = "files"
  files: TaskFiles = TaskFiles()
  tfds: TfdsOptions = TfdsOptions()
  synthetic: AgreementData = AgreementData()
  val_fraction: float = 0.1
  test_fraction: float = 0.0
  max_train_examples: int | None = None
  max_eval_examples: int | None = None
  vocab: VocabOptions = VocabOptions()
  max_words: int | None = None
  model: ClassifierOptions = ClassifierOptions()
  graph_cache_topk: int | None = None
  graph_source: str = "predictor"
  oracle_arcs: str = "subject"
  lowercase: bool = True

  def check(self) -> None:
    """Raises ValueError naming what cannot work, and how to fix it."""
    if self.task not in EVAL_SPLITS:
      raise ValueError(f"unknown task {self.task!r}: one of {sorted(EVAL_SPLITS)}")
    super().check()
    if self.source not in SOURCES:
      raise ValueError(f"unknown source {self.source!r}: one of {list(SOURCES)}")
    self.model.transfer.check("model.transfer")
    if (self.task == "agreement") != (self.source == "synthetic"):
      raise ValueError("task 'agreement' reads source='synthetic' (the built-in language), "
                       f"and only it does: got task {self.task!r}, source {self.source!r}")
    if self.source == "files":
      if not self.files.train:
        raise ValueError("source='files' needs --config.files.train=PATH (JSON lines, e.g. "
                         "../shared/data/imdb/imdb_train.jsonl.gz; sst2: the TSV, "
                         "../shared/data/sst2/sst2_train.tsv.gz)")
      wrong = [n for n, p in dataclasses.asdict(self.files).items()
               if p and n not in ("train", "validation") + EVAL_SPLITS[self.task]]
      if wrong:
        raise ValueError(f"task {self.task!r} has no split {wrong}; its evaluation "
                         f"splits are {list(EVAL_SPLITS[self.task])}")
    if self.test_fraction:
      split = EVAL_SPLITS[self.task][0]
      if self.source != "files" or getattr(self.files, split):
        raise ValueError(f"test_fraction carves the {split!r} split from train files that "
                         f"have none: not with source={self.source!r}"
                         + (f" and files.{split}" if self.source == "files" else "")
                         + " (--config.test_fraction=0 reads the given split)")
      if not 0.0 < self.test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {self.test_fraction}")
    if self.graph_source not in GRAPH_SOURCES:
      raise ValueError(f"unknown graph_source {self.graph_source!r}: one of "
                       f"{list(GRAPH_SOURCES)}")
    self.check_text()
    if self.graph_source == "arcs" and self.task not in ("agreement", "verb_number"):
      raise ValueError("graph_source='arcs' needs known arcs: only the agreement task "
                       "(source='synthetic') and verb_number (gold parses) have them")
    if self.oracle_arcs not in ORACLE_ARCS:
      raise ValueError(f"unknown oracle_arcs {self.oracle_arcs!r}: one of {list(ORACLE_ARCS)}")
    if self.task == "verb_number" and (self.source != "files" or self.test_fraction):
      raise ValueError("task 'verb_number' reads JSON-lines files (source='files'; "
                       "experiments.verb_number_data builds them) and carves no test split "
                       "(test_fraction=0; files.test is held-out text)")
    if self.reads_graphs and self.graph_source == "predictor":
      self.check_predictor()
      if not self.max_words:
        raise ValueError(f"variant {self.variant!r} needs max_words (the graph cache "
                         "stores max_words × max_words graphs)")
