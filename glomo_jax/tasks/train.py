"""Supervised training of the task models (IMDB, NLI) with early stopping.

`train_classifier` runs jitted Adam steps (gradient-norm clipping), evaluates
validation accuracy every `eval_every` steps, keeps the best parameters, stops
after `patience` evaluations without improvement, and finally evaluates the
best parameters on every evaluation split (IMDB 'test'; MNLI 'matched',
'mismatched').

Graphs (glomo 'embeddings' / 'rnn' variants) are model *inputs*: per batch and
per text field, a `graph_fn(word_lists, length) -> float [B, 2L, K, length,
length]` is called on the host (the frozen predictor runs there, or on the
accelerator in its own jitted call) and its numpy result is fed to the step;
the model also applies stop_gradient, so the predictor never receives a
gradient. Three ways to provide them (`train_classifier`'s ``graph_fn``):

* on the fly: a graph_fn, e.g. `predictor_graph_fn(predictor)` (through
  `glomo_jax.transfer.align.word_graphs`);
* memoised: `GraphCache(graph_fn)` computes each example's graph the first
  time it is needed and keeps it in memory (up to a bound);
* precomputed on disk: {split: {field: WordGraphCache}} from
  `precomputed_graphs` (`glomo_jax.transfer.cache.cached_word_graphs`, one
  cache per split and text field, indexed by the example's position).
"""
from __future__ import annotations

import functools
import logging
import time
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from glomo_jax.tasks.datasets import Split, TaskData, batch_order, make_batch
from glomo_jax.tasks.words import Vocabulary
from glomo_jax.train.metrics import Progress, format_eta
from glomo_jax.transfer.align import word_graphs
from glomo_jax.transfer.cache import cached_word_graphs

logger = logging.getLogger(__name__)

GraphFn = Callable[[Sequence[Sequence[str]], int], np.ndarray]


# ---- graphs ----------------------------------------------------------------------------
def fit_graphs(graphs: np.ndarray, length: int) -> np.ndarray:
  """[B, 2L, K, W, W] → [B, 2L, K, length, length]: zero-padded or cropped.

  Cropping is only exact when nothing beyond `length` carries weight, i.e.
  the texts have at most `length` words (then those rows/columns are padding).
  """
  graphs = np.asarray(graphs)
  w = graphs.shape[-1]
  if w == length:
    return graphs
  if w > length:
    return graphs[..., :length, :length]
  pad = [(0, 0)] * (graphs.ndim - 2) + [(0, length - w), (0, length - w)]
  return np.pad(graphs, pad)


def predictor_graph_fn(predictor, tokenizer=None) -> GraphFn:
  """graph_fn of an exported predictor (`glomo_jax.export.load_graph_predictor`).

  Word-level graphs come from `glomo_jax.transfer.align.word_graphs(predictor,
  tokenizer, word_lists, max_words)` (the predictor's own tokenizer by
  default), fitted to the batch's padded length.
  """
  tokenizer = tokenizer if tokenizer is not None else predictor.tokenizer

  def graph_fn(word_lists: Sequence[Sequence[str]], length: int) -> np.ndarray:
    graphs, _ = word_graphs(predictor, tokenizer, [list(w) for w in word_lists], length)
    return fit_graphs(np.asarray(graphs, np.float32), length)
  return graph_fn


def precomputed_graphs(root: str, predictor, data: TaskData, max_words: int, *,
                       splits: Sequence[str] | None = None, **options
                       ) -> dict[str, dict[str, Any]]:
  """On-disk word-graph caches of a task: {split: {field: WordGraphCache}}.

  Built (once per export, dataset and options; reused afterwards) with
  `glomo_jax.transfer.cache.cached_word_graphs(root, predictor,
  split.texts[field], max_words, **options)`. Train with the same max_words.
  """
  out: dict[str, dict[str, Any]] = {}
  for name in splits or list(data.splits):
    split = data.splits[name]
    out[name] = {f: cached_word_graphs(root, predictor, split.texts[f], max_words,
                                       **options) for f in data.text_fields}
  return out


