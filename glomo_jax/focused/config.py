"""`PickingConfig`: one picking-task run of the focused encoder or a
baseline (its model in `FocusedOptions`, the gate's objective in
`GateObjective`, the generated sets' sizes and ranges)."""
from __future__ import annotations

import dataclasses
from typing import Mapping

import jax
import jax.numpy as jnp

from glomo_jax.config import from_dict
from glomo_jax.downstream.config import DownstreamConfig
from glomo_jax.downstream.options import DOWNSTREAM_MOVED_FIELDS, OptimOptions
from glomo_jax.focused.model import DECISIONS, KINDS, ORACLES, PickingReader
from glomo_jax.focused.objective import focused_loss
from glomo_jax.train.config import DOWNSTREAM_LOOP, LoopOptions

TEST_K = ("trained", "any", "both")


@dataclasses.dataclass(frozen=True)
class FocusedOptions:
  """The reader (`glomo_jax.focused.model.PickingReader`).

  Attributes:
    kind: 'fhe' (the focused hierarchical encoder), 'lstm1' (one LSTM layer +
      attention over every state) or 'lstm2' (two layers + attention).
    hidden, digit_dim, gate_hidden, attention_hidden: widths.
    position_scale: s in the question k / s (and the position feature t / s).
    positions: give each digit its position t / s as a feature (a departure:
      the slides' readers see the tokens alone, so the lower LSTM counts).
    gate_positions: give the gate alone each digit's position t / s beside
      z_t (fhe; a departure): the gate can compare where it is with k, the
      LSTMs and the attention still read the digits alone (so the
      baselines keep the slides' length test).
    reinforce_encoder: whether REINFORCE's gradient reaches the lower LSTM
      and the question encoding through the gate's inputs (True, the
      slides' model) or only the gate's own weights (False: stop_gradient).
    train_gate: the gate in training: 'sample' (b_t ~ Bernoulli(p_t), the
      gate learning by REINFORCE) or an oracle ('prefix': b_t = 1[t <= k];
      'kth': b_t = 1[t = k]; 'fhe' only): a control whose gate is right and
      not learnt (the loss is the answer's alone).
    test_gate: the gate at evaluation: 'sample' (as in training; keyed by
      the seed and the batch's first example), 'threshold' (b_t = 1[p_t >=
      1/2]) or an oracle.
  """
  kind: str = "fhe"
  hidden: int = 64
  digit_dim: int = 16
  gate_hidden: int = 32
  attention_hidden: int = 32
  position_scale: float = 100.0
  positions: bool = False
  gate_positions: bool = False
  reinforce_encoder: bool = True
  train_gate: str = "sample"
  test_gate: str = "sample"

  def reader(self) -> PickingReader:
    """The `PickingReader` these options describe."""
    return PickingReader(self.kind, self.hidden, self.digit_dim, self.gate_hidden,
                         self.attention_hidden, self.position_scale, self.positions,
                         self.reinforce_encoder, self.gate_positions)

  def check(self) -> None:
    if self.kind not in KINDS:
      raise ValueError(f"unknown model.kind {self.kind!r}: one of {list(KINDS)}")
    if self.train_gate not in ("sample",) + ORACLES:
      raise ValueError(f"unknown model.train_gate {self.train_gate!r}: one of "
                       f"{['sample', *ORACLES]}")
    if self.test_gate not in DECISIONS + ORACLES:
      raise ValueError(f"unknown model.test_gate {self.test_gate!r}: one of "
                       f"{list(DECISIONS + ORACLES)}")
    if self.kind != "fhe" and (self.train_gate in ORACLES or self.test_gate in ORACLES):
      raise ValueError(f"an oracle gate needs model.kind 'fhe', got {self.kind!r}")
    if self.gate_positions and (self.kind != "fhe" or self.train_gate in ORACLES):
      raise ValueError("model.gate_positions feeds a learnt gate: it needs model.kind 'fhe' "
                       f"and model.train_gate 'sample', got {self.kind!r}, {self.train_gate!r}")
    if self.train_gate in ORACLES and self.test_gate not in ORACLES:
      raise ValueError(f"model.train_gate {self.train_gate!r} trains no gate: test with an "
                       f"oracle too (model.test_gate), not {self.test_gate!r}")
    if min(self.hidden, self.digit_dim, self.gate_hidden, self.attention_hidden) < 1:
      raise ValueError("the model's widths must be >= 1")
    if not self.position_scale > 0:
      raise ValueError(f"model.position_scale must be > 0, got {self.position_scale}")


