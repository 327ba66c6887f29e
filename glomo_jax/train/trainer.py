"""The pretraining loop: corpus → tokenizer → windows → sharded steps →
checkpoints → exported graph predictor.

`train_and_evaluate(config, workdir)` is the whole run. Restore order:
a checkpoint already in `workdir` resumes the run exactly (parameters,
optimiser state, step, rng, plateau state and the data iterator's position);
otherwise it starts from scratch. The tokenizer is saved in the workdir on the
first run and reused by every resume and by the export.
"""
from __future__ import annotations

import functools
import json
import logging
import math
import os
import signal
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from glomo_jax.config import ModelConfig
from glomo_jax.data import CorpusSpec, Tokenizer, pretraining_data
from glomo_jax.data.corpus import iter_documents
from glomo_jax.data.synthetic import vocabulary as synthetic_vocabulary
from glomo_jax.data.tokenizer import train_tokenizer, train_word_tokenizer
from glomo_jax.eval.arcs import ArcAccumulator
from glomo_jax.host_memory import release_free_memory
from glomo_jax.models.glomo import GLoMo
from glomo_jax.train.checkpoint import Checkpointer
from glomo_jax.train.config import TrainConfig
from glomo_jax.train.metrics import MetricWriter, Progress, format_eta
from glomo_jax.train.optimizer import PlateauRule, make_optimizer
from glomo_jax.train.sharding import batch_sharding, make_mesh, replicated, state_shardings
from glomo_jax.train.state import TrainState
from glomo_jax.train.step import eval_step, train_step

logger = logging.getLogger("glomo_jax.train")

TOKENIZER_FILE = "tokenizer.model"


class NonFiniteLossError(FloatingPointError):
  """The loss or the parameters stopped being finite; the run was stopped."""


# ---- tokenizer ---------------------------------------------------------------
def prepare_tokenizer(config: TrainConfig, workdir: str) -> Tokenizer:
  """The run's tokenizer: the one saved in the workdir, else the configured
  file, else trained on a sample of the corpus; saved in the workdir."""
  path = os.path.join(workdir, TOKENIZER_FILE)
  if os.path.exists(path):
    return Tokenizer.load(path)
  spec = CorpusSpec.from_dict(config.corpus)
  if config.tokenizer_path:
    tokenizer = Tokenizer.load(config.tokenizer_path)
  elif spec.source == "synthetic":
    tokenizer = train_word_tokenizer(synthetic_vocabulary(), os.path.join(workdir, "spm_tmp/"))
  else:
    logger.info("training a %d-piece SentencePiece model on up to %d characters of %s",
                config.vocab_size, config.tokenizer_sample_chars, spec.describe())
    tokenizer = train_tokenizer(iter_documents(spec), config.vocab_size,
                                os.path.join(workdir, "spm_tmp/"),
                                sample_chars=config.tokenizer_sample_chars,
                                model_type=config.tokenizer_model_type)
  tokenizer.save(path)
  return tokenizer


# ---- state -------------------------------------------------------------------
def create_state(model: GLoMo, tx, config: TrainConfig, rng: jax.Array) -> TrainState:
  params_rng, run_rng = jax.random.split(rng)
  tokens = jnp.zeros((1, config.bptt), jnp.int32)
  everywhere = jnp.arange(config.bptt - model.config.context_length)
  variables = model.init(params_rng, tokens, train=False, positions=(everywhere, everywhere))
  return TrainState.create(variables, tx, run_rng)


# XLA options for the state's initialisation, a program that runs once: on the
# CPU, XLA's older loop emitters at LLVM -O1. At the `small` config this
# compiles in the same time (5.1 s against 5.0) with 112 MiB less working set
# (the default emitters keep one MLIR context per fusion still being compiled,
# and the initialisers' random draws are ~920 fusions), and it gives the same
# parameters bit for bit (tests/test_train_sharding.py). Training and
# evaluation steps, which run many times, keep XLA's defaults (the older
# emitters make the `small` step 1-7 % slower).
INIT_CPU_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False,
                             "xla_backend_optimization_level": 1}


