"""`SquadConfig`: every field of a SQuAD v1.1 run, as dataclasses.

Experiments build it from a ConfigDict (experiments/configs/squad.py, whose
defaults are document-qa's published SQuAD settings); `check()` reports a
config that cannot run before any work is done.
"""
from __future__ import annotations

import dataclasses

from glomo_jax.downstream.config import DownstreamConfig
from glomo_jax.downstream.options import TfdsOptions
from glomo_jax.focused.config import GateObjective
from glomo_jax.focused.model import DECISIONS
from glomo_jax.text.fields import TextFields
from glomo_jax.transfer.options import TRANSFER_MOVED_FIELDS, TransferOptions

SOURCES = ("files", "tfds")
PASSAGE_ENCODERS = ("bigru", "focused")
PASSAGE_KINDS = ("fhe", "lstm2")          # the focused passage encoder's kinds


@dataclasses.dataclass(frozen=True)
class SquadFiles:
  """source='files': official-layout JSON (plain, .gz, .xz). 'train' is
  required; 'dev' is the evaluation split (the official dev set)."""
  train: str | None = None
  dev: str | None = None


@dataclasses.dataclass(frozen=True)
class FocusedPassageOptions:
  """The focused passage encoder (`ReaderOptions.passage_encoder`
  'focused'; docs/focused.md, "SQuAD"): Ke et al.'s encoder
  (`glomo_jax.focused.model.FocusedEncoder`, its LSTMs `hidden` wide)
  reading the passage conditioned on the question.

  Attributes:
    kind: 'fhe' (the focused encoder, its gate learnt) or 'lstm2' (the same
      two LSTMs with every word opening the upper one: the control without
      a gate, on the same code; no REINFORCE).
    gate_hidden: the boundary gate's hidden width (W_b).
    test_gate: the gate at evaluation: 'sample' (b_t ~ Bernoulli(p_t), as in
      training; keyed by the seed and the batch's first question) or
      'threshold' (b_t = 1[p_t >= 1/2]).
    gate: the gate's training terms (`GateObjective`: β, γ, β's warm-up in
      steps, the entropy weight); its reward is the answer span's
      log-likelihood log p(start) + log p(end) minus the sparsity cost.
  """
  kind: str = "fhe"
  gate_hidden: int = 32
  test_gate: str = "sample"
  gate: GateObjective = GateObjective()

  def check(self, where: str = "model.focused") -> None:
    """Raises ValueError for a setting that cannot run."""
    if self.kind not in PASSAGE_KINDS:
      raise ValueError(f"unknown {where}.kind {self.kind!r}: one of {list(PASSAGE_KINDS)}")
    if self.test_gate not in DECISIONS:
      raise ValueError(f"unknown {where}.test_gate {self.test_gate!r}: one of "
                       f"{list(DECISIONS)}")
    if self.gate_hidden < 1:
      raise ValueError(f"{where}.gate_hidden must be >= 1, got {self.gate_hidden}")
    self.gate.check(f"{where}.gate")
    if self.gate.samples != 1:
      raise ValueError(f"{where}.gate.samples: the SQuAD reader draws one gate sample per "
                       f"question (1), got {self.gate.samples}")


@dataclasses.dataclass(frozen=True)
class ReaderOptions:
  """`glomo_jax.squad.model.SquadReader`'s sizes (defaults: document-qa):
  embed_dim (the word table's E); oov_scale, glove_scale (the table's
  random rows and GloVe rows); char_dim, char_filters, char_width (the
  CharCNN); hidden (GRU width per direction), dense (the ReLU layers'
  width), dropout_rate (variational dropout); transfer: the graph
  transfer's options (its num_layers: None = the predictor's L, 3 for
  'uniform'); passage_encoder: the passage's first layer, 'bigru'
  (document-qa's BiGRU, shared with the question) or 'focused' (the
  focused hierarchical encoder conditioned on the question, whose lower
  and upper LSTM states replace the BiGRU's; the question keeps the
  BiGRU); focused: its options (`FocusedPassageOptions`)."""
  embed_dim: int = 100
  oov_scale: float = 0.1
  glove_scale: float = 1.0
  char_dim: int = 20
  char_filters: int = 100
  char_width: int = 5
  hidden: int = 100
  dense: int = 200
  dropout_rate: float = 0.2
  transfer: TransferOptions = TransferOptions()
  passage_encoder: str = "bigru"
  focused: FocusedPassageOptions = FocusedPassageOptions()
  MOVED_FIELDS = TRANSFER_MOVED_FIELDS

  @property
  def is_focused(self) -> bool:
    """The passage encoder is the focused one (its gate is trained by
    REINFORCE, its batches carry their step)."""
    return self.passage_encoder == "focused"

  def check(self, where: str = "model") -> None:
    """Raises ValueError for a setting that cannot run."""
    self.transfer.check(f"{where}.transfer")
    if self.passage_encoder not in PASSAGE_ENCODERS:
      raise ValueError(f"unknown {where}.passage_encoder {self.passage_encoder!r}: one of "
                       f"{list(PASSAGE_ENCODERS)}")
    self.focused.check(f"{where}.focused")