class GraphCache:
  """Memoises per-example word graphs of a graph_fn.

  Keys are (split name, text field, example index); each example's graph is
  stored cropped to its own (cut) length n as [2L, K, n, n] in `dtype`. This
  is exact because a predictor's graphs of a text do not depend on the other
  texts of its batch or on padding (padding neither sends nor receives
  weight, BatchNorm runs on stored statistics). Once `max_bytes` are stored
  further graphs are computed but not kept.

  Attributes:
    graph_fn: the wrapped function.
    hits, misses: examples served from / computed into the cache.
  """

  def __init__(self, graph_fn: GraphFn, *, dtype=np.float32, max_bytes: int = 1 << 30):
    self.graph_fn = graph_fn
    self.dtype = np.dtype(dtype)
    self.max_bytes = max_bytes
    self.bytes = 0
    self.hits = self.misses = 0
    self._store: dict[tuple, np.ndarray] = {}

  def __len__(self) -> int:
    return len(self._store)

  def __call__(self, split: str, field: str, indices: Sequence[int],
               word_lists: Sequence[Sequence[str]], length: int) -> np.ndarray:
    """Graphs float32 [B, 2L, K, length, length] of a batch.

    indices: example positions in the split (-1 for padding rows, zeros).
    word_lists: the (cut) words of each row.
    """
    todo = [b for b, i in enumerate(indices)
            if i >= 0 and (split, field, int(i)) not in self._store]
    fresh: dict[int, np.ndarray] = {}
    if todo:
      # computed at the batch's padded shape (missing rows only, the others
      # empty): one shape per batch shape for the predictor to compile
      rows = [word_lists[b] for b in todo] + [[]] * (len(indices) - len(todo))
      computed = fit_graphs(self.graph_fn(rows, length), length)
      self.misses += len(todo)
      for row, b in enumerate(todo):
        n = len(word_lists[b])
        g = np.ascontiguousarray(computed[row, ..., :n, :n], dtype=self.dtype)
        fresh[b] = g
        if self.bytes + g.nbytes <= self.max_bytes:
          self._store[(split, field, int(indices[b]))] = g
          self.bytes += g.nbytes
    out = None
    for b, i in enumerate(indices):
      if i < 0:
        continue
      g = fresh.get(b)
      if g is None:
        g = self._store[(split, field, int(i))]
        self.hits += 1
      if out is None:
        out = np.zeros((len(indices),) + g.shape[:2] + (length, length), np.float32)
      n = g.shape[-1]
      out[b, ..., :n, :n] = g
    if out is None:
      raise ValueError("a batch of padding rows only has no graphs")
    return out


# ---- training ----------------------------------------------------------------------------
def needs_graphs(model) -> bool:
  """Whether the model reads predictor graphs (glomo 'embeddings' / 'rnn')."""
  return getattr(model, "glomo", "none") in ("embeddings", "rnn")


def model_inputs(batch: Mapping[str, Any], text_fields: Sequence[str],
                 graphs: Mapping[str, np.ndarray] | None = None) -> dict[str, Any]:
  """The model's keyword inputs: {f, f_mask (, f_graphs)} for each text field."""
  inputs = {}
  for f in text_fields:
    inputs[f] = batch[f]
    inputs[f + "_mask"] = batch[f + "_mask"]
    if graphs is not None:
      inputs[f + "_graphs"] = graphs[f]
  return inputs


def _from_disk_cache(cache, split_name: str, field: str, batch) -> np.ndarray:
  """[B, 2L, K, W, W] of a batch from a WordGraphCache (rows by split position)."""
  index = np.asarray(batch["index"])
  real = np.flatnonzero(index >= 0)
  length = batch[field].shape[1]
  cut = batch[field + "_mask"].sum(-1)
  if len(cache) <= int(index.max(initial=-1)):
    raise ValueError(f"the graph cache of {split_name}/{field} holds {len(cache)} "
                     f"examples; the batch asks for example {int(index.max())}")
  stored = np.asarray(cache.lengths)[index[real]]
  if not np.array_equal(stored, cut[real]):
    raise ValueError(f"the graph cache of {split_name}/{field} does not match the data "
                     f"(words per example {stored.tolist()} vs {cut[real].tolist()}): "
                     "another split order, or max_words differs from the cache's "
                     f"{getattr(cache, 'max_words', '?')}")
  graphs, _ = cache.get(index[real])
  graphs = fit_graphs(graphs, length)
  out = np.zeros((len(index),) + graphs.shape[1:], np.float32)
  out[real] = graphs
  return out


