"""Jitted functions of (state or variables, batch) with shardings, compiled
once per batch signature, and host batches placed on the mesh."""
from __future__ import annotations

import functools
import logging
import time
from typing import Any, Callable

import jax
import numpy as np

from glomo_jax import tuning
from glomo_jax.tpu import generation_of
from glomo_jax.train.memory import does_not_fit, is_out_of_memory
from glomo_jax.train.sharding import batch_sharding, replicated, state_shardings
from glomo_jax.train.step import accumulating_step, jitted_train_step, metric_shapes, state_creator

logger = logging.getLogger("glomo_jax.train")


def global_batch(batch: dict, mesh) -> dict:
  """This process's rows of a batch (numpy) -> global arrays split along the
  leading axis over every device of `mesh`."""
  check_rows(len(next(iter(batch.values()))) * jax.process_count(), mesh)
  return {k: jax.make_array_from_process_local_data(batch_sharding(mesh, np.ndim(v)),
                                                   np.asarray(v))
          for k, v in batch.items()}


def check_rows(rows: int, mesh) -> None:
  """Raises ValueError unless a global batch of `rows` splits over the mesh."""
  if rows % mesh.size:
    raise ValueError(f"a batch of {rows} rows cannot be split over the {mesh.size} devices "
                     f"of the mesh: make the batch sizes (batch_size, optim.batch_size, "
                     f"optim.eval_batch_size) multiples of {mesh.size}, or use fewer "
                     "devices (mesh_data)")


def batch_spec(spec: dict[str, jax.ShapeDtypeStruct], mesh) -> dict:
  """Global batch shapes with the mesh's batch sharding."""
  return {k: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=batch_sharding(mesh, len(s.shape)))
          for k, s in spec.items()}


def signature(batch: dict) -> tuple:
  """(key, shape, dtype) of each entry of a batch (arrays or shapes), sorted."""
  return tuple((k, tuple(v.shape), str(v.dtype)) for k, v in sorted(batch.items()))


class Program:
  """`fn(first, batch)` jitted with `first_sharding` for its first argument
  and the batch split over the mesh, compiled ahead of time once per batch
  signature (keys, shapes, dtypes) and logged as '<name> compiled in …'.

  A compile the device's memory cannot hold (the TPU compiler refuses it)
  raises `ProgramDoesNotFitError`: one line naming the program, the devices,
  the bytes and the settings to change (`memory.advice`: `batch_flag`, the
  batch's, and `kernels_flag`, the kernels', where the task has one).

  Attributes:
    num_shapes: batch signatures compiled so far.
  """

  def __init__(self, name: str, fn: Callable, mesh, first_sharding: Any, out_shardings: Any,
               *, donate: bool = False, fast: bool = False,
               batch_flag: str = "--config.batch_size", kernels_flag: str | None = None):
    self.name, self.fn, self.mesh = name, fn, mesh
    self.first_sharding, self.out_shardings, self.donate = first_sharding, out_shardings, donate
    self.batch_flag, self.kernels_flag = batch_flag, kernels_flag
    platform = mesh.devices.flat[0].platform
    self.options = tuning.compiler_options(platform, fast=fast)
    self._compiled: dict[tuple, Any] = {}

  @property
  def num_shapes(self) -> int:
    return len(self._compiled)

  def compile(self, first, batch: dict):
    """The executable for `batch`'s signature (arrays or ShapeDtypeStructs)."""
    key = signature(batch)
    if key not in self._compiled:
      check_rows(next(iter(batch.values())).shape[0], self.mesh)
      t0 = time.perf_counter()
      batch_sh = {k: batch_sharding(self.mesh, len(v.shape)) for k, v in batch.items()}
      jitted = jax.jit(self.fn, in_shardings=(self.first_sharding, batch_sh),
                       out_shardings=self.out_shardings,
                       donate_argnums=(0,) if self.donate else ())
      try:
        self._compiled[key] = jitted.lower(first, batch).compile(compiler_options=self.options)
      except Exception as e:  # noqa: BLE001 - the compiler's refusal, in one line
        if not is_out_of_memory(e):
          raise
        raise does_not_fit(self.name, describe_devices(self.mesh), e, self.batch_flag,
                           self.kernels_flag) from e
      logger.info("%s compiled in %.1f s (batch %s)", self.name, time.perf_counter() - t0,
                  ", ".join(f"{k} {list(s)}" for k, s, _ in key))
    return self._compiled[key]

  def __call__(self, first, batch: dict):
    return self.compile(first, batch)(first, batch)