@dataclasses.dataclass(frozen=True)
class SquadConfig(TextFields, DownstreamConfig):
  """One SQuAD run: data, word vectors, graph source, reader, training;
  `DownstreamConfig`'s fields (variant, predictor_export, optim, loop,
  seed, data_seed) and the text fields every text kind
  shares (`text.fields.TextFields`; here length_multiple defaults to 16 and
  graph_batch_size to 8).

  Attributes:
    source: 'files' or 'tfds' (`squad/v1.1`: train / validation as dev).
    files, tfds: each source's settings.
    val_questions: validation (model selection) carved from train by whole
      articles until it holds this many questions.
    max_train_questions: whole training paragraphs (seeded) up to this many
      questions (None: all). max_dev_questions: the same for dev.
    glove_path: GloVe text file (None: random word vectors); the table is fixed.
    min_count: training words seen fewer times map to <unk> (words of any
      split that GloVe has are always in the vocabulary).
    char_min_count: characters seen fewer times in training map to <unk>.
    max_word_chars: characters per word read by the CharCNN (document-qa 14).
    max_context_words: passages are cut to this many words (None: never);
      questions answered beyond it are left out of training, and every cut
      is counted in results.json. max_question_words likewise.
    max_span: most words in a predicted answer (document-qa 17).
    model: the reader's fields (`ReaderOptions`), among them the passage
      encoder: `model.passage_encoder` 'bigru' (document-qa's) or 'focused'
      (Ke et al.'s focused hierarchical encoder conditioned on the question,
      its gate trained by REINFORCE with the span log-likelihood as reward;
      options `model.focused`, docs/focused.md); every variant composes
      with either ('rnn' transfers the focused encoder's states).
    graph_cache_dir, graph_cache_dtype, graph_batch_size, graph_self_loops,
      graph_text: the graph source (`TextFields`); graphs are computed per
      paragraph and per question, by default from the passage and question
      texts as written ('raw'; 'words': the lower-cased words joined by
      spaces). graphs_on_the_fly: no disk cache; each batch's graphs are
      computed by the predictor (each of its paragraphs once).
  """
  source: str = "files"
  files: SquadFiles = SquadFiles()
  tfds: TfdsOptions = TfdsOptions()
  val_questions: int = 1000
  max_train_questions: int | None = None
  max_dev_questions: int | None = None
  min_count: int = 1
  char_min_count: int = 1
  max_word_chars: int = 14
  max_context_words: int | None = None
  max_question_words: int | None = None
  length_multiple: int = 16                # TextFields' field, another default
  max_span: int = 17
  model: ReaderOptions = ReaderOptions()
  graph_batch_size: int = 8                # TextFields' field, another default
  graphs_on_the_fly: bool = False

  def check(self) -> None:
    """Raises ValueError naming what cannot work, and how to fix it."""
    super().check()
    if self.source not in SOURCES:
      raise ValueError(f"unknown source {self.source!r}: one of {list(SOURCES)}")
    self.model.check("model")
    if self.source == "files" and not self.files.train:
      raise ValueError("source='files' needs --config.files.train=PATH (SQuAD JSON, e.g. "
                       "../shared/data/squad_v1.1/squad_train-v1.1_rebuilt.json.xz)")
    self.check_predictor()
    self.check_text()
    for name in ("max_span", "max_word_chars"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
    if self.val_questions < 1:
      raise ValueError(f"val_questions must be >= 1 (validation selects the best "
                       f"variables), got {self.val_questions}")
    for name in ("max_context_words", "max_question_words", "max_train_questions",
                 "max_dev_questions"):
      if getattr(self, name) is not None and getattr(self, name) < 1:
        raise ValueError(f"{name} must be >= 1 or None, got {getattr(self, name)}")
