"""`PretrainConfig`: everything a text pretraining run needs, as a plain
dataclass, on `TextPretrainConfigBase` (the corpus, tokenizer and windows,
which a control language model on the same tokens shares), itself on
`PretrainConfigBase`, what text and pixel pretraining
(`glomo_jax.pretraining.pixels.ImagePretrainConfig`) share.

Experiments build it from an ml_collections ConfigDict
(`PretrainConfig.from_dict(config.to_dict())`); the library itself never
imports ml_collections. Unknown keys are errors, so a typo in a config file
or an override fails before any work is done.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping

from glomo_jax.config import DictConfig, ModelConfig, from_dict
from glomo_jax.data.corpus import CorpusSpec
from glomo_jax.pretraining.fixed_graphs import SOURCES as GRAPH_SOURCES
from glomo_jax.train.config import LOOP_MOVED_FIELDS, LoopOptions
from glomo_jax.train.optimizer import make_optimizer

OPTIMIZERS = ("sgd", "adam")


@dataclasses.dataclass(frozen=True)
class PretrainConfigBase(DictConfig):
  """What text and pixel pretraining share: the optimiser (AdamW defaults,
  `glomo_jax.train.optimizer.make_optimizer`), the loop's settings
  (`LoopOptions`), evaluation, seed and export. Each subclass adds its model
  and data, and may change these defaults (text: the authors' SGD).

  Attributes:
    optimizer, learning_rate, momentum, clip_norm (global gradient norm; 0:
      none), weight_decay (adam only: AdamW).
    loop: the loop's settings (`LoopOptions`).
    eval_batches: held-out batches of each evaluation (0 = the whole split).
    seed: parameters, sampled positions, data order (and any seeded subset).
    export: write the frozen graph predictor to <workdir>/export at the end.
  """
  optimizer: str = "adam"
  learning_rate: float = 1e-3
  momentum: float = 0.0
  clip_norm: float = 1.0
  weight_decay: float = 0.0
  loop: LoopOptions = LoopOptions()
  MOVED_FIELDS = LOOP_MOVED_FIELDS
  eval_batches: int = 20
  seed: int = 0
  export: bool = True

  def _loop_from_mapping(self) -> None:
    """`loop` given as a mapping (a direct construction) becomes LoopOptions;
    pretraining counts steps (`LoopOptions.check_steps`)."""
    if isinstance(self.loop, Mapping):
      object.__setattr__(self, "loop", from_dict(LoopOptions, self.loop,
                                                 f"{type(self).__name__}.loop"))
    self.loop.check_steps()

  def build_optimizer(self):
    """The run's optimiser (`glomo_jax.train.optimizer.make_optimizer`)."""
    return make_optimizer(self.optimizer, self.learning_rate, momentum=self.momentum,
                          clip_norm=self.clip_norm, weight_decay=self.weight_decay,
                          always_chain=False)


@dataclasses.dataclass(frozen=True)
class TextPretrainConfigBase(PretrainConfigBase):
  """What every model trained on a text corpus's windows shares: the corpus,
  the tokenizer, the held-out split and the windows (GLoMo's
  `PretrainConfig`; a control language model on the same tokens builds on it
  too), the text optimisers (default: the authors' SGD) and the loop's
  held-out selection (`loop_fields`). Authors' values in brackets.

  Attributes:
    corpus: where the documents come from (`glomo_jax.data.CorpusSpec`).
    tokenizer_path: an existing SentencePiece model to use (e.g. another
      run's <workdir>/tokenizer.model: the same pieces); None trains one on
      a sample of the corpus (or, for the synthetic corpus, builds its
      one-piece-per-word model). Saved in the workdir either way.
    vocab_size: SentencePiece vocabulary to train (reserved ids included).
    tokenizer_model_type: 'unigram', 'bpe', 'word' or 'char'.
    tokenizer_sample_chars: characters of the corpus sample it is trained on.
    heldout_fraction: share of documents held out for evaluation.
    batch_size: global windows per step [32]. bptt: window length [200].
    shift: distance between window starts [100].
    optimizer: 'sgd' [authors] or 'adam'. learning_rate [8.0], momentum [0.2],
      clip_norm: global gradient norm [0.25]; weight_decay (adam only: AdamW).
    loop: the loop's settings (`LoopOptions`): num_steps and eval_every
      (set: pretraining counts steps, not epochs), log_every,
      checkpoint_every, keep_checkpoints, keep_best, the plateau rule
      (plateau_patience evaluations without a better held-out loss multiply
      the learning rate by plateau_factor [3, 0.5]; 0 disables), the mesh
      (mesh_data, mesh_fsdp; -1 = all remaining devices) and compile_fast
      (cheap XLA compiles: CPU smoke runs, the `tiny` presets).
    eval_batches: held-out batches of each evaluation (0 = the whole split).
    seed: parameters, sampled positions and data order.
  """
  corpus: CorpusSpec = CorpusSpec()
  tokenizer_path: str | None = None
  vocab_size: int = 8000
  tokenizer_model_type: str = "unigram"
  tokenizer_sample_chars: int = 5_000_000
  heldout_fraction: float = 0.02
  batch_size: int = 32
  bptt: int = 200
  shift: int = 100
  optimizer: str = "sgd"
  learning_rate: float = 8.0
  momentum: float = 0.2
  clip_norm: float = 0.25

  def __post_init__(self):
    if isinstance(self.corpus, Mapping):
      object.__setattr__(self, "corpus", CorpusSpec.from_dict(self.corpus))
    self._loop_from_mapping()
    if self.optimizer not in OPTIMIZERS:
      raise ValueError(f"optimizer {self.optimizer!r} is not one of {list(OPTIMIZERS)}")
    if self.weight_decay and self.optimizer != "adam":
      raise ValueError("weight_decay is AdamW's (optimizer 'adam'); optimizer "
                       f"{self.optimizer!r} takes none")
    for name in ("batch_size", "bptt", "shift", "vocab_size"):
      if getattr(self, name) < 1:
        raise ValueError(f"{type(self).__name__}.{name} must be >= 1, got "
                         f"{getattr(self, name)}")
    if not 0 <= self.heldout_fraction < 1:
      raise ValueError(f"heldout_fraction must be in [0, 1), got {self.heldout_fraction}")

  def to_dict(self) -> dict:
    d = dataclasses.asdict(self)
    d["corpus"] = self.corpus.to_dict()
    return d

  def loop_fields(self) -> dict:
    """What the run adds to `loop` in its LoopConfig (`LoopOptions.loop_config`):
    the seed; evaluation on the held-out split (if any) ranks steps by its
    loss and drives the plateau rule."""
    heldout = self.heldout_fraction > 0
    return {"seed": self.seed, "select_metric": "heldout/loss" if heldout else None,
            "select_mode": "min",
            "plateau_patience": self.loop.plateau_patience if heldout else 0}


@dataclasses.dataclass(frozen=True)
class PretrainConfig(TextPretrainConfigBase):
  """GLoMo's text pretraining settings: `TextPretrainConfigBase`'s corpus,
  tokenizer, windows, optimiser and loop, and the model.

  Attributes:
    model: the ModelConfig; its vocab_size is replaced by the tokenizer's.
    graph_source: where the feature predictors' graphs come from:
      'predicted' (the graph predictor: GLoMo) or a fixed graph that measures
      what the objective rewards ('uniform', 'previous', 'planted' on the
      built-in corpus, 'export': the frozen graphs of `graph_export`;
      `glomo_jax.pretraining.fixed_graphs`).
    graph_export: the export directory of graph_source='export'.
    export: write the frozen graph predictor to <workdir>/export at the end.
  """
  model: ModelConfig = ModelConfig()
  graph_source: str = "predicted"
  graph_export: str | None = None

  def __post_init__(self):
    if isinstance(self.model, Mapping):
      object.__setattr__(self, "model", ModelConfig.from_dict(self.model))
    super().__post_init__()
    if self.graph_source not in GRAPH_SOURCES:
      raise ValueError(f"graph_source {self.graph_source!r} is not one of {list(GRAPH_SOURCES)}")
    if (self.graph_source == "export") != bool(self.graph_export):
      raise ValueError("graph_export is the export of graph_source='export' (and only of it)")
    if self.graph_source == "planted" and self.corpus.source != "synthetic":
      raise ValueError("graph_source='planted' needs the built-in corpus (corpus.source="
                       "'synthetic'): only it has planted arcs")
    if self.graph_source != "predicted" and self.model.objective != "context":
      raise ValueError("fixed graphs need the context objective")
    if self.bptt <= self.model.context_length:
      raise ValueError(f"bptt={self.bptt} must exceed the model's context_length "
                       f"{self.model.context_length}")

  def to_dict(self) -> dict:
    d = super().to_dict()
    d["model"] = self.model.to_dict()
    return d
