"""Train and eval steps (pure functions; the trainer jits them with shardings)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from glomo_jax.models.glomo import GLoMo
from glomo_jax.train.state import TrainState


def step_rngs(state: TrainState) -> dict:
  """Per-step rngs: the run's key with the step folded in (resume-exact)."""
  key = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)
  sample, dropout = jax.random.split(key)
  return {"sample": sample, "dropout": dropout}


def train_step(model: GLoMo, tx: optax.GradientTransformation, state: TrainState,
               batch: dict):
  """One update. batch: tokens int32 [B, T], optional mask [B, T].

  Returns (new state, metrics): loss, loss_fw, loss_bw, tokens, grad_norm
  (before clipping), param_norm (after the update), lr.
  """
  mask = batch.get("mask")

  def loss_fn(params):
    variables = {"params": params}
    if state.batch_stats:
      variables["batch_stats"] = state.batch_stats
    (loss, metrics), updates = model.apply(
        variables, batch["tokens"], mask, train=True, rngs=step_rngs(state),
        mutable=["batch_stats"])
    return loss, (metrics, updates.get("batch_stats", state.batch_stats))

  (_, (metrics, batch_stats)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  updates = jax.tree_util.tree_map(lambda u: u * state.lr_scale.astype(u.dtype), updates)
  params = optax.apply_updates(state.params, updates)
  metrics = dict(metrics, grad_norm=optax.global_norm(grads),
                 param_norm=optax.global_norm(params), lr_scale=state.lr_scale)
  new_state = state.replace(step=state.step + 1, params=params, batch_stats=batch_stats,
                            opt_state=opt_state)
  return new_state, metrics


def eval_step(model: GLoMo, state: TrainState, batch: dict) -> dict:
  """Loss sums of one held-out batch (BatchNorm running statistics), for
  accumulation: {'loss_sum': Σ CE·tokens, 'tokens': count}."""
  loss, metrics = model.apply(state.variables, batch["tokens"], batch.get("mask"),
                              train=False, rngs=step_rngs(state))
  return {"loss_sum": loss * metrics["tokens"], "tokens": metrics["tokens"]}
