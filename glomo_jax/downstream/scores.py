"""Classification scores as sums: the training loss and metrics of a batch,
and evaluation over a whole split (sums over its batches, then one division,
so every example counts once whatever the batches' padding)."""
from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

SUMS = ("loss_sum", "correct", "count")


def classification_sums(logits: jax.Array, labels: jax.Array, weights: jax.Array) -> dict:
  """{'loss_sum', 'correct', 'count'} of a batch: the weighted sums of the
  cross-entropy and of the correct argmaxes, and the weights' sum.

  logits: [B, C] (computed in float32); labels: int [B]; weights: [B] (0 for
  padding rows). Or one class per position (e.g. per word): logits [B, W,
  C], labels int [B, W] with a negative label where there is none (padding
  words, `text.batching.word_targets`), each row's weight counting for each
  of its labelled positions: the sums run over positions."""
  if jnp.ndim(labels) > 1:
    labelled = (labels >= 0).astype(jnp.float32)
    weights = labelled * jnp.reshape(weights, jnp.shape(weights) + (1,) * (jnp.ndim(labels) - 1))
    labels = jnp.maximum(labels, 0)
  losses = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels)
  correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
  return {"loss_sum": jnp.sum(losses * weights), "correct": jnp.sum(correct * weights),
          "count": jnp.sum(weights)}


def mean_loss(sums: dict) -> tuple[jax.Array, dict]:
  """(mean loss, {'loss', 'accuracy'}) of a training batch's sums."""
  count = jnp.maximum(sums["count"], 1.0)
  loss = sums["loss_sum"] / count
  return loss, {"loss": loss, "accuracy": sums["correct"] / count}


def summed_accuracy(batches: Iterable[dict], run_eval: Callable[[dict], dict],
                    extra: dict | None = None) -> dict:
  """Accuracy and mean loss over every example of a split: `run_eval` (the
  loop's eval step, returning `classification_sums`) on each batch, the sums
  added, then divided. {'accuracy', 'loss', 'examples'} (NaN for no example).
  extra: a dict that receives the sums of the eval step's other outputs
  (e.g. `group_sums`' arrays)."""
  sums = dict.fromkeys(SUMS, 0.0)
  for batch in batches:
    out = run_eval(batch)
    for k in sums:
      sums[k] += float(out[k])
    if extra is not None:
      for k in set(out) - set(SUMS):
        extra[k] = extra.get(k, 0.0) + np.asarray(out[k], np.float64)
  if not sums["count"]:
    return {"accuracy": float("nan"), "loss": float("nan"), "examples": 0.0}
  return {"accuracy": sums["correct"] / sums["count"],
          "loss": sums["loss_sum"] / sums["count"], "examples": sums["count"]}


@dataclasses.dataclass(frozen=True)
class ScoreGroup:
  """The examples whose `info[key]` lies in [low, high] (high None: no upper
  bound), scored apart under `name` (e.g. 'attractors_1+')."""
  name: str
  key: str
  low: int
  high: int | None = None

  def contains(self, values: np.ndarray) -> np.ndarray:
    values = np.asarray(values)
    return (values >= self.low) & (values <= (np.inf if self.high is None else self.high))


def group_membership(groups: Sequence[ScoreGroup], info: Mapping[str, np.ndarray] | None,
                     index: np.ndarray) -> np.ndarray:
  """float32 [B, G]: 1 where the example at index[b] (−1: padding row, in no
  group) is in groups[g]."""
  index = np.asarray(index)
  out = np.zeros((len(index), len(groups)), np.float32)
  real = index >= 0
  for g, group in enumerate(groups):
    if info is not None and group.key in info:
      out[real, g] = group.contains(np.asarray(info[group.key])[index[real]])
  return out


def group_sums(logits: jax.Array, labels: jax.Array, weights: jax.Array,
               groups: jax.Array) -> dict:
  """{'group_correct', 'group_count'}: float32 [G] weighted sums of correct
  argmaxes and of weights over each group's rows. groups: [B, G] membership."""
  correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32) * weights
  return {"group_correct": correct @ groups, "group_count": weights @ groups}


def group_accuracy(groups: Sequence[ScoreGroup], sums: Mapping[str, np.ndarray]) -> dict:
  """{'accuracy/<name>', 'examples/<name>'} of each group with examples."""
  out = {}
  for g, group in enumerate(groups):
    count = float(sums["group_count"][g])
    if count:
      out[f"accuracy/{group.name}"] = float(sums["group_correct"][g]) / count
      out[f"examples/{group.name}"] = count
  return out
