"""The training step as the benchmark builds, compiles and times it.

The step is the library's: `glomo_jax.train.step.train_step` of a
`glomo_jax.pretraining.GLoMoObjective` with the peer's optimiser (global-norm
clip 0.25, SGD lr 8, momentum 0.2), jitted with the state donated. What the
CPU tuning (`glomo_jax.tuning`, on when GLOMO_JAX_CPU_TUNING=1) changes is
chosen here as the training loop chooses it: the split-batch affinity scores,
the one-off compiler options of the state's initialisation and the release of
free heap pages after set-up.
"""
from __future__ import annotations

import functools
import time

from stepbench.configs import CLIP, FLOAT32_MATMUL, LR, MOMENTUM
from stepbench.machine import current_rss_mb


def set_float32_matmul(args) -> None:
  """Applies --float32_matmul (jax_default_matmul_precision) in a worker."""
  if args.float32_matmul:
    import jax
    jax.config.update("jax_default_matmul_precision", FLOAT32_MATMUL[args.float32_matmul][0])


def objective(args, mc):
  """(GLoMoObjective of ModelConfig `mc` at window length args.bptt, its
  optimiser), the affinity scores split by batch where the tuning says so."""
  import jax

  from glomo_jax import tuning
  from glomo_jax.pretraining import GLoMoObjective
  from glomo_jax.train.optimizer import make_optimizer
  tx = make_optimizer("sgd", LR, momentum=MOMENTUM, clip_norm=CLIP)
  task = GLoMoObjective(mc, args.bptt, tx,
                        split_batch_scores=tuning.split_batch_scores(jax.devices()))
  return task, tx


def init_state(task, tx, seed: int):
  """The train state from PRNGKey(seed), compiled as the training loop does
  (`tuning.compiler_options(platform, one_off=True)`)."""
  import jax

  from glomo_jax import tuning
  from glomo_jax.train.step import init_state as build
  from glomo_jax.train.step import state_creator
  options = tuning.compiler_options(jax.devices()[0].platform, one_off=True)
  return build(state_creator(task, tx), jax.random.PRNGKey(seed), compiler_options=options)


def compiled_step(args, mc, phases: dict | None = None):
  """(train state, compiled train_step, init seconds, lower+compile seconds)
  for ModelConfig `mc` at the batch shape [args.bsz, args.bptt].

  In the training loop's order: the step is compiled from the state's shapes
  first, the heap's free pages go back to the system (with the tuning on),
  and only then is the state built. `phases`, if given, gets the resident
  set (MiB) before compiling, after compiling, after the release and with
  the state built.
  """
  import jax
  import jax.numpy as jnp

  from glomo_jax import tuning
  from glomo_jax.train.step import create_state, train_step
  phases = {} if phases is None else phases
  task, tx = objective(args, mc)
  spec = {"tokens": jax.ShapeDtypeStruct((args.bsz, args.bptt), jnp.int32)}
  shapes = jax.eval_shape(functools.partial(create_state, task, tx),
                          jax.random.PRNGKey(args.seed))
  phases["before_compile"] = round(current_rss_mb(), 1)
  t0 = time.perf_counter()
  compiled = jax.jit(functools.partial(train_step, task, tx), donate_argnums=(0,)).lower(
      shapes, spec).compile()
  compile_s = time.perf_counter() - t0
  phases["after_compile"] = round(current_rss_mb(), 1)
  tuning.release_free_memory()
  phases["after_release"] = round(current_rss_mb(), 1)
  t0 = time.perf_counter()
  state = init_state(task, tx, args.seed)
  jax.block_until_ready(state)
  phases["with_state"] = round(current_rss_mb(), 1)
  return state, compiled, time.perf_counter() - t0, compile_s


def timed_step(args, mc, compiled):
  """The step as this benchmark times it: (state, fetch) -> (state, loss).
  Draws a random [bsz, bptt] int32 batch on the host, sends it to the
  device, runs the compiled step and, when `fetch`, fetches the loss (which
  waits for the device; otherwise loss is None and nothing waits)."""
  import jax
  import numpy as np
  host = np.random.default_rng(args.seed + 1)

  def one_step(state, fetch: bool = True):
    tokens = host.integers(0, mc.vocab_size, (args.bsz, args.bptt), dtype=np.int32)
    state, metrics = compiled(state, {"tokens": jax.device_put(tokens)})
    return state, (float(metrics["loss"]) if fetch else None)
  return one_step


def timed_block(one_step, state, steps: int):
  """`steps` steps with the loss fetched after the last only (the training
  loop's steady state; 1: the peer's step, fetched every step): (state,
  seconds per step, the last loss)."""
  t0 = time.perf_counter()
  for k in range(steps):
    state, loss = one_step(state, fetch=k == steps - 1)
  return state, (time.perf_counter() - t0) / steps, loss
