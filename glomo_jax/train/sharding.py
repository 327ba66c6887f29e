"""One `jax.sharding.Mesh` with a data axis and an fsdp axis.

* Batches are split over both axes (every device holds a slice of the batch).
* Parameters and optimiser state are split over 'fsdp': each array is cut
  along its largest dimension that the fsdp size divides (big_vision's "fsdp"
  tactic); arrays too small or with no such dimension are replicated.
With fsdp = 1 this is plain data parallelism. The same code runs on 1 CPU,
8 fake CPU devices, a GPU host or a TPU pod slice.
"""
from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

DATA_AXES = ("data", "fsdp")


def make_mesh(data: int = -1, fsdp: int = 1, devices=None) -> Mesh:
  """Mesh of shape (data, fsdp); -1 for data means all remaining devices.

  Raises ValueError if the sizes do not multiply to the device count.
  """
  devices = list(jax.devices() if devices is None else devices)
  n = len(devices)
  if fsdp < 1 or n % fsdp:
    raise ValueError(f"fsdp={fsdp} must divide the {n} devices")
  if data == -1:
    data = n // fsdp
  if data * fsdp != n:
    raise ValueError(f"mesh data={data} × fsdp={fsdp} must equal the {n} devices "
                     "(use data=-1 for 'all remaining')")
  return Mesh(np.asarray(devices).reshape(data, fsdp), ("data", "fsdp"))


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
  """Leading (batch) axis split over every mesh axis."""
  return NamedSharding(mesh, P(DATA_AXES, *([None] * (ndim - 1))))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def fsdp_spec(shape, fsdp_size: int, min_size: int = 2 ** 12) -> P:
  """PartitionSpec splitting the largest dimension divisible by fsdp_size."""
  if fsdp_size == 1 or int(np.prod(shape, dtype=np.int64)) < min_size:
    return P()
  for axis in np.argsort(shape)[::-1]:
    if shape[axis] % fsdp_size == 0:
      spec = [None] * len(shape)
      spec[axis] = "fsdp"
      return P(*spec)
  return P()


def state_shardings(mesh: Mesh, abstract_tree):
  """NamedShardings for a pytree of arrays / ShapeDtypeStructs (fsdp rule)."""
  fsdp = mesh.shape["fsdp"]
  return jax.tree_util.tree_map(
      lambda x: NamedSharding(mesh, fsdp_spec(x.shape, fsdp)) if hasattr(x, "shape")
      else replicated(mesh), abstract_tree)