@dataclasses.dataclass(frozen=True)
class GateObjective:
  """The gate's training terms (`glomo_jax.focused.objective`): the sparsity
  cost β ReLU(Σ_t b_t − γT) in the reward (`beta` per token beyond the share
  `gamma`; β grows linearly from 0 over the first `beta_warmup` steps), the
  negative entropy's weight `entropy_weight`; `samples` gate samples of
  each example (1: REINFORCE's baseline is the batch's other examples' mean
  reward; S ≥ 2: the example's other samples', at S times the step's cost:
  the network's loss is the mean over the samples)."""
  beta: float = 0.01
  gamma: float = 0.1
  beta_warmup: int = 500
  entropy_weight: float = 0.01
  samples: int = 1

  def check(self, where: str = "gate") -> None:
    if not (self.beta >= 0 and self.entropy_weight >= 0 and 0 <= self.gamma <= 1
            and self.beta_warmup >= 0):
      raise ValueError(f"{where}: beta, beta_warmup and entropy_weight must be >= 0 and gamma "
                       f"in [0, 1], got {self}")
    if self.samples < 1:
      raise ValueError(f"{where}.samples must be >= 1, got {self.samples}")

  def beta_at(self, step: jax.Array) -> jax.Array:
    """β at the 1-based training step `step`: β min(1, step / beta_warmup)
    (β from the first step when beta_warmup is 0)."""
    return self.beta * jnp.minimum(1.0, step / max(self.beta_warmup, 1))

  def loss(self, log_likelihood: jax.Array, logits: jax.Array | None, gates: jax.Array,
           mask: jax.Array, weights: jax.Array, step: jax.Array) -> tuple[jax.Array, dict]:
    """(L, metrics) of `focused_loss` with these terms at training step
    `step` (β warmed up: `beta_at`). log_likelihood, weights: [B]; logits
    (None: no gate), gates, mask: [B, T]; with `samples` S ≥ 2 the rows are
    S copies of the examples, sample-major."""
    return focused_loss(log_likelihood, logits, gates, mask, weights, beta=self.beta_at(step),
                        gamma=self.gamma, entropy_weight=self.entropy_weight,
                        samples=self.samples if logits is not None else 1)


@dataclasses.dataclass(frozen=True)
class PickingConfig(DownstreamConfig):
  """One picking run; and `DownstreamConfig`'s fields (variant 'baseline'
  only: no graphs; seed: parameters, shuffling, gates; data_seed: every
  generated set).

  Attributes:
    model, gate: `FocusedOptions`, `GateObjective`.
    min_length, max_length: n of the training, validation and test sets.
    min_k, max_k: their question's range (max_k None: up to n).
    train_examples: the generated training set (an epoch).
    validation_examples: selects the best step; test_examples: each held-out
      set: 'test' (the training distribution), 'n<L>' for each of
      `test_lengths` (L digits), 'malicious'.
    test_lengths: the longer lengths tested.
    test_k: k of the longer sets: 'trained' (in the training range, the rest
      a longer tail to ignore; split 'n<L>'), 'any' (up to L; 'n<L>_anyk')
      or 'both'.
    malicious_max_run: the malicious set's longest run of one digit.
    test_file: a JSON-lines file of the user's examples, scored as 'file'.
  """
  VARIANTS = ("baseline",)
  MOVED_FIELDS = DOWNSTREAM_MOVED_FIELDS

  model: FocusedOptions = FocusedOptions()
  gate: GateObjective = GateObjective()
  optim: OptimOptions = OptimOptions(learning_rate=1e-3, batch_size=64, eval_batch_size=100,
                                     clip_norm=1.0)
  loop: LoopOptions = dataclasses.replace(DOWNSTREAM_LOOP, num_steps=6000, eval_every=500)
  min_length: int = 200
  max_length: int = 200
  min_k: int = 1
  max_k: int | None = None
  train_examples: int = 100_000
  validation_examples: int = 1000
  test_examples: int = 1000
  test_lengths: tuple[int, ...] = (400, 800, 1600, 10_000)
  test_k: str = "trained"
  malicious_max_run: int = 10
  test_file: str | None = None

  def __post_init__(self):
    for name, kind in (("model", FocusedOptions), ("gate", GateObjective),
                       ("optim", OptimOptions), ("loop", LoopOptions)):
      if isinstance(getattr(self, name), Mapping):
        object.__setattr__(self, name, from_dict(kind, getattr(self, name),
                                                 f"PickingConfig.{name}",
                                                 self.__dataclass_fields__[name].default))
    object.__setattr__(self, "test_lengths", tuple(self.test_lengths))
    self.check()

  @property
  def trained_max_k(self) -> int:
    """The largest k of training."""
    return self.max_length if self.max_k is None else min(self.max_k, self.max_length)

  def check(self) -> None:
    super().check()
    self.model.check()
    self.gate.check()
    if self.gate.samples > 1 and (self.model.kind != "fhe" or self.model.train_gate != "sample"):
      raise ValueError("gate.samples > 1 needs a sampled gate to learn (model.kind 'fhe', "
                       "model.train_gate 'sample')")
    if not 1 <= self.min_length <= self.max_length:
      raise ValueError(f"need 1 <= min_length <= max_length, got {self.min_length}, "
                       f"{self.max_length}")
    if not 1 <= self.min_k <= min(self.min_length, self.trained_max_k):
      raise ValueError(f"min_k = {self.min_k} must be in [1, min(min_length, max_k)]")
    if min(self.train_examples, self.validation_examples, self.test_examples) < 1:
      raise ValueError("train_examples, validation_examples and test_examples must be >= 1")
    if any(n < self.trained_max_k for n in self.test_lengths):
      raise ValueError(f"test_lengths {self.test_lengths} must be >= the largest k "
                       f"trained ({self.trained_max_k})")
    if self.test_k not in TEST_K:
      raise ValueError(f"unknown test_k {self.test_k!r}: one of {list(TEST_K)}")
    if self.malicious_max_run < 1:
      raise ValueError(f"malicious_max_run must be >= 1, got {self.malicious_max_run}")
