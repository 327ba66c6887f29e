"""SQuAD as a downstream task (`glomo_jax.downstream.DownstreamTask`).

Training minimises the cross-entropy of the first answer's start word plus
that of its end word (softmaxes over the passage's real words), with the
configured optimiser. Every `eval_every` steps the validation questions are
answered (`spans.best_span`: the best span of at most `max_span` words) and
scored with the official metrics; validation F1 selects the best variables,
which answer the validation and dev questions at the end. Each evaluation writes its
answers as `<workdir>/predictions/<split>.json`, and the final dev answers
as `<workdir>/predictions.json` ({question id: answer text}: the file the
official evaluate-v1.1.py reads).

With the focused passage encoder (`ReaderOptions.passage_encoder`
'focused') the network still minimises that cross-entropy, now with the
gates b sampled from the 'gate' rng stream, and the gate is trained by
REINFORCE with the span's log-likelihood log p(start) + log p(end) as the
reward (`GateObjective.loss`: the leave-one-out baseline, the sparsity
cost β ReLU(Σ_t b_t − γT) in the reward with β warmed up over the steps
each batch carries, `NumberedBatches`, and the entropy term). Its gate
openness (the share of real passage words opened) is a train and an
evaluation metric; at evaluation the gates follow `focused.test_gate`.
"""
from __future__ import annotations

import functools
import os
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax

from glomo_jax.downstream.task import VALIDATION, DownstreamTask
from glomo_jax.focused.model import evaluation_rng
from glomo_jax.graphs.task_graphs import OnTheFlyGraphs, TaskGraphs
from glomo_jax.io import write_json
from glomo_jax.squad.batching import make_squad_batch
from glomo_jax.squad.config import SquadConfig
from glomo_jax.squad.data import SquadSplit
from glomo_jax.squad.metrics import squad_scores
from glomo_jax.squad.spans import best_span
from glomo_jax.text.words import Vocabulary
from glomo_jax.train.batches import NumberedBatches, host_rows
from glomo_jax.train.task import RunContext, RunEval
from glomo_jax.transfer.options import VARIANTS

DEV = "dev"
PREDICTIONS_FILE = "predictions.json"
TEXTS = ("context", "question")
NOT_INPUTS = ("start", "end", "weight", "index", "step")    # batch keys the reader does not read


