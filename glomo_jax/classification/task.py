"""Text classification (IMDB, SST-2, NLI, agreement) as a downstream task;
with a per-word target padder (`text.batching.word_targets`) and a model of
per-word logits, a per-word classifier (a tagger) as well.

The weighted mean cross-entropy is trained with the config's optimiser;
validation accuracy ranks the evaluations (`DownstreamTask`); at the end the
best variables are evaluated on the task's evaluation splits (IMDB / SST-2 /
SNLI 'test'; MNLI 'matched', 'mismatched').

Batches: `batching.make_batch` over the global batch (so every process pads
to the same lengths), this process's rows, and for the GLoMo variants the
word graphs of each text field from the task's graph caches (`TaskGraphs`).
"""
from __future__ import annotations

import functools
from typing import Any, Sequence

import jax.numpy as jnp

from glomo_jax.downstream.scores import (ScoreGroup, classification_sums, group_accuracy,
                                         group_membership, group_sums, mean_loss,
                                         summed_accuracy)
from glomo_jax.downstream.task import DownstreamTask
from glomo_jax.graphs.task_graphs import TaskGraphs
from glomo_jax.text.batching import TargetPadder, make_batch, pad_labels
from glomo_jax.text.fields import TextFields
from glomo_jax.text.splits import TaskData
from glomo_jax.text.words import Vocabulary
from glomo_jax.train.batches import batch_order, host_rows
from glomo_jax.train.task import RunEval
from glomo_jax.transfer.options import VARIANTS


class ClassificationTask(DownstreamTask):
  """A task model trained on data['train'] (module docstring).

  Args:
    model: TextClassifier or ESIM (any linen module taking, per text field f,
      keywords f, f_mask (and f_graphs when it reads graphs) and `train`).
    data: the task's splits (`text.readers.load_task`, `agreement.load_agreement_task`).
    vocab: word → id (its size must match the model's vocab_size).
    config: the run's config: a `DownstreamConfig` with `TextFields` and
      max_words (ClassificationConfig, or another text kind's; read: optim,
      loop, max_words, length_multiple, bucket_batches, seed).
    graphs: the word graphs of every split; required iff the model reads graphs.
    groups: subsets of a split's examples scored apart (`ScoreGroup`, by the
      split's `info`), e.g. the verb-number task's attractor counts.
    target_padder: the batches' 'label' array (`text.batching`: `pad_labels`,
      a class per example, the model's logits [b, C]; `word_targets(field)`,
      a class per word, logits [b, W_field, C]: loss and accuracy per word).
  """
  log_metrics = ("loss", "accuracy")

  def __init__(self, model, data: TaskData, vocab: Vocabulary, config: TextFields,
               graphs: TaskGraphs | None = None,  # or OnTheFlyGraphs, ArcGraphs
               groups: Sequence[ScoreGroup] = (), target_padder: TargetPadder = pad_labels):
    reads_graphs = VARIANTS[getattr(model, "variant", "baseline")].reads_graphs
    if reads_graphs and graphs is None:
      raise ValueError(f"model variant {model.variant!r} reads predictor graphs: "
                       "pass the task's graphs (TaskGraphs)")
    if getattr(model, "vocab_size", len(vocab)) != len(vocab):
      raise ValueError(f"model vocab_size {model.vocab_size} != vocabulary size {len(vocab)}")
    self.model, self.data, self.vocab = model, data, vocab
    self.graphs = graphs if reads_graphs else None
    self.fields = data.text_fields
    self.held_out = data.eval_splits
    self.groups = tuple(groups)
    self.target_padder = target_padder
    super().__init__(config, data.splits["train"],
                     functools.partial(self.device_batch, "train",
                                       batch_size=config.optim.batch_size),
                     bucket_batches=config.bucket_batches)

  # ---- batches ----------------------------------------------------------------
  def device_batch(self, split: str, indices, batch_size: int | None = None,
                   groups: bool = False) -> dict:
    """This process's rows of the padded batch of `indices` of `split`:
    {f: int32 [b, W_f], f_mask: bool, (f_graphs: float32 [b, 2L, K, W_f, W_f]),
    label: the target padder's (int32 [b] by default), weight: float32 [b]
    (0 for padding rows), and with
    `groups` 'groups': float32 [b, G], 1 where the row is in the task's group g}."""
    c = self.config
    data = self.data.splits[split]
    batch = make_batch(data, indices, self.vocab, max_words=c.max_words,
                       length_multiple=c.length_multiple, batch_size=batch_size,
                       target_padder=self.target_padder)
    if groups:
      batch["groups"] = group_membership(self.groups, data.info, batch["index"])
    batch = host_rows(batch, *self.process)
    index = batch.pop("index")
    if self.graphs is not None:
      for f in self.fields:
        batch[f + "_graphs"] = self.graphs.batch(split, f, index, batch[f + "_mask"].sum(1),
                                                 batch[f].shape[1])
    return batch

  # ---- model ------------------------------------------------------------------
  def init_variables(self, rng):
    inputs = {}
    for f in self.fields:
      inputs[f], inputs[f + "_mask"] = jnp.ones((1, 1), jnp.int32), jnp.ones((1, 1), bool)
      if self.graphs is not None:
        inputs[f + "_graphs"] = jnp.zeros((1,) + self.graphs.graph_prefix + (1, 1))
    return self.model.init({"params": rng}, **inputs, train=False)

  def _sums(self, params, batch: dict, train: bool, rngs=None) -> dict:
    inputs = {k: v for k, v in batch.items() if k not in ("label", "weight", "groups")}
    logits = self.model.apply({"params": params}, **inputs, train=train, rngs=rngs)
    sums = classification_sums(logits, batch["label"], batch["weight"])
    if "groups" in batch:
      sums.update(group_sums(logits, batch["label"], batch["weight"], batch["groups"]))
    return sums

  def loss(self, variables, batch, rngs):
    loss, metrics = mean_loss(self._sums(variables["params"], batch, True, rngs))
    return loss, metrics, variables["batch_stats"]

  # ---- evaluation -------------------------------------------------------------
  def eval_step(self, variables, batch):
    return self._sums(variables["params"], batch, False)

  def evaluate(self, split: str, run_eval: RunEval) -> dict[str, Any]:
    """Accuracy and mean loss over every example of `split` (each once), and
    each score group's accuracy ('accuracy/<group>') and size
    ('examples/<group>'), for the groups with examples in the split."""
    grouped = bool(self.groups) and self.data.splits[split].info is not None
    sums = {}
    batches = (self.device_batch(split, indices, self.eval_batch_size, grouped)
               for indices in batch_order(self.data.splits[split], self.eval_batch_size))
    metrics = summed_accuracy(batches, run_eval, sums)
    if grouped:
      metrics.update(group_accuracy(self.groups, sums))
    return metrics

  def curve(self, entry: dict) -> dict:
    return {"step": entry["step"], "train_loss": entry["train"].get("loss"),
            "train_accuracy": entry["train"].get("accuracy"),
            "validation_accuracy": entry["validation"]["accuracy"]}
