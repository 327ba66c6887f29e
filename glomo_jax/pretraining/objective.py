"""GLoMo's pretraining objective as the model side of a loop task.

`GLoMoObjective` holds what the training loop needs from a model: its
variables, its optimiser, its loss on a batch of windows, and the held-out
loss sums (the model half of `glomo_jax.train.Task`; no data). `PretrainingTask` adds the corpus; the step benchmark and the
sharding tests train the objective on batches of their own with
`glomo_jax.train.create_state` and `train_step`.
"""
from __future__ import annotations

from typing import Callable, Mapping

import jax
import jax.numpy as jnp
import optax

from glomo_jax.config import ModelConfig
from glomo_jax.eval.locality import locality_sums
from glomo_jax.models.glomo import GLoMo

GraphFn = Callable[[Mapping[str, jax.Array]], jax.Array]


class GLoMoObjective:
  """GLoMo on windows of `bptt` tokens; batches {'tokens', 'mask'} int32 [B, T].

  Args:
    model_config: the model (its vocab_size is the embedding's).
    bptt: window length T (the variables are initialised at that length).
    tx: the optimiser.
    split_batch_scores: `GLoMo.split_batch_scores` (`glomo_jax.tuning`).
    with_graphs: `eval_step` also returns the forward graphs.
    fixed_graphs: optional batch -> graphs [B, 2L, K, T, T] that replace the
      graph predictor's in the loss and the evaluation
      (`glomo_jax.pretraining.fixed_graphs`).

  Attributes:
    model, eval_model: GLoMo with the configured sampled positions, and with
      every position decoded (held-out loss).
  """
  rng_streams = ("sample", "dropout")

  def __init__(self, model_config: ModelConfig, bptt: int, tx: optax.GradientTransformation,
               *, split_batch_scores: bool = False, with_graphs: bool = False,
               fixed_graphs: GraphFn | None = None):
    self.model_config, self.bptt, self.tx, self.with_graphs = model_config, bptt, tx, with_graphs
    self.fixed_graphs = fixed_graphs
    self.model = GLoMo(model_config, split_batch_scores)
    self.eval_model = GLoMo(model_config.replace(sample_positions=0), split_batch_scores)

  def init_variables(self, rng):
    tokens = jnp.zeros((1, self.bptt), jnp.int32)
    everywhere = jnp.arange(self.bptt - self.model_config.context_length)
    return self.model.init(rng, tokens, train=False, positions=(everywhere, everywhere))

  def optimizer(self):
    return self.tx

  def loss(self, variables, batch, rngs):
    graphs = None if self.fixed_graphs is None else self.fixed_graphs(batch)
    (loss, metrics), updates = self.model.apply(
        variables, batch["tokens"], batch.get("mask"), train=True, rngs=rngs,
        mutable=["batch_stats"], graphs=graphs)
    return loss, metrics, updates.get("batch_stats", variables["batch_stats"])

  def eval_step(self, variables, batch):
    """Loss sums (running BatchNorm statistics, every position); the rows
    with weight, 'live_rows' [2L, K] (of real target tokens, per layer and
    head, summed over the batch) out of 'real_rows' (real tokens), and with
    BatchNorm's batch statistics as in training, 'live_rows_batch_stats';
    the graphs' locality sums ('locality': `glomo_jax.eval.locality`);
    and, with `with_graphs`, the forward graphs [B, L, K, T, T]."""
    tokens, mask = batch["tokens"], batch.get("mask")
    rngs = {name: jax.random.PRNGKey(0) for name in self.rng_streams}  # nothing is drawn
    fixed = None if self.fixed_graphs is None else self.fixed_graphs(batch)
    loss, metrics = self.eval_model.apply(variables, tokens, mask, train=False, rngs=rngs,
                                          graphs=fixed)
    out = {"loss_sum": loss * metrics["tokens"], "tokens": metrics["tokens"]}
    real = (jnp.ones_like(tokens) if mask is None else mask).astype(bool)     # [B, T]

    def live_rows(g):
      live = (g.sum(-1) > 0.5) & real[:, None, None, :]                        # [B, 2L, K, T]
      return live.sum(axis=(0, 3)).astype(jnp.float32)
    if fixed is None:
      graphs = self.eval_model.apply(variables, tokens, mask, method=GLoMo.graphs)
      if self.model_config.norm == "batch":
        batch_graphs, _ = self.eval_model.apply(variables, tokens, mask, train=True,
                                                method=GLoMo.graphs, rngs=rngs,
                                                mutable=["batch_stats"])
        out["live_rows_batch_stats"] = live_rows(batch_graphs)
    else:
      graphs = fixed
    out["live_rows"] = live_rows(graphs)
    out["real_rows"] = real.sum().astype(jnp.float32)
    out["locality"] = locality_sums(graphs, real)
    if self.with_graphs:
      out["graphs"] = graphs[:, :self.model_config.num_graph_layers]
    return out