class SquadTask(DownstreamTask):
  """A SquadReader trained on splits['train'] (module docstring).

  Args:
    model: a `SquadReader`.
    splits: {'train' (answerable questions only: `SquadSplit.trainable`),
      'validation', and optionally 'dev'}.
    vocab: words → ids (the model's vocab_size); chars: characters → ids.
    config: the run's SquadConfig.
    graphs: the graphs of every split's 'context' (by paragraph) and
      'question' (by question): `TaskGraphs` (disk caches) or
      `OnTheFlyGraphs`; required iff the model reads graphs.
  """
  select_metric = "f1"
  METRICS = ("loss", "start_accuracy", "end_accuracy", "exact_match", "f1")

  def __init__(self, model, splits: Mapping[str, SquadSplit], vocab: Vocabulary,
               chars: Vocabulary, config: SquadConfig,
               graphs: TaskGraphs | OnTheFlyGraphs | None = None):
    reads_graphs = VARIANTS[model.variant].reads_graphs
    if reads_graphs and graphs is None:
      raise ValueError(f"model variant {model.variant!r} reads predictor graphs: "
                       "pass the paragraphs' and questions' graphs (TaskGraphs)")
    self.model, self.splits, self.vocab, self.chars = model, dict(splits), vocab, chars
    self.graphs = graphs if reads_graphs else None
    self.workdir: str | None = None
    self.is_main = jax.process_index() == 0
    self.predictions: dict[str, dict[str, str]] = {}
    super().__init__(config, self.splits["train"],
                     functools.partial(self.device_batch, "train",
                                       batch_size=config.optim.batch_size),
                     bucket_batches=config.bucket_batches)

  # ---- batches ----------------------------------------------------------------
  def device_batch(self, split: str, indices, batch_size: int | None = None) -> dict:
    """This process's rows of the batch of questions `indices` of `split`
    (`make_squad_batch`), with their graphs when the model reads them."""
    c = self.config
    batch = make_squad_batch(self.splits[split], indices, self.vocab, self.chars,
                             max_word_chars=c.max_word_chars,
                             max_context_words=c.max_context_words,
                             max_question_words=c.max_question_words,
                             length_multiple=c.length_multiple, batch_size=batch_size)
    batch = host_rows(batch, *self.process)
    batch["index"] = batch["index"].astype(np.int32)     # named rows for evaluate
    rows = {"context": batch.pop("paragraph"), "question": batch["index"]}
    if self.graphs is not None:
      for f in TEXTS:
        batch[f + "_graphs"] = self.graphs.batch(split, f, rows[f], batch[f + "_mask"].sum(1),
                                                 batch[f].shape[1])
    return batch

  def _read(self, params, batch: dict, train: bool, rngs=None):
    """The reader's `Reading` of a batch."""
    inputs = {k: v for k, v in batch.items() if k not in NOT_INPUTS}
    return self.model.apply({"params": params}, **inputs, train=train, rngs=rngs,
                            method="read")

  @property
  def focused(self) -> bool:
    """The passage encoder is the focused one (module docstring)."""
    return self.config.model.is_focused

  @property
  def rng_streams(self) -> tuple[str, ...]:
    return ("dropout", "gate") if self.focused else ("dropout",)

  @property
  def log_metrics(self) -> tuple[str, ...]:
    return self.METRICS + (("openness",) if self.focused else ())

  def train_batches(self):
    """The training batches; with the focused encoder each carries its step."""
    return NumberedBatches(self.batches) if self.focused else self.batches

  # ---- model ------------------------------------------------------------------
  def init_variables(self, rng):
    inputs = {}
    for f in TEXTS:
      inputs[f], inputs[f + "_mask"] = jnp.ones((1, 2), jnp.int32), jnp.ones((1, 2), bool)
      inputs[f + "_chars"] = jnp.ones((1, 2, self.config.max_word_chars), jnp.int32)
      if self.graphs is not None:
        inputs[f + "_graphs"] = jnp.zeros((1,) + self.graphs.graph_prefix + (2, 2))
    return self.model.init({"params": rng}, **inputs, train=False)

  def loss(self, variables, batch, rngs):
    reading = self._read(variables["params"], batch, True, rngs)
    start, end = reading.start, reading.end
    w = batch["weight"]
    count = jnp.maximum(jnp.sum(w), 1.0)
    ce = (optax.softmax_cross_entropy_with_integer_labels(start, batch["start"]) +
          optax.softmax_cross_entropy_with_integer_labels(end, batch["end"]))
    hit = lambda s, y: jnp.sum((jnp.argmax(s, -1) == y) * w) / count  # noqa: E731
    accuracies = {"start_accuracy": hit(start, batch["start"]),
                  "end_accuracy": hit(end, batch["end"])}
    if self.focused:          # the network on the span loss, the gate by REINFORCE
      loss, metrics = self.config.model.focused.gate.loss(
          -ce, reading.gate_logits, reading.gates, batch["context_mask"], w, batch["step"][0])
      return loss, dict(metrics, **accuracies), variables["batch_stats"]
    loss = jnp.sum(ce * w) / count
    return loss, {"loss": loss, **accuracies}, variables["batch_stats"]

  # ---- evaluation -------------------------------------------------------------
  def eval_step(self, variables, batch):
    """The best span of each row; with the focused encoder also its words
    opened ('opened' [B]) and real words ('words' [B])."""
    rngs = None
    if self.focused and self.config.model.focused.test_gate == "sample":
      rngs = {"gate": evaluation_rng(self.config.seed, batch["index"][0])}
    reading = self._read(variables["params"], batch, False, rngs)
    first, last, score = best_span(jax.nn.log_softmax(reading.start),
                                   jax.nn.log_softmax(reading.end),
                                   batch["context_mask"], self.config.max_span)
    out = {"first": first, "last": last, "score": score, "index": batch["index"]}
    if self.focused:
      out["opened"] = jnp.sum(reading.gates, axis=-1)
      out["words"] = jnp.sum(batch["context_mask"], axis=-1).astype(jnp.float32)
    return out

  def answer_texts(self, split: str, out: Mapping[str, Any]) -> dict[str, str]:
    """{question id: passage text of its predicted span} of one batch's real
    rows (`out`: eval_step's outputs for the global batch; rows are named by
    their question index, -1 for padding)."""
    data = self.splits[split]
    answers = {}
    for row, i in enumerate(out["index"]):
      if i >= 0:
        q = data.questions[int(i)]
        answers[q.id] = data.paragraphs[q.paragraph].text_of(int(out["first"][row]),
                                                             int(out["last"][row]))
    return answers

  def evaluate(self, split: str, run_eval: RunEval) -> dict[str, Any]:
    """Exact match and F1 (percent) over every question of `split`; with the
    focused encoder its gate openness (a fraction of the real words)."""
    data, predictions = self.splits[split], {}
    opened = words = 0.0
    # by passage length: few distinct batch shapes (compiles) and little padding
    order = np.argsort(data.lengths("context"), kind="stable")
    for start in range(0, len(order), self.eval_batch_size):
      indices = order[start:start + self.eval_batch_size]
      out = run_eval(self.device_batch(split, indices, self.eval_batch_size))
      predictions.update(self.answer_texts(split, out))
      if self.focused:
        opened, words = opened + float(out["opened"].sum()), words + float(out["words"].sum())
    self.predictions[split] = predictions
    if self.workdir is not None and self.is_main:
      write_json(os.path.join(self.workdir, "predictions", f"{split}.json"), predictions,
                 indent=None)
    scores = squad_scores(predictions, {q.id: q.answers for q in data.questions})
    out = {"exact_match": scores["exact_match"], "f1": scores["f1"]}
    if self.focused:
      out["openness"] = opened / max(words, 1.0)
    return out

  # ---- hooks ------------------------------------------------------------------
  def curve(self, entry: dict) -> dict:
    point = {"step": entry["step"], "train_loss": entry["train"].get("loss"),
             "exact_match": entry[VALIDATION]["exact_match"], "f1": entry[VALIDATION]["f1"]}
    if self.focused:
      point.update(train_openness=entry["train"].get("openness"),
                   validation_openness=entry[VALIDATION].get("openness"))
    return point

  def on_start(self, ctx: RunContext) -> None:
    """Records the config (a resumed run's was checked: `check_resume`)."""
    self.workdir = ctx.workdir
    super().on_start(ctx)

  def on_end(self, ctx: RunContext) -> dict:
    """{'results': {split: {exact_match, f1}}} of the best
    variables on validation and dev; dev answers to predictions.json."""
    best = ctx.best_variables()
    results = {}
    for split in (VALIDATION, DEV):
      if split in self.splits:
        results[split] = ctx.evaluate(split, best)
    final = DEV if DEV in self.splits else VALIDATION
    if self.is_main:
      write_json(os.path.join(ctx.workdir, PREDICTIONS_FILE), self.predictions[final],
                 indent=None)
    return {"results": results}
