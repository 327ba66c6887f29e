"""The generic train step (pure; the loop jits it with shardings)."""
from __future__ import annotations

import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import optax

from glomo_jax.train.state import TrainState


def step_rngs(state: TrainState, streams: Sequence[str]) -> dict:
  """Per-step rngs {stream: key}: the run's key with the step folded in, split
  once per stream (resume-exact)."""
  key = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)
  return dict(zip(streams, jax.random.split(key, len(streams))))


def create_state(task, tx: optax.GradientTransformation, rng: jax.Array) -> TrainState:
  """The initial state: `task.init_variables` from the first half of `rng`,
  the run's per-step key from the second."""
  params_rng, run_rng = jax.random.split(rng)
  return TrainState.create(task.init_variables(params_rng), tx, run_rng)


def state_creator(task, tx: optax.GradientTransformation):
  """`create_state` for (task, tx) as a function of the rng, jitted to be
  inlined into the programs that call it: JAX keeps its first trace (e.g. a
  `jax.eval_shape` for the state's shapes), and `init_state`'s compile reuses
  that trace instead of tracing the initialisation again."""
  return jax.jit(functools.partial(create_state, task, tx), inline=True)


def init_state(create, rng: jax.Array, out_shardings=None,
               compiler_options: dict | None = None) -> TrainState:
  """`create(rng)` (`state_creator(task, tx)`) jitted with `out_shardings`
  and compiled with `compiler_options`
  (`glomo_jax.tuning.compiler_options(..., one_off=True)`)."""
  jitted = jax.jit(create) if out_shardings is None else jax.jit(create, out_shardings=out_shardings)
  return jitted.lower(rng).compile(compiler_options=compiler_options)(rng)


def train_step(task, tx: optax.GradientTransformation, state: TrainState, batch: dict):
  """One update of `task.loss` on a batch.

  Returns (new state, metrics): the task's metrics plus grad_norm (before
  clipping), param_norm (after the update) and lr_scale.
  """
  rngs = step_rngs(state, task.rng_streams)

  def loss_fn(params):
    loss, metrics, batch_stats = task.loss(
        {"params": params, "batch_stats": state.batch_stats}, batch, rngs)
    return loss, (metrics, batch_stats)

  (_, (metrics, batch_stats)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  updates = jax.tree_util.tree_map(lambda u: u * state.lr_scale.astype(u.dtype), updates)
  params = optax.apply_updates(state.params, updates)
  metrics = dict(metrics, grad_norm=optax.global_norm(grads),
                 param_norm=optax.global_norm(params), lr_scale=state.lr_scale)
  new_state = state.replace(step=state.step + 1, params=params, batch_stats=batch_stats,
                            opt_state=opt_state)
  return new_state, metrics


def jitted_train_step(task, tx: optax.GradientTransformation):
  """`train_step` for (task, tx) as a function of (state, batch), jitted to be
  inlined into the programs that call it: JAX keeps its first trace (e.g.
  `metric_shapes`), and a program that calls it (`accumulating_step`) reuses
  that trace instead of tracing the model once more."""
  return jax.jit(functools.partial(train_step, task, tx), inline=True)


def accumulating_step(step, carry, batch: dict):
  """`step` (`jitted_train_step`) that adds its metrics to running sums on
  the device, so a loop fetches them only when it reports.

  carry: (state, sums), sums with the structure of the step's metrics
  (`metric_shapes`; zeros at the start of an interval). Returns (new state,
  sums + metrics).
  """
  state, sums = carry
  state, metrics = step(state, batch)
  return state, jax.tree_util.tree_map(jnp.add, sums, metrics)


def metric_shapes(step, state, batch: dict):
  """The shapes and dtypes of `step`'s (`jitted_train_step`) metrics for
  (abstract) state and batch, traced without computing."""
  return jax.eval_shape(step, state, batch)[1]