def init_state(init, rng: jax.Array, out_shardings=None):
  """`init(rng)` (e.g. `create_state` with its arguments bound) jitted with
  `out_shardings` and compiled with INIT_CPU_COMPILER_OPTIONS when JAX's
  default backend is the CPU (XLA's defaults elsewhere)."""
  jitted = jax.jit(init) if out_shardings is None else jax.jit(init, out_shardings=out_shardings)
  options = INIT_CPU_COMPILER_OPTIONS if jax.default_backend() == "cpu" else None
  return jitted.lower(rng).compile(compiler_options=options)(rng)


def _global_batch(batch: dict, sharding, keys=("tokens", "mask")) -> dict:
  return {k: jax.make_array_from_process_local_data(sharding, np.asarray(batch[k], np.int32))
          for k in keys}


class _Preemption:
  """Turns SIGTERM into a flag checked once per step (save, then exit)."""

  def __init__(self):
    self.requested = False
    self._old = None

  def __enter__(self):
    try:
      self._old = signal.signal(signal.SIGTERM, self._handle)
    except ValueError:  # not the main thread: no handler
      self._old = None
    return self

  def _handle(self, signum, frame):
    del signum, frame
    logger.warning("SIGTERM received: saving a checkpoint and stopping")
    self.requested = True

  def __exit__(self, *exc):
    if self._old is not None:
      signal.signal(signal.SIGTERM, self._old)


def _finite(metrics: dict) -> bool:
  return all(math.isfinite(float(metrics[k])) for k in ("loss", "grad_norm", "param_norm"))


# ---- the run -----------------------------------------------------------------
def train_and_evaluate(config: TrainConfig, workdir: str) -> dict[str, Any]:
  """Runs (or resumes) a pretraining run in `workdir`; returns a summary dict
  with the final step, train/eval losses, the export path and, for the
  synthetic corpus, the graph-on-true-arc scores (untrained and final).

  SIGTERM at any moment (setup included) leads to a checkpoint after the
  current step and a clean return with summary['stopped_early'] = True.
  """
  with _Preemption() as preemption:
    return _run(config, workdir, preemption)


