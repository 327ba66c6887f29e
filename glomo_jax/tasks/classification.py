"""Text classification (IMDB, NLI, agreement) as a task of the training loop.

Adam with optional gradient-norm clipping on the weighted mean cross-entropy;
validation accuracy every `eval_every` steps ranks the evaluations (the best
variables are kept, patience stops early); at the end the best variables are
evaluated on the task's evaluation splits (IMDB 'test'; MNLI 'matched',
'mismatched').

Batches: `batches.make_batch` over the global batch (so every process pads
to the same lengths), this process's rows, and for the GLoMo variants the
word graphs of each text field from the task's graph caches (`TaskGraphs`).
"""
from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax

from glomo_jax.tasks.batching import ExampleBatches, batch_order, host_rows, make_batch
from glomo_jax.tasks.datasets import TaskData
from glomo_jax.tasks.graphs import TaskGraphs
from glomo_jax.tasks.transfer_config import (TransferConfig, loop_values, make_optimizer,
                                             record_run_config)
from glomo_jax.tasks.words import Vocabulary
from glomo_jax.train.config import LoopConfig
from glomo_jax.train.task import RunContext, RunEval, Task

VALIDATION = "validation"


class ClassificationTask(Task):
  """A task model trained on data['train'] (module docstring).

  Args:
    model: IMDBClassifier or ESIM (any linen module taking, per text field f,
      keywords f, f_mask (and f_graphs when it reads graphs) and `train`).
    data: the task's splits (`datasets.load_task`, `agreement.load_agreement_task`).
    vocab: word → id (its size must match the model's vocab_size).
    config: the run's TransferConfig (optim, max_words, length_multiple,
      bucket_batches, seed, mesh_data, compile_fast).
    graphs: the word graphs of every split; required iff the model reads graphs.
  """
  rng_streams = ("dropout",)
  eval_splits = (VALIDATION,)
  log_metrics = ("loss", "accuracy")

  def __init__(self, model, data: TaskData, vocab: Vocabulary, config: TransferConfig,
               graphs: TaskGraphs | None = None):  # or OnTheFlyGraphs, ArcGraphs
    reads_graphs = getattr(model, "glomo", "none") in ("embeddings", "rnn")
    if reads_graphs and graphs is None:
      raise ValueError(f"model variant glomo={model.glomo!r} reads predictor graphs: "
                       "pass the task's graphs (TaskGraphs)")
    if getattr(model, "vocab_size", len(vocab)) != len(vocab):
      raise ValueError(f"model vocab_size {model.vocab_size} != vocabulary size {len(vocab)}")
    self.model, self.data, self.vocab, self.config = model, data, vocab, config
    self.graphs = graphs if reads_graphs else None
    self.fields = data.text_fields
    self.batch_size = config.optim.batch_size
    self.eval_batch_size = config.optim.eval_batch_size or 2 * self.batch_size
    self.process = (jax.process_index(), jax.process_count())
    # a split smaller than one batch is padded with weight-0 rows
    self.batches = ExampleBatches(data.splits["train"], self.batch_size,
                                  functools.partial(self.device_batch, "train",
                                                    batch_size=self.batch_size),
                                  seed=config.seed, bucket_batches=config.bucket_batches)

  def loop_config(self, **changes) -> LoopConfig:
    """Training length and evaluation schedule from `config.optim` (one
    epoch = the training split's full batches)."""
    c = self.config
    values = dict(loop_values(c.optim, self.batches.batches_per_epoch,
                              f"{VALIDATION}/accuracy"),
                  seed=c.seed, mesh_data=c.mesh_data, compile_fast=c.compile_fast)
    values.update(changes)
    return LoopConfig(**values)

  # ---- batches ----------------------------------------------------------------
  def device_batch(self, split: str, indices, batch_size: int | None = None) -> dict:
    """This process's rows of the padded batch of `indices` of `split`:
    {f: int32 [b, W_f], f_mask: bool, (f_graphs: float32 [b, 2L, K, W_f, W_f]),
    label: int32 [b], weight: float32 [b] (0 for padding rows)}."""
    c = self.config
    batch = make_batch(self.data.splits[split], indices, self.vocab, max_words=c.max_words,
                       length_multiple=c.length_multiple, batch_size=batch_size)
    batch = host_rows(batch, *self.process)
    index = batch.pop("index")
    if self.graphs is not None:
      for f in self.fields:
        batch[f + "_graphs"] = self.graphs.batch(split, f, index, batch[f + "_mask"].sum(1),
                                                 batch[f].shape[1])
    return batch

  def train_batches(self):
    return self.batches

  def _inputs(self, batch: dict) -> dict:
    return {k: v for k, v in batch.items() if k not in ("label", "weight")}

  # ---- model ------------------------------------------------------------------
  def init_variables(self, rng):
    inputs = {}
    for f in self.fields:
      inputs[f], inputs[f + "_mask"] = jnp.ones((1, 1), jnp.int32), jnp.ones((1, 1), bool)
      if self.graphs is not None:
        inputs[f + "_graphs"] = jnp.zeros((1,) + self.graphs.graph_prefix + (1, 1))
    return self.model.init({"params": rng}, **inputs, train=False)

  def optimizer(self):
    return make_optimizer(self.config.optim)

  def _scores(self, params, batch: dict, train: bool, rngs=None):
    logits = self.model.apply({"params": params}, **self._inputs(batch), train=train, rngs=rngs)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32),
                                                            batch["label"])
    correct = (jnp.argmax(logits, -1) == batch["label"]).astype(jnp.float32)
    w = batch["weight"]
    return jnp.sum(losses * w), jnp.sum(correct * w), jnp.sum(w)

  def loss(self, variables, batch, rngs):
    loss_sum, correct, count = self._scores(variables["params"], batch, True, rngs)
    count = jnp.maximum(count, 1.0)
    loss = loss_sum / count
    return loss, {"loss": loss, "accuracy": correct / count}, variables["batch_stats"]

  # ---- evaluation -------------------------------------------------------------
  def eval_step(self, variables, batch):
    loss_sum, correct, count = self._scores(variables["params"], batch, False)
    return {"loss_sum": loss_sum, "correct": correct, "count": count}

  def evaluate(self, split: str, run_eval: RunEval) -> dict[str, Any]:
    """Accuracy and mean loss over every example of `split` (each once)."""
    sums = {"loss_sum": 0.0, "correct": 0.0, "count": 0.0}
    for indices in batch_order(self.data.splits[split], self.eval_batch_size):
      out = run_eval(self.device_batch(split, indices, self.eval_batch_size))
      for k in sums:
        sums[k] += float(out[k])
    if not sums["count"]:
      return {"accuracy": float("nan"), "loss": float("nan")}
    return {"accuracy": sums["correct"] / sums["count"],
            "loss": sums["loss_sum"] / sums["count"]}

  def on_start(self, ctx: RunContext) -> None:
    record_run_config(ctx, self.config.to_dict())

  def on_end(self, ctx: RunContext) -> dict:
    """{'results': {'validation': best validation accuracy, <eval split>:
    accuracy of the best variables}}."""
    results = {VALIDATION: ctx.best.get("value", float("nan"))}
    if self.data.eval_splits:
      best = ctx.best_variables()
      for name in self.data.eval_splits:
        results[name] = ctx.evaluate(name, best)["accuracy"]
    return {"results": results}

