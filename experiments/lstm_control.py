"""The control language model of the token curve: a plain two-layer LSTM with tied
embeddings, as many parameters as the `wiki_cpu` preset's GLoMo model,
trained by the one loop on GLoMo's own tokens and windows, so that the
verb-number probe (`glomo_jax.classification.lm_agreement`) scores both the
same way. A control, not a product feature: it lives in experiments/ on
the library's pieces (`TextPretrainConfigBase`: corpus, tokenizer, windows,
optimiser, loop; `text_data` and `TrainWindows`: the pretraining data
pipeline itself; the tied softmax cross-entropy; `restore_checkpoint`).

Model (`LstmLm`): embedding E [V, d] → `num_layers` LSTM layers of `hidden`
units (PyTorch's gate order i, f, g, o; one bias per gate; PyTorch's
initialisation U(±1/√hidden), E U(±0.1) as GLoMo's) → a linear projection to
d when hidden ≠ d → logits h·Eᵀ (the output layer is E, no bias). Each
window starts from a zero state (GLoMo's windows are independent too); a
padding position (mask 0) leaves the state as it was, so padding anywhere
changes no real position. Loss: the mean cross-entropy of every real token
after the window's first, given the tokens before it (`lstm_parameter_count`
gives the size).

`train_lstm_lm(config, workdir)` is the whole run (experiments/lstm_lm.py is
its entry); `restore_language_model(workdir)` gives a GLoMo or an LSTM run's
model, told apart by its recorded config (an LSTM run's has an `lstm` group).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

from glomo_jax.config import DictConfig, from_dict
from glomo_jax.models.initializers import fan_in_uniform, uniform
from glomo_jax.ops.chunked_cross_entropy import tied_softmax_cross_entropy
from glomo_jax.ops.dense import dense
from glomo_jax.text.layers import lstm_update
from glomo_jax.pretraining import (CONFIG_FILE, PretrainConfig, TextPretrainConfigBase,
                                   TrainWindows, restore_checkpoint, text_data)
from glomo_jax.pretraining.task import HELDOUT, model_batch
from glomo_jax.train import loop
from glomo_jax.train.run_config import check_run_config, record_run_config
from glomo_jax.train.task import RunContext, RunEval, Task
from glomo_jax.train.workdir import holding_workdir

logger = logging.getLogger("glomo_jax.train")

# what a resumed run may change (as pixel pretraining): its length, how often it reports or saves
RESUMABLE_CHANGES = ("loop.num_steps", "loop.log_every", "loop.checkpoint_every",
                     "loop.keep_checkpoints")


@dataclasses.dataclass(frozen=True)
class LstmOptions(DictConfig):
  """The network's sizes (the defaults: 2,298,528 parameters with the
  preset's 8,000 pieces, GLoMo's 2,311,942 − 0.6 %).

  Attributes:
    dim: d, the embedding's width (tied to the output layer; GLoMo's 128).
    hidden: the LSTM layers' width (a projection to d follows when ≠ d).
    num_layers: LSTM layers.
    loss_chunk_size: rows of the tied softmax computed at once
      (`tied_softmax_cross_entropy`).
  """
  dim: int = 128
  hidden: int = 300
  num_layers: int = 2
  loss_chunk_size: int = 1024

  def __post_init__(self):
    for f in dataclasses.fields(self):
      if getattr(self, f.name) < 1:
        raise ValueError(f"lstm.{f.name} must be >= 1, got {getattr(self, f.name)}")


def lstm_parameter_count(vocab_size: int, options: LstmOptions) -> int:
  """V·d (tied embedding) + per layer 4h·(input + h + 1) + the projection
  (h + 1)·d when h ≠ d."""
  d, h = options.dim, options.hidden
  layers = sum(4 * h * ((d if layer == 0 else h) + h + 1) for layer in range(options.num_layers))
  return vocab_size * d + layers + ((h + 1) * d if h != d else 0)


class LstmLayer(nn.Module):
  """One LSTM layer over [batch, T, in]; the gates' input GEMM for every
  position at once, then a scan over time."""
  in_features: int
  features: int

  def setup(self):
    init, h4 = uniform(1.0 / self.features ** 0.5), 4 * self.features
    self.input_kernel = self.param("input_kernel", init, (self.in_features, h4))
    self.hidden_kernel = self.param("hidden_kernel", init, (self.features, h4))
    self.bias = self.param("bias", init, (h4,))

  def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
    """x [batch, T, in], mask bool [batch, T] → outputs [batch, T, hidden]
    from a zero state; a masked position keeps the state (and outputs it)."""
    gates_in = jnp.swapaxes(dense(x, self.input_kernel, self.bias), 0, 1)   # [T, batch, 4h]
    kernel = self.hidden_kernel

    def step(carry, inputs):
      h, c = carry
      g_in, real = inputs
      c_new, h_new = lstm_update(g_in + dense(h, kernel), c)
      h, c = jnp.where(real, h_new, h), jnp.where(real, c_new, c)
      return (h, c), h

    zeros = jnp.zeros((x.shape[0], self.features), gates_in.dtype)
    _, out = jax.lax.scan(step, (zeros, zeros),
                          (gates_in, jnp.swapaxes(mask, 0, 1)[..., None]))
    return jnp.swapaxes(out, 0, 1)


class LstmLm(nn.Module):
  """The LSTM language model (module docstring). Parameters: embedding
  [V, d], layers_<l> (input_kernel [in, 4h], hidden_kernel [h, 4h], bias
  [4h]), projection (kernel [h, d], bias [d]; only when h ≠ d)."""
  options: LstmOptions
  vocab_size: int

  def setup(self):
    o = self.options
    self.embedding = self.param("embedding", uniform(0.1), (self.vocab_size, o.dim))
    self.layers = [LstmLayer(o.dim if layer == 0 else o.hidden, o.hidden)
                   for layer in range(o.num_layers)]
    if o.hidden != o.dim:
      self.projection = nn.Dense(o.dim, kernel_init=fan_in_uniform(o.hidden),
                                 bias_init=fan_in_uniform(o.hidden))

  def hidden_states(self, tokens: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """tokens int [batch, T], mask [batch, T] (1 = real) → [batch, T, d]:
    row t reads tokens ≤ t only (and only the real ones)."""
    real = jnp.ones(tokens.shape, bool) if mask is None else mask.astype(bool)
    h = jnp.take(self.embedding, tokens, axis=0)
    for layer in self.layers:
      h = layer(h, real)
    return self.projection(h) if self.options.hidden != self.options.dim else h

  def next_token_log_probs(self, tokens: jax.Array, mask: jax.Array | None = None
                           ) -> jax.Array:
    """float32 [batch, T, V] log-probabilities; row t predicts token t + 1
    from tokens ≤ t (`GLoMo.next_token_log_probs`' interface, for the
    probes of `glomo_jax.classification.lm_agreement`)."""
    logits = jnp.einsum("btd,vd->btv", self.hidden_states(tokens, mask), self.embedding,
                        precision=jax.lax.Precision.HIGHEST)
    return jax.nn.log_softmax(logits, axis=-1)

  def __call__(self, tokens: jax.Array, mask: jax.Array | None = None):
    """(loss, {'loss', 'tokens'}): the mean next-token cross-entropy over
    the real targets (positions 1 … T − 1 whose token is real) of tokens
    int [batch, T]; 'tokens' counts them."""
    hidden = self.hidden_states(tokens, mask)[:, :-1].reshape(-1, self.options.dim)
    real = jnp.ones(tokens.shape, bool) if mask is None else mask.astype(bool)
    weights = real[:, 1:].reshape(-1).astype(jnp.float32)
    count = jnp.sum(weights)
    loss, _ = tied_softmax_cross_entropy(hidden, self.embedding, tokens[:, 1:].reshape(-1),
                                         weights / jnp.maximum(count, 1.0),
                                         self.options.loss_chunk_size)
    return loss, {"loss": loss, "tokens": count}


@dataclasses.dataclass(frozen=True)
class LstmLmConfig(TextPretrainConfigBase):
  """The control's run: `TextPretrainConfigBase`'s corpus, tokenizer,
  windows, optimiser and loop (experiments/configs/lstm_lm.py takes the
  `wiki_cpu` preset's), and the network (`lstm`). Its defaults: Adam 3e-3,
  global-norm clip 1.0 (a 1,000-step pilot on held-out loss).

  Attributes:
    lstm: the network's sizes (`LstmOptions`).
    export: False (no graph predictor to export).
  """
  lstm: LstmOptions = LstmOptions()
  optimizer: str = "adam"
  learning_rate: float = 3e-3
  momentum: float = 0.0
  clip_norm: float = 1.0
  export: bool = False

  def __post_init__(self):
    if isinstance(self.lstm, Mapping):
      object.__setattr__(self, "lstm", from_dict(LstmOptions, self.lstm, "lstm"))
    super().__post_init__()
    if self.export:
      raise ValueError("export must be False: an LSTM language model has no graph "
                       "predictor to export")


class LstmLmTask(Task):
  """`LstmLm` on the text windows (module docstring): the training windows
  as GLoMo's run reads them; held-out per-token cross-entropy."""
  rng_streams = ()
  batch_flag = "--config.batch_size"
  log_metrics = ("loss",)

  def __init__(self, config: LstmLmConfig, workdir: str):
    self.config = config
    os.makedirs(workdir, exist_ok=True)
    self.tokenizer, self.data = text_data(config, workdir)
    self.model = LstmLm(config.lstm, self.tokenizer.vocab_size)
    self.eval_splits = (HELDOUT,) if self.data.eval_stream is not None else ()
    self.tokens_per_batch = config.batch_size * config.bptt
    logger.info("LSTM language model: %s, %d parameters", config.lstm,
                lstm_parameter_count(self.tokenizer.vocab_size, config.lstm))

  def init_variables(self, rng):
    return self.model.init(rng, jnp.zeros((1, self.config.bptt), jnp.int32))

  def optimizer(self):
    return self.config.build_optimizer()

  def loss(self, variables, batch, rngs):
    loss, metrics = self.model.apply(variables, batch["tokens"], batch["mask"])
    return loss, metrics, variables.get("batch_stats", {})

  def train_batches(self):
    return TrainWindows(self.data.train, with_arcs=False)

  def batch_spec(self):
    shape = jax.ShapeDtypeStruct((self.config.batch_size, self.config.bptt), jnp.int32)
    return {"tokens": shape, "mask": shape}

  def eval_step(self, variables, batch):
    loss, metrics = self.model.apply(variables, batch["tokens"], batch["mask"])
    return {"loss_sum": loss * metrics["tokens"], "tokens": metrics["tokens"]}

  def evaluate(self, split: str, run_eval: RunEval) -> dict[str, float]:
    """Held-out cross-entropy per predicted token (nats; every real token
    after a window's first, given the window's tokens before it) over the
    first `eval_batches` held-out batches (0: all): the windows GLoMo's
    held-out loss reads."""
    loss_sum = tokens = 0.0
    for i, batch in enumerate(self.data.eval_iterator()):
      if self.config.eval_batches and i >= self.config.eval_batches:
        break
      out = run_eval(model_batch(batch, with_arcs=False))
      loss_sum += float(out["loss_sum"])
      tokens += float(out["tokens"])
    return {"loss": loss_sum / max(tokens, 1.0), "tokens": tokens}

  def check_resume(self, workdir: str) -> None:
    check_run_config(workdir, self.config.to_dict(), RESUMABLE_CHANGES, type(self.config))

  def on_start(self, ctx: RunContext) -> None:
    record_run_config(ctx, self.config.to_dict())


@holding_workdir
def train_lstm_lm(config: LstmLmConfig, workdir: str, *,
                  compilation_cache_dir: str | None = None, devices=None) -> dict[str, Any]:
  """Runs (or resumes) the LSTM language model in `workdir`; the loop's
  summary (`glomo_jax.train.loop.run`)."""
  task = LstmLmTask(config, workdir)
  return loop.run(task, config.loop.loop_config(**config.loop_fields(),
                                                compilation_cache_dir=compilation_cache_dir),
                  workdir, devices=devices)


def is_lstm_run(recorded: Mapping[str, Any]) -> bool:
  """Whether a run's recorded config (its config.json) is an LSTM
  language model's (it has an `lstm` group) rather than GLoMo's."""
  return "lstm" in recorded


def restore_language_model(workdir: str, step: int | None = None):
  """(config, model, variables, tokenizer, step) of a GLoMo pretraining run
  or an LSTM run at checkpoint `step` (the newest if None): its config
  (`PretrainConfig` or `LstmLmConfig`) and a module whose
  `next_token_log_probs(tokens, mask)` the probes call.

  Raises:
    FileNotFoundError, ValueError: as `restore_checkpoint`.
  """
  lstm = False
  try:
    with open(os.path.join(workdir, CONFIG_FILE), encoding="utf-8") as f:
      lstm = is_lstm_run(json.load(f))
  except (OSError, ValueError):
    pass                                  # restore_checkpoint names the problem
  config, tokenizer, variables, step = restore_checkpoint(
      workdir, step, LstmLmConfig if lstm else PretrainConfig)
  if lstm:
    model = LstmLm(config.lstm, tokenizer.vocab_size)
  else:
    from glomo_jax.models.glomo import GLoMo  # noqa: PLC0415
    model = GLoMo(config.model.replace(vocab_size=tokenizer.vocab_size))
  return config, model, variables, tokenizer, step


def heldout_next_token_loss(config: TextPretrainConfigBase, model, variables, workdir: str,
                            eval_batches: int | None = None, data=None) -> dict[str, float]:
  """{'loss', 'tokens'}: the mean cross-entropy (nats) of every real token
  after a window's first given the window's tokens before it, from
  `model.next_token_log_probs`, over the first `eval_batches` (default the
  config's; 0: all) held-out windows of the run in `workdir` (`text_data`:
  its tokenizer and token cache, read as its run reads them; or `data`, the
  `PretrainingData` of an earlier call on the same run). For an LSTM
  run it is its held-out loss; for GLoMo, its forward direction's
  first-step cross-entropy, the one part of its held-out loss (forward and
  backward, 3 tokens ahead of each position) a language model shares.

  Raises:
    ValueError: the run has no held-out split.
  """
  if data is None:
    _, data = text_data(config, workdir)
  if data.eval_stream is None:
    raise ValueError(f"the run in {workdir} has no held-out split (heldout_fraction 0)")

  @jax.jit
  def sums(variables, tokens, mask):
    log_probs = model.apply(variables, tokens, mask, method=type(model).next_token_log_probs)
    picked = jnp.take_along_axis(log_probs[:, :-1], tokens[:, 1:, None], axis=-1)[..., 0]
    real = mask[:, 1:].astype(jnp.float32)
    return -jnp.sum(picked * real), jnp.sum(real)
  limit = config.eval_batches if eval_batches is None else eval_batches
  loss_sum = tokens = 0.0
  for i, batch in enumerate(data.eval_iterator()):
    if limit and i >= limit:
      break
    windows = model_batch(batch, with_arcs=False)
    batch_sum, batch_tokens = sums(variables, windows["tokens"], windows["mask"])
    loss_sum, tokens = loss_sum + float(batch_sum), tokens + float(batch_tokens)
  return {"loss": loss_sum / max(tokens, 1.0), "tokens": tokens}