def _run(config: TrainConfig, workdir: str, preemption: _Preemption) -> dict[str, Any]:
  os.makedirs(workdir, exist_ok=True)
  process_index, process_count = jax.process_index(), jax.process_count()
  is_main = process_index == 0
  logger.info("process %d of %d, %d local / %d global devices (%s)", process_index,
              process_count, jax.local_device_count(), jax.device_count(),
              jax.devices()[0].platform)

  # Mesh ------------------------------------------------------------------------
  mesh = make_mesh(config.mesh_data, config.mesh_fsdp)
  if config.batch_size % mesh.size:
    raise ValueError(f"batch_size={config.batch_size} must be divisible by the "
                     f"{mesh.size} devices of the mesh {dict(mesh.shape)}")

  # Input -----------------------------------------------------------------------
  tokenizer = prepare_tokenizer(config, workdir)
  data = pretraining_data(
      config.corpus, tokenizer, batch_size=config.batch_size, bptt=config.bptt,
      shift=config.shift, seed=config.seed, heldout_fraction=config.heldout_fraction,
      cache_dir=os.path.join(workdir, "cache"), process_index=process_index,
      process_count=process_count)
  logger.info("corpus: %d training tokens in %d windows; %s held-out tokens; vocabulary %d",
              data.train_stream.num_tokens, data.train.num_windows,
              data.eval_stream.num_tokens if data.eval_stream is not None else 0,
              tokenizer.vocab_size)

  # Model -----------------------------------------------------------------------
  model_config: ModelConfig = config.model.replace(vocab_size=tokenizer.vocab_size)
  model = GLoMo(model_config)
  eval_model = GLoMo(model_config.replace(sample_positions=0))
  tx = make_optimizer(config.optimizer, config.learning_rate, config.momentum,
                      config.clip_norm, weight_decay=config.weight_decay)
  init = functools.partial(create_state, model, tx, config)
  rng = jax.random.PRNGKey(config.seed)
  abstract = jax.eval_shape(init, rng)
  state_sh = state_shardings(mesh, abstract)
  n_params = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(abstract.params))
  logger.info("model: %s parameters; %s", f"{n_params:,}", model_config)

  abstract_sh = jax.tree_util.tree_map(
      lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), abstract, state_sh)

  # Update ----------------------------------------------------------------------
  # Compiled ahead of time, before the state exists: XLA's compile working set
  # (≈ 480 MiB on the CPU at the `small` benchmark config) then sits on the
  # smallest resident set, and its pages go back to the system before the
  # state is built (benchmark peak RSS at `small`, batch 4: 739–776 MiB,
  # against 797–837 MiB compiling after init).
  batch_sh = batch_sharding(mesh)
  in_batch_sh = {"tokens": batch_sh, "mask": batch_sh}
  batch_spec = jax.ShapeDtypeStruct((config.batch_size, config.bptt), jnp.int32,
                                    sharding=batch_sh)

  def compile_train_step():
    t0 = time.perf_counter()
    compiled = jax.jit(
        functools.partial(train_step, model, tx), in_shardings=(state_sh, in_batch_sh),
        out_shardings=(state_sh, replicated(mesh)), donate_argnums=(0,),
    ).lower(abstract_sh, {"tokens": batch_spec, "mask": batch_spec}).compile()
    logger.info("train step compiled in %.1f s", time.perf_counter() - t0)
    release_free_memory()
    return compiled

  ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), keep=config.keep_checkpoints,
                      save_every=config.checkpoint_every)
  # Not when the newest checkpoint already ends the run (a rerun of a finished
  # run trains nothing); compiled after the restore if that one does not load.
  p_train = (compile_train_step() if max(ckpt.steps(), default=0) < config.num_steps
             else None)

  # Restore or init -------------------------------------------------------------
  restored = ckpt.restore_latest(abstract_sh)
  if restored is not None:
    state, extra, step = restored
    data.train.restore(extra["data"])
    logger.info("resumed from the checkpoint at step %d", step)
  elif ckpt.steps():
    raise RuntimeError(
        f"{ckpt.directory} holds checkpoints {ckpt.steps()} but none could be restored "
        "(see the warnings above). If the model or optimiser config changed, use a new "
        "--workdir; nothing was overwritten.")
  else:
    state = init_state(init, rng, state_sh)
  if is_main:  # written once the run is known to fit the workdir's checkpoints
    with open(os.path.join(workdir, "config.json"), "w") as f:
      json.dump(config.to_dict(), f, indent=2)

  # Evaluation ------------------------------------------------------------------
  p_eval = jax.jit(functools.partial(eval_step, eval_model),
                   in_shardings=(state_sh, in_batch_sh), out_shardings=replicated(mesh))
  L = model_config.num_graph_layers
  p_graphs = jax.jit(lambda s, b: eval_model.apply(s.variables, b["tokens"], b["mask"],
                                                   method=GLoMo.graphs)[:, :L],
                     in_shardings=(state_sh, in_batch_sh), out_shardings=replicated(mesh))
  has_arcs = data.train_stream.has_arcs
  writer = MetricWriter(workdir, enabled=is_main)
  plateau = PlateauRule(config.plateau_patience, config.plateau_factor)

  def evaluate(state) -> dict:
    """Held-out loss (all positions, running BN statistics) and arc scores."""
    if data.eval_stream is None:
      return {}
    loss_sum = tokens = 0.0
    arcs = ArcAccumulator()
    for i, batch in enumerate(data.eval_iterator()):
      if config.eval_batches and i >= config.eval_batches:
        break
      gb = _global_batch(batch, batch_sh)
      out = jax.device_get(p_eval(state, gb))
      loss_sum += float(out["loss_sum"])
      tokens += float(out["tokens"])
      if has_arcs:
        arcs.add(jax.device_get(p_graphs(state, gb)),
                 multihost_utils.process_allgather(batch["arc_source"], tiled=True))
    result = {"loss": loss_sum / max(tokens, 1.0), "tokens": tokens}
    if has_arcs:
      result.update({f"arc_{k}": v for k, v in arcs.result().items()})
    return result

  arc_file = os.path.join(workdir, "arc_scores.json")
  arc_record = json.load(open(arc_file)) if os.path.exists(arc_file) else {}
  if has_arcs and "untrained" not in arc_record and int(state.step) == 0:
    arc_record["untrained"] = {k[4:]: v for k, v in evaluate(state).items()
                               if k.startswith("arc_")}

  # Loop ------------------------------------------------------------------------
  first = int(state.step)
  if p_train is None and first < config.num_steps:
    p_train = compile_train_step()
  tokens_per_step = config.batch_size * config.bptt
  progress = Progress(first, config.num_steps, tokens_per_step)
  summary: dict[str, Any] = {"first_step": first}
  metrics = None
  stopped_early = False
  logger.info("training steps %d → %d (%d tokens a step)", first, config.num_steps,
              tokens_per_step)
  for step in range(first + 1, config.num_steps + 1):
    batch = _global_batch(next(data.train), batch_sh)
    with jax.profiler.StepTraceAnnotation("train", step_num=step):
      state, metrics = p_train(state, batch)
    last = step == config.num_steps
    want_save = last or preemption.requested or step % config.checkpoint_every == 0
    want_eval = last or step % config.eval_every == 0
    if step % config.log_every == 0 or want_save or want_eval or step == first + 1:
      m = jax.device_get(metrics)
      if step == first + 1:
        release_free_memory()  # set-up done: hand its pages back
      if not _finite(m):
        steps = ckpt.steps()
        raise NonFiniteLossError(
            f"non-finite training values at step {step}: loss={float(m['loss'])}, "
            f"grad_norm={float(m['grad_norm'])}, param_norm={float(m['param_norm'])}. "
            f"The run is stopped; the last good checkpoint is "
            f"{'step %d' % steps[-1] if steps else 'none'} in {ckpt.directory}. "
            "Lower the learning rate or check the data.")
      rates = progress.update(step)
      logger.info("step %d/%d  loss %.4f (fw %.4f bw %.4f)  %.2f steps/s  %.0f tokens/s  "
                  "lr×%.3g  ETA %s", step, config.num_steps, float(m["loss"]),
                  float(m["loss_fw"]), float(m["loss_bw"]), rates["steps_per_s"],
                  rates["tokens_per_s"], float(m["lr_scale"]), format_eta(rates["eta_s"]))
      writer.scalars(step, {k: float(v) for k, v in m.items()}, "train/")
      writer.scalars(step, rates, "speed/")
      summary["train_loss"] = float(m["loss"])
    if want_eval and data.eval_stream is not None:
      ev = evaluate(state)
      best, bad, scale = plateau.update(ev["loss"], float(state.best_eval),
                                        int(state.bad_evals), float(state.lr_scale))
      # placed like the rest of the state, so the train step is not recompiled
      state = state.replace(
          best_eval=jax.device_put(jnp.float32(best), state_sh.best_eval),
          bad_evals=jax.device_put(jnp.int32(bad), state_sh.bad_evals),
          lr_scale=jax.device_put(jnp.float32(scale), state_sh.lr_scale))
      logger.info("eval at step %d: loss %.4f (best %.4f)%s", step, ev["loss"], best,
                  "".join(f"  {k} {v:.3f}" for k, v in ev.items()
                          if k in ("arc_own_best", "arc_predicting_best", "arc_predicting_chance")))
      writer.scalars(step, ev, "eval/")
      summary["eval"] = ev
    if want_save:
      ckpt.save(step, state, {"data": data.train.state(), "step": step,
                              "time": time.time()}, force=True)
    if want_eval or want_save:
      progress.restart(step)
    if preemption.requested and not last:
      stopped_early = True
      logger.warning("stopped at step %d after SIGTERM; rerun the same command to resume",
                     step)
      break
  ckpt.close()
  writer.close()
  summary["step"] = int(state.step)
  summary["stopped_early"] = stopped_early
  if has_arcs and "eval" in summary and not stopped_early:
    arc_record["final"] = {k[4:]: v for k, v in summary["eval"].items() if k.startswith("arc_")}
    arc_record["final"]["step"] = summary["step"]
  if arc_record and is_main:
    with open(arc_file, "w") as f:
      json.dump(arc_record, f, indent=2)
  summary["arcs"] = arc_record
  if config.export and not stopped_early:
    from glomo_jax.export import export_graph_predictor  # noqa: PLC0415 (optional piece)
    # every process takes part (sharded arrays are gathered); process 0 writes
    summary["export"] = export_graph_predictor(
        os.path.join(workdir, "export"), model_config, state.variables, tokenizer,
        metadata={"step": summary["step"], "workdir": os.path.abspath(workdir)},
        overwrite=True)
  summary["elapsed_s"] = time.perf_counter() - progress.start
  return summary
