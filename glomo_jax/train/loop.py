"""The one training loop: `run(task, config, workdir)` trains any `Task`.

Sections, in order: mesh → state shapes and shardings → (when the workdir
holds checkpoints: the task's check_resume and the checkpoints' shapes, so a
mistake is named before anything compiles) → (the train step compiled before
the state exists, when the task's batch shapes are fixed) → restore or init →
the task's on_start → the loop → on_end.

Restore order: a checkpoint in <workdir>/checkpoints resumes the run exactly
(state, the data iterator's position, the evaluation history and the
best/early-stopping/plateau bookkeeping); unreadable newer checkpoints are
skipped (and moved aside); otherwise the run starts from scratch. Rerunning a
finished (or early-stopped) run trains nothing and runs on_end again.

Each step: the compiled step runs on a batch already on the mesh (one
executable per batch shape) and adds its metrics to sums kept on the device;
while it runs, the host puts the next batch onto the mesh (its data position
recorded for the checkpoints). Nothing in a step waits for the device: the
metric sums are fetched when reported. Reports (progress line, TensorBoard,
non-finite check) come every `log_every` steps and before every evaluation
and save; evaluations every `eval_every` steps and at the end; checkpoints
every `checkpoint_every` steps, at the end, at an early stop and when any
process receives SIGTERM (all processes save the same step, then return).
"""
from __future__ import annotations

import collections
import copy
import functools
import logging
import math
import os
import time
from typing import Any

import jax
import jax.numpy as jnp

from glomo_jax import tuning
from glomo_jax.train.checkpoint import Checkpointer, UnrestorableCheckpointError
from glomo_jax.train.config import LoopConfig
from glomo_jax.train.metrics import MetricWriter, Progress, format_eta
from glomo_jax.train.preemption import Preemption
from glomo_jax.train.programs import RunPrograms, global_batch
from glomo_jax.train.record import Record
from glomo_jax.train.sharding import make_mesh
from glomo_jax.train.step import init_state
from glomo_jax.train.task import RunContext, Task
from glomo_jax.train.workdir import hold_workdir

logger = logging.getLogger("glomo_jax.train")

MIN_LR_SCALE = 1e-4
CHECKED = ("loss", "grad_norm", "param_norm")    # must stay finite


class NonFiniteLossError(FloatingPointError):
  """The loss or the parameters stopped being finite; the run was stopped."""


def run(task: Task, config: LoopConfig, workdir: str, *, devices=None) -> dict[str, Any]:
  """Trains (or resumes) `task` in `workdir`; returns the run's summary:
  first_step, step, preempted, stopped_early, train (last reported means),
  eval (last evaluation), best ({'value', 'step'} or {}), history,
  elapsed_s (this call), train_seconds (time in the loop over every call of
  the run), and what the task's on_end returned.

  devices: the mesh's devices (default: all of JAX's).

  Raises:
    WorkdirInUseError: another live run holds `workdir` (`train.workdir`).
    NonFiniteLossError: the loss or parameters stopped being finite.
  """
  mesh = make_mesh(config.mesh_data, config.mesh_fsdp, devices)
  # every program traced under the mesh: the fused kernels take its devices'
  # form and run per shard (`glomo_jax.ops.pallas`)
  with hold_workdir(workdir), Preemption() as preemption, jax.set_mesh(mesh):
    loop = _Loop(task, config, workdir, mesh, preemption)
    try:
      return loop.train()
    finally:
      loop.close()