def _batch_graphs(graph_fn, split_name: str, batch, text_fields):
  if graph_fn is None:
    return None
  out = {}
  for f in text_fields:
    length = batch[f].shape[1]
    if isinstance(graph_fn, Mapping):
      if split_name not in graph_fn or f not in graph_fn[split_name]:
        raise ValueError(f"no precomputed graphs for split {split_name!r} field {f!r}")
      out[f] = _from_disk_cache(graph_fn[split_name][f], split_name, f, batch)
    elif isinstance(graph_fn, GraphCache):
      out[f] = graph_fn(split_name, f, batch["index"], batch[f + "_words"], length)
    else:
      # padding rows have no words: their graphs are zero
      out[f] = fit_graphs(graph_fn(batch[f + "_words"], length), length).astype(np.float32)
  return out


def _loss_and_accuracy(logits, labels, weights):
  losses = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
  total = jnp.maximum(jnp.sum(weights), 1.0)
  correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
  return jnp.sum(losses * weights) / total, jnp.sum(correct * weights) / total


@functools.lru_cache(maxsize=32)
def _correct_fn(model, compiler_options: tuple | None) -> Callable:
  """Jitted (params, inputs, labels, weights) → weighted count of right answers;
  one per (model, compiler options), so repeated evaluations compile once."""
  @functools.partial(jax.jit, compiler_options=dict(compiler_options or ()) or None)
  def correct(params, inputs, labels, weights):
    logits = model.apply({"params": params}, **inputs, train=False)
    return jnp.sum((jnp.argmax(logits, -1) == labels).astype(jnp.float32) * weights)
  return correct


def _options_key(compiler_options: Mapping[str, Any] | None) -> tuple | None:
  return tuple(sorted(compiler_options.items())) if compiler_options else None


def _train_fn(model, optimizer, compiler_options: Mapping[str, Any] | None) -> Callable:
  def loss_fn(params, inputs, labels, weights, rng):
    logits = model.apply({"params": params}, **inputs, train=True, rngs={"dropout": rng})
    return _loss_and_accuracy(logits.astype(jnp.float32), labels, weights)

  @functools.partial(jax.jit, compiler_options=dict(compiler_options or {}) or None)
  def train_step(params, opt_state, inputs, labels, weights, rng):
    (loss, accuracy), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        params, inputs, labels, weights, rng)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, accuracy
  return train_step


def evaluate(model, params, split: Split, vocab: Vocabulary, text_fields: Sequence[str],
             *, batch_size: int = 64, max_words: int | None = None,
             length_multiple: int = 8, graph_fn=None, split_name: str = "eval",
             compiler_options: Mapping[str, Any] | None = None) -> float:
  """Accuracy of `params` on `split` (every example counted once).

  Batches of `batch_size` (the last one padded with weight-0 rows); graphs
  from `graph_fn` as in `train_classifier` (`split_name` keys caches).
  """
  if len(split) == 0:
    return float("nan")
  key = _options_key(compiler_options)
  try:
    correct_fn = _correct_fn(model, key)
  except TypeError:  # an unhashable model field (e.g. a list): compile afresh
    correct_fn = _correct_fn.__wrapped__(model, key)
  correct = 0.0
  for indices in batch_order(split, batch_size):
    batch = make_batch(split, indices, vocab, max_words=max_words,
                       length_multiple=length_multiple, batch_size=batch_size)
    graphs = _batch_graphs(graph_fn, split_name, batch, text_fields)
    correct += float(correct_fn(params, model_inputs(batch, text_fields, graphs),
                                batch["label"], batch["weight"]))
  return correct / len(split)


