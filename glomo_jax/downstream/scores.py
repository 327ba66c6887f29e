"""Classification scores as sums: the training loss and metrics of a batch,
and evaluation over a whole split (sums over its batches, then one division,
so every example counts once whatever the batches' padding)."""
from __future__ import annotations

from typing import Callable, Iterable

import jax
import jax.numpy as jnp
import optax

SUMS = ("loss_sum", "correct", "count")


def classification_sums(logits: jax.Array, labels: jax.Array, weights: jax.Array) -> dict:
  """{'loss_sum', 'correct', 'count'} of a batch: the weighted sums of the
  cross-entropy and of the correct argmaxes, and the weights' sum.

  logits: [B, C] (computed in float32); labels: int [B]; weights: [B] (0 for
  padding rows)."""
  losses = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels)
  correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
  return {"loss_sum": jnp.sum(losses * weights), "correct": jnp.sum(correct * weights),
          "count": jnp.sum(weights)}


def mean_loss(sums: dict) -> tuple[jax.Array, dict]:
  """(mean loss, {'loss', 'accuracy'}) of a training batch's sums."""
  count = jnp.maximum(sums["count"], 1.0)
  loss = sums["loss_sum"] / count
  return loss, {"loss": loss, "accuracy": sums["correct"] / count}


def summed_accuracy(batches: Iterable[dict], run_eval: Callable[[dict], dict]) -> dict:
  """Accuracy and mean loss over every example of a split: `run_eval` (the
  loop's eval step, returning `classification_sums`) on each batch, the sums
  added, then divided. {'accuracy', 'loss', 'examples'} (NaN for no example)."""
  sums = dict.fromkeys(SUMS, 0.0)
  for batch in batches:
    out = run_eval(batch)
    for k in sums:
      sums[k] += float(out[k])
  if not sums["count"]:
    return {"accuracy": float("nan"), "loss": float("nan"), "examples": 0.0}
  return {"accuracy": sums["correct"] / sums["count"],
          "loss": sums["loss_sum"] / sums["count"], "examples": sums["count"]}