class _Loop:
  """One run's pieces; `train` is the loop itself."""

  def __init__(self, task: Task, config: LoopConfig, workdir: str, mesh, preemption):
    self.task, self.config, self.workdir, self.preemption = task, config, workdir, preemption
    os.makedirs(workdir, exist_ok=True)
    if config.compilation_cache_dir:
      jax.config.update("jax_compilation_cache_dir", config.compilation_cache_dir)
    self.is_main = jax.process_index() == 0
    logger.info("process %d of %d, %d local / %d global devices (%s); CPU tuning %s",
                jax.process_index(), jax.process_count(), jax.local_device_count(),
                jax.device_count(), jax.devices()[0].platform, tuning.describe())
    # Mesh, state shapes and programs (`RunPrograms`: what a compile-only check compiles)
    self.mesh = mesh
    self.platform = self.mesh.devices.flat[0].platform
    self.programs = RunPrograms(task, mesh, fast=config.compile_fast)
    self.tx, self._create = self.programs.tx, self.programs.create
    self.state_sh, self.abstract = self.programs.state_sh, self.programs.abstract
    logger.info("model: %s parameters; mesh %s", f"{self.programs.num_params:,}",
                dict(self.mesh.shape))
    self.train_prog, self.eval_prog = self.programs.train, self.programs.eval
    self.ckpt = Checkpointer(os.path.join(workdir, "checkpoints"),
                             keep=config.keep_checkpoints, save_every=config.checkpoint_every)
    # Best variables: every improvement is saved (synchronously: a checkpoint
    # never names an unfinished best) and pruned once no kept checkpoint's
    # record can name it (`_best_refs`: the best steps of the latest saves).
    self.best_ckpt = (Checkpointer(os.path.join(workdir, "best"), keep=None)
                      if config.keep_best else None)
    self._best_refs = collections.deque(maxlen=config.keep_checkpoints + 1)
    self.writer = MetricWriter(workdir, enabled=self.is_main)
    self.record = Record()
    self._clock = time.perf_counter()   # start of the time not yet in the record

  # ---- the loop ------------------------------------------------------------------
  def train(self) -> dict[str, Any]:
    task, cfg = self.task, self.config
    if self.ckpt.steps():                   # a mistake named before anything compiles
      task.check_resume(self.workdir)
      self.ckpt.check_fits(self.abstract)
    spec = task.batch_spec()
    if spec is not None and max(self.ckpt.steps(), default=0) < cfg.num_steps:
      # before the state exists: the compile's working set on the smallest heap
      self.programs.compile_train(spec)
      tuning.release_free_memory()
    batches = task.train_batches()
    state = self._restore_or_init(batches)
    task.on_start(self._context(state))
    first = int(state.step)
    progress = Progress(first, cfg.num_steps, task.tokens_per_batch)
    sums, count, train, preempted = None, 0, {}, False
    steps = range(first + 1, cfg.num_steps + 1) if not self.record.stopped_early else ()
    if steps:
      logger.info("training steps %d → %d", first, cfg.num_steps)
    self._clock = time.perf_counter()
    pending = None     # the next step's batch on the mesh, and the data position after it
    for step in steps:
      batch, data_state = pending or self._next_batch(batches)
      if sums is None:
        sums = self.programs.zero_sums(batch)
      with jax.profiler.StepTraceAnnotation("train", step_num=step):
        state, sums = self.train_prog((state, sums), batch)
      count += 1
      last = step == cfg.num_steps
      preempted = self.preemption.reached(step) and not last
      # placed while the device computes this step, before any report waits for it
      pending = None if last or preempted else self._next_batch(batches)
      evaluate = bool(task.eval_splits) and (last or step % cfg.eval_every == 0)
      save = last or preempted or step % cfg.checkpoint_every == 0
      if save or evaluate or step % cfg.log_every == 0:
        train = self._report(step, sums, count, progress)
        sums, count = None, 0
      elif step == first + 1:  # a first sign of life; the interval's sums go on
        self._report(step, sums, count, progress, write=False)
      if step == first + 1:
        tuning.release_free_memory()  # set-up done: hand its pages back
      if evaluate:
        state = self._evaluate(state, step, train)
      if save or self.record.stopped_early:
        self._save(step, state, data_state)
      if evaluate or save:
        progress.restart(step)
      if preempted or self.record.stopped_early:
        break
    self.ckpt.wait()
    if self.best_ckpt is not None:
      self.best_ckpt.wait()
    return self._summary(state, first, train, preempted, progress, bool(steps))

  def _summary(self, state, first: int, train: dict, preempted: bool, progress: Progress,
               trained: bool) -> dict[str, Any]:
    """The run's outcome (`run`'s return value); the task's `on_end` adds to
    it unless the run was preempted. trained: this call ran any step."""
    summary = {"first_step": first, "step": int(state.step), "preempted": preempted,
               "stopped_early": self.record.stopped_early, "train": train,
               "eval": self.record.history[-1] if self.record.history else {},
               "best": self._best(), "history": self.record.history}
    if preempted:
      logger.warning("stopped at step %d after SIGTERM; rerun the same command to resume",
                     int(state.step))
    else:
      summary.update(self.task.on_end(self._context(state)))
    summary["elapsed_s"] = time.perf_counter() - progress.start
    summary["train_seconds"] = self.record.train_seconds + (
        time.perf_counter() - self._clock if trained else 0.0)
    return summary

  def close(self):
    self.ckpt.close()
    if self.best_ckpt is not None:
      self.best_ckpt.close()
    self.writer.close()

  # ---- batches and metric sums ---------------------------------------------------
  def _next_batch(self, batches) -> tuple[dict, Any]:
    """The next host batch on the mesh, and the data position after it."""
    host = next(batches)
    return global_batch(host, self.mesh), copy.deepcopy(batches.state())

  # ---- state ---------------------------------------------------------------------
  def _save(self, step: int, state, data_state) -> None:
    now = time.perf_counter()
    self.record.train_seconds += now - self._clock
    self._clock = now
    self.ckpt.save(step, state, {"data": data_state, "loop": self.record.to_json(),
                                 "step": step, "time": time.time()}, force=True)
    if self.best_ckpt is not None and self.record.best is not None:
      self._best_refs.append(self.record.best_step)
      self.best_ckpt.delete_before(min(self._best_refs))

  def _restore_or_init(self, batches):
    restored = self.ckpt.restore_latest(self.abstract)
    if restored is not None:
      state, extra, step = restored
      batches.restore(extra["data"])
      self.record = Record.from_json(extra["loop"])
      if self.best_ckpt is not None:   # saves from after this step are replayed
        self.best_ckpt.delete_after(step)
        self._best_refs.append(self.record.best_step)
      logger.info("resumed from the checkpoint at step %d", step)
      return state
    if self.ckpt.steps():
      raise UnrestorableCheckpointError(
          f"{self.ckpt.directory} holds checkpoints {self.ckpt.steps()} but none could be "
          "restored into this run's state (see the warnings above); if the model or "
          "optimiser config changed, use a new --workdir (nothing was overwritten)")
    options = tuning.compiler_options(self.platform, fast=self.config.compile_fast,
                                      one_off=True)
    return init_state(self._create, jax.random.PRNGKey(self.config.seed), self.state_sh, options)

  def _context(self, state) -> RunContext:
    return RunContext(self.workdir, self.is_main, self.mesh, state, self.record.history,
                      self._best(), functools.partial(self._evaluate_split, state),
                      self._best_variables)

  def _best(self) -> dict:
    if self.record.best is None:
      return {}
    return {"value": self.record.best, "step": self.record.best_step}

  def _best_variables(self) -> dict:
    if self.best_ckpt is None:
      raise ValueError("the run keeps no best checkpoint (LoopConfig.keep_best)")
    abstract = {"params": self.abstract.params, "batch_stats": self.abstract.batch_stats}
    step = self.record.best_step
    try:
      return self.best_ckpt.restore(step, abstract)[0]
    except Exception as e:  # noqa: BLE001 (orbax raises many kinds)
      raise UnrestorableCheckpointError(
          f"the best variables (step {step}) cannot be read from {self.best_ckpt.directory} "
          f"({type(e).__name__}); rerun in a new --workdir") from e

  # ---- reports and evaluations ---------------------------------------------------------
  def _report(self, step: int, sums, count: int, progress: Progress,
              write: bool = True) -> dict:
    """Means of the train metrics since the last report: checked, printed
    and (write) sent to TensorBoard."""
    means = {k: float(v) / count for k, v in jax.device_get(sums).items()}
    bad = {k: means[k] for k in CHECKED if k in means and not math.isfinite(means[k])}
    if bad:
      steps = self.ckpt.steps()
      raise NonFiniteLossError(
          f"non-finite training values at step {step}: "
          + ", ".join(f"{k}={means.get(k)}" for k in CHECKED if k in means)
          + ". The run is stopped; the last good checkpoint is "
          + (f"step {steps[-1]}" if steps else "none") + f" in {self.ckpt.directory}. "
          "Lower the learning rate or check the data.")
    rates = progress.update(step) if write else progress.peek(step)
    shown = "  ".join(f"{k} {means[k]:.4f}" for k in self._shown(means)
                      if k not in ("grad_norm", "param_norm", "lr_scale"))
    tokens = (f"  {rates['tokens_per_s']:.0f} {self.task.unit_name}/s"
              if self.task.tokens_per_batch else "")
    shapes = self.train_prog.num_shapes
    logger.info("step %d/%d  %s  lr×%.3g  %.2f steps/s%s  ETA %s  (%d compiled step shape%s)",
                step, self.config.num_steps, shown, means.get("lr_scale", 1.0),
                rates["steps_per_s"], tokens, format_eta(rates["eta_s"]), shapes,
                "" if shapes == 1 else "s")
    if write:
      self.writer.scalars(step, means, "train/")
      self.writer.scalars(step, rates, "speed/")
    return means

  def _shown(self, metrics: dict) -> list[str]:
    """The metrics of the console lines (Task.log_metrics), in its order."""
    names = self.task.log_metrics
    return list(metrics) if names is None else [k for k in names if k in metrics]

  def _evaluate_split(self, state, split: str, variables=None) -> dict:
    variables = state.variables if variables is None else variables

    def run_eval(batch: dict) -> dict:
      return jax.device_get(self.eval_prog(variables, global_batch(batch, self.mesh)))
    return dict(self.task.evaluate(split, run_eval))

  def _evaluate(self, state, step: int, train: dict):
    entry = {"step": step, "train": train}
    for split in self.task.eval_splits:
      entry[split] = self._evaluate_split(state, split)
      self.writer.scalars(step, {k: v for k, v in entry[split].items()
                                 if isinstance(v, (int, float))}, f"{split}/")
    decision = self.record.add(self.config, step, entry)
    if decision["improved"] and self.best_ckpt is not None:
      self.best_ckpt.save(step, state.variables, {"step": step, "value": self.record.best},
                          force=True)
      self.best_ckpt.wait()
    if decision["cut_lr"]:
      scale = max(float(state.lr_scale) * self.config.plateau_factor, MIN_LR_SCALE)
      # placed like the rest of the state, so the train step is not recompiled
      state = state.replace(lr_scale=jax.device_put(jnp.float32(scale), self.state_sh.lr_scale))
    metrics = "  ".join(f"{split}/{k} {entry[split][k]:.4f}" for split in self.task.eval_splits
                        for k in self._shown(entry[split]) if isinstance(entry[split][k], float))
    best = (f"  (best {self.config.select_metric} {self.record.best:.4f} at step "
            f"{self.record.best_step})" if self.record.best is not None else "")
    logger.info("eval at step %d: %s%s%s", step, metrics, best,
                "  → lr×%.3g" % float(state.lr_scale) if decision["cut_lr"] else "")
    if self.record.stopped_early:
      logger.info("stopping early: %d evaluations without a better %s", self.record.since_best,
                  self.config.select_metric)
    return state