def describe_devices(mesh) -> str:
  """'TPU v5 lite (v5e-8, 8 devices)': the mesh's device kind, its TPU slice
  as Cloud TPU names it (`glomo_jax.tpu`), and its device count."""
  n = mesh.devices.size
  kind = mesh.devices.flat[0].device_kind
  generation = generation_of(kind)
  name = f"{generation.name}-{n * (2 if generation.megacore else 1)}, " if generation else ""
  return f"{kind} ({name}{n} device{'s' if n > 1 else ''})"


class RunPrograms:
  """A task's train state and programs on a mesh: what the loop runs, and
  what a compile-only check (`experiments.tpu_compile`) compiles.

  Attributes:
    tx: the task's optimiser. create: the state's initialiser
      (`state_creator`, a function of the rng). abstract: the state's shapes
      with their shardings (`state_shardings`); state_sh: those shardings.
    step: the jitted train step (`jitted_train_step`).
    train: `Program` of (state, metric sums), batch -> the same, donating
      the state (`accumulating_step`). eval: `Program` of the task's
      `eval_step` on (variables, batch).
    num_params: the parameters' count.
  """

  def __init__(self, task, mesh, *, fast: bool = False):
    self.task, self.mesh = task, mesh
    self.tx = task.optimizer()
    self.create = state_creator(task, self.tx)   # traced once: shapes, init
    # the key's shape as `jax.random.PRNGKey` makes it under the mesh (no computation):
    # `init_state`'s concrete key then meets this trace instead of tracing again
    key = jax.ShapeDtypeStruct((2,), np.uint32, sharding=replicated(mesh))
    abstract = jax.eval_shape(self.create, key)
    self.state_sh = state_shardings(mesh, abstract)
    self.abstract = jax.tree_util.tree_map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), abstract, self.state_sh)
    self.num_params = sum(int(np.prod(x.shape))
                          for x in jax.tree_util.tree_leaves(abstract.params))
    flags = {"batch_flag": getattr(task, "batch_flag", "--config.batch_size"),
             "kernels_flag": getattr(task, "kernels_flag", None)}
    carry_sh = (self.state_sh, replicated(mesh))      # (state, metric sums)
    self.step = jitted_train_step(task, self.tx)      # traced once: metric shapes, program
    self.train = Program("train step", functools.partial(accumulating_step, self.step), mesh,
                         carry_sh, carry_sh, donate=True, fast=fast, **flags)
    self.variables_sh = {"params": self.state_sh.params,
                         "batch_stats": self.state_sh.batch_stats}
    self.eval = Program("eval step", task.eval_step, mesh, self.variables_sh, replicated(mesh),
                        fast=fast, **flags)
    self._metric_shapes: dict[tuple, Any] = {}

  @property
  def abstract_variables(self) -> dict:
    """The variables' shapes and shardings (the eval step's first argument)."""
    return {"params": self.abstract.params, "batch_stats": self.abstract.batch_stats}

  def zero_sums(self, batch: dict, abstract: bool = False):
    """Zeros (or their shapes, `abstract`) of the train metrics of `batch`'s
    signature, replicated on the mesh: the sums at the start of an interval."""
    key = signature(batch)
    if key not in self._metric_shapes:
      self._metric_shapes[key] = metric_shapes(self.step, self.abstract, batch)
    sharding = replicated(self.mesh)
    if abstract:
      return jax.tree_util.tree_map(
          lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding),
          self._metric_shapes[key])
    return jax.tree_util.tree_map(lambda s: jax.device_put(np.zeros(s.shape, s.dtype), sharding),
                                  self._metric_shapes[key])

  def compile_train(self, spec: dict):
    """The train step's executable for a batch of `spec`'s shapes (no state
    needed: compiled on the abstract state)."""
    spec = batch_spec(spec, self.mesh)
    return self.train.compile((self.abstract, self.zero_sums(spec, abstract=True)), spec)

  def compile_eval(self, spec: dict):
    """The eval step's executable for a batch of `spec`'s shapes."""
    return self.eval.compile(self.abstract_variables, batch_spec(spec, self.mesh))