def train_classifier(model, data: TaskData, vocab: Vocabulary, *,
                     learning_rate: float = 4e-4, clip_norm: float | None = 10.0,
                     optimizer: optax.GradientTransformation | None = None,
                     batch_size: int = 32, eval_batch_size: int | None = None,
                     max_words: int | None = None, epochs: float | None = None,
                     steps: int | None = None, eval_every: int | None = None,
                     patience: int | None = None, seed: int = 0,
                     graph_fn: GraphFn | GraphCache | Mapping | None = None,
                     length_multiple: int = 8, bucket_batches: int = 0,
                     params: Any = None, log: Callable[[str], None] | None = None,
                     compiler_options: Mapping[str, Any] | None = None,
                     progress_every_s: float = 60.0) -> dict[str, Any]:
  """Trains `model` on data['train'], early-stopped on data['validation'].

  Args:
    model: IMDBClassifier or ESIM (any linen module taking, per text field f,
      keywords f, f_mask (and f_graphs when it reads graphs) and `train`).
    data: the task's splits (`datasets.load_task`).
    vocab: word → id (its size must match the model's vocab_size).
    learning_rate, clip_norm: Adam's step size; global gradient-norm clip
      (None: none). Adam without weight decay leaves zero-gradient (frozen)
      parameters exactly unchanged.
    optimizer: replaces Adam + clipping altogether.
    batch_size, eval_batch_size: training / evaluation batch (eval default
      2 × batch_size; short eval batches are padded with weight-0 rows).
    max_words: cut every text to this many words (None: no cut).
    epochs / steps: training length; `steps` wins; default 1 epoch. Training
      batches are full (drop remainder) unless the split is smaller than B.
    eval_every: steps between validation evaluations (default: one epoch);
      the last step is always evaluated.
    patience: stop after this many evaluations without a better validation
      accuracy (None: never stop early).
    seed: parameter init, dropout and shuffling.
    graph_fn: where graphs come from (module docstring): a function (word
      lists, length) → graphs [B, 2L, K, length, length], a GraphCache, or
      {split: {field: WordGraphCache}} (`precomputed_graphs`); required iff
      the model reads graphs.
    length_multiple: round padded lengths up to a multiple (fewer compiles).
    bucket_batches: length bucketing window (see datasets.batch_order).
    params: start from these parameters instead of a fresh init.
    log: called with one line per evaluation (also logged at INFO).
    progress_every_s: between evaluations, a progress line (steps/s, ETA,
      running loss, compiled step shapes) at most this often (INFO).
    compiler_options: passed to jax.jit for the train and eval steps (e.g.
      {'xla_backend_optimization_level': 0} compiles faster on CPU, for tests).

  Returns:
    {'results': {'validation': best validation accuracy, <eval split>:
     accuracy of the best parameters, ...}, 'best_step', 'steps' (taken),
     'stopped_early', 'wall_time_s', 'curves': [{'step', 'train_loss',
     'train_accuracy', 'validation_accuracy', 'elapsed_s'}, ...],
     'params': the best parameters (numpy pytree)}.
  """
  start = time.time()
  fields = data.text_fields
  train = data.splits["train"]
  if len(train) == 0:
    raise ValueError("empty training split")
  if needs_graphs(model) and graph_fn is None:
    raise ValueError(f"model variant glomo={model.glomo!r} reads predictor graphs: "
                     "pass graph_fn (or a GraphCache)")
  if not needs_graphs(model):
    graph_fn = None
  if getattr(model, "vocab_size", len(vocab)) != len(vocab):
    raise ValueError(f"model vocab_size {model.vocab_size} != vocabulary size {len(vocab)}")
  eval_batch_size = eval_batch_size or 2 * batch_size
  drop = len(train) >= batch_size
  per_epoch = len(batch_order(train, batch_size, drop_remainder=drop))
  if steps is None:
    steps = max(1, int(round((epochs if epochs is not None else 1) * per_epoch)))
  eval_every = eval_every or per_epoch
  optimizer = optimizer or optax.chain(
      *([optax.clip_by_global_norm(clip_norm)] if clip_norm else []),
      optax.adam(learning_rate))
  train_step = _train_fn(model, optimizer, compiler_options)

  def say(line: str) -> None:
    logger.info("%s", line)
    if log is not None:
      log(line)

  def epoch_batches(epoch):
    for indices in batch_order(train, batch_size, shuffle=True, seed=seed, epoch=epoch,
                               drop_remainder=drop, bucket_batches=bucket_batches):
      yield make_batch(train, indices, vocab, max_words=max_words,
                       length_multiple=length_multiple)

  key = jax.random.PRNGKey(seed)
  init_key, dropout_key = jax.random.split(key)
  epoch = 0
  stream = epoch_batches(epoch)
  first = next(stream)
  if params is None:
    graphs = _batch_graphs(graph_fn, "train", first, fields)
    init = jax.jit(functools.partial(model.init, train=False),
                   compiler_options=dict(compiler_options or {}) or None)
    params = init({"params": init_key}, **model_inputs(first, fields, graphs))["params"]
  opt_state = optimizer.init(params)

  def validation_accuracy(p):
    return evaluate(model, p, data.splits["validation"], vocab, fields,
                    batch_size=eval_batch_size, max_words=max_words,
                    length_multiple=length_multiple, graph_fn=graph_fn,
                    split_name="validation", compiler_options=compiler_options)

  curves: list[dict] = []
  best = (-1.0, 0, jax.device_get(params))
  since_best = 0
  losses, accuracies = [], []
  stopped_early = False
  batch = first
  step = 0
  progress = Progress(0, steps, tokens_per_step=0)
  last_progress = time.perf_counter()
  while step < steps:
    if batch is None:
      batch = next(stream, None)
      if batch is None:
        epoch += 1
        stream = epoch_batches(epoch)
        continue
    graphs = _batch_graphs(graph_fn, "train", batch, fields)
    params, opt_state, loss, accuracy = train_step(
        params, opt_state, model_inputs(batch, fields, graphs), batch["label"],
        batch["weight"], jax.random.fold_in(dropout_key, step))
    losses.append(loss)
    accuracies.append(accuracy)
    batch = None
    step += 1
    if (time.perf_counter() - last_progress >= progress_every_s and step % eval_every
        and step != steps):
      rates = progress.update(step)
      shapes = getattr(train_step, "_cache_size", lambda: "?")()
      logger.info("step %d/%d: %.2f steps/s, loss %.4f, ETA %s (%s compiled step shapes)",
                  step, steps, rates["steps_per_s"], float(np.mean(jax.device_get(losses))),
                  format_eta(rates["eta_s"]), shapes)
      last_progress = time.perf_counter()
    if step % eval_every == 0 or step == steps:
      val = validation_accuracy(params)
      point = {"step": step, "train_loss": float(np.mean(jax.device_get(losses))),
               "train_accuracy": float(np.mean(jax.device_get(accuracies))),
               "validation_accuracy": val, "elapsed_s": time.time() - start}
      curves.append(point)
      losses, accuracies = [], []
      if val > best[0]:
        best = (val, step, jax.device_get(params))
        since_best = 0
      else:
        since_best += 1
      say(f"step {step}/{steps} epoch {epoch} loss {point['train_loss']:.4f} "
          f"train acc {point['train_accuracy']:.4f} val acc {val:.4f} "
          f"(best {best[0]:.4f} @ {best[1]})")
      progress.restart(step)
      last_progress = time.perf_counter()
      if patience is not None and since_best >= patience:
        stopped_early = True
        break

  best_val, best_step, best_params = best
  results = {"validation": best_val}
  for name in data.eval_splits:
    results[name] = evaluate(model, best_params, data.splits[name], vocab, fields,
                             batch_size=eval_batch_size, max_words=max_words,
                             length_multiple=length_multiple, graph_fn=graph_fn,
                             split_name=name, compiler_options=compiler_options)
  wall = time.time() - start
  say("results: " + ", ".join(f"{k} {v:.4f}" for k, v in results.items())
      + f" (best step {best_step}, {wall:.1f} s)")
  return {"results": results, "best_step": best_step, "steps": step,
          "stopped_early": stopped_early, "wall_time_s": wall, "curves": curves,
          "params": best_params}
