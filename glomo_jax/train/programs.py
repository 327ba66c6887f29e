"""Jitted functions of (state or variables, batch) with shardings, compiled
once per batch signature, and host batches placed on the mesh."""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

import jax
import numpy as np

from glomo_jax import tuning
from glomo_jax.train.sharding import batch_sharding

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

  Attributes:
    num_shapes: batch signatures compiled so far.
  """

  def __init__(self, name: str, fn: Callable, mesh, first_sharding: Any, out_shardings: Any,
               *, donate: bool = False, fast: bool = False):
    self.name, self.fn, self.mesh = name, fn, mesh
    self.first_sharding, self.out_shardings, self.donate = first_sharding, out_shardings, donate
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
      self._compiled[key] = jitted.lower(first, batch).compile(compiler_options=self.options)
      logger.info("%s compiled in %.1f s (batch %s)", self.name, time.perf_counter() - t0,
                  ", ".join(f"{k} {list(s)}" for k, s, _ in key))
    return self._compiled[key]

  def __call__(self, first, batch: dict):
    return self.compile(first, batch)(first, batch)
