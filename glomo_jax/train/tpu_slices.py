"""TPU slices as users name them, and their devices for compiling anywhere.

One table maps a slice name (Cloud TPU's accelerator types: v4-8, v5e-8 or
v5litepod-8, v5p-8, v6e-8, v5e-256, ...) to what the TPU compiler needs: its
topology (chips per axis), its chip configuration, and the JAX devices a run
sees. v4 and v5p chips hold two TensorCores that JAX drives as one device
(megacore), and their slice names count TensorCores: a v4-8 is 4 chips, 4
devices. v5e and v6e chips hold one, and their names count chips.

`compile_devices(name)` gives compile-only devices of that slice on any x86
Linux host with `libtpu` installed (jax's `tpu` extra):
`jax.jit(f).lower(args sharded over a mesh of them).compile()` runs the real
TPU compiler, so a program that would not fit the chip's HBM fails there as
it would on the TPU. Nothing can run on them.
"""
from __future__ import annotations

import dataclasses
import os
import re

from glomo_jax.tpu import GENERATIONS, Generation

# chips per topology axis: 2-D tori (v5e, v6e) and 3-D (v4, v5p)
_GRID_2D = {4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16",
            256: "16x16"}
_GRID_3D = {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4", 128: "4x4x8",
            256: "4x8x8", 512: "8x8x8", 1024: "8x8x16", 2048: "8x16x16", 4096: "16x16x16"}
_GRIDS = {2: _GRID_2D, 3: _GRID_3D}


@dataclasses.dataclass(frozen=True)
class Slice:
  """A slice: `name` as written, its generation, chips, devices (per slice),
  the compiler's topology ('v5e:2x4'), chip config ('megacore' or None) and
  num_slices (several slices joined over the data-centre network)."""
  name: str
  generation: Generation
  chips: int
  topology: str
  num_slices: int = 1

  @property
  def num_devices(self) -> int:
    return self.chips * self.num_slices

  @property
  def chip_config(self) -> str | None:
    return "megacore" if self.generation.megacore else None

  def describe(self) -> str:
    slices = f" × {self.num_slices} slices" if self.num_slices > 1 else ""
    return (f"{self.generation.device_kind} ({self.name}{slices}, {self.num_devices} "
            f"device{'s' if self.num_devices > 1 else ''})")


def parse_slice(name: str, num_slices: int = 1) -> Slice:
  """A slice from a name as users write it ('v5e-8', 'v5litepod-256', 'v4-8',
  'v5p-8', 'v6e-8') or the compiler's own topology ('v5e:2x4', 'v4:2x2x1').

  Raises:
    ValueError: an unknown generation, or a size the table does not hold.
  """
  if num_slices < 1:
    raise ValueError(f"num_slices must be >= 1, got {num_slices}")
  raw = re.fullmatch(r"(v\w+?):(\d+(?:x\d+)+)", name)
  if raw:
    gen = _generation(raw.group(1), name)
    chips = 1
    for size in raw.group(2).split("x"):
      chips *= int(size)
    return Slice(name, gen, chips, f"{gen.name}:{raw.group(2)}", num_slices)
  m = re.fullmatch(r"(v\w+?)-(\d+)", name)
  if not m:
    raise ValueError(f"slice {name!r}: write it as a Cloud TPU type (v4-8, v5e-8, v5p-8, "
                     "v6e-256, ...) or a topology (v5e:2x4)")
  gen = _generation(m.group(1), name)
  count = int(m.group(2))
  chips = count // 2 if gen.megacore else count
  grid = _GRIDS[gen.torus]
  if gen.megacore and count % 2 or chips not in grid:
    sizes = sorted(c * (2 if gen.megacore else 1) for c in grid)
    raise ValueError(f"slice {name!r}: no {gen.name} slice of that size in the table "
                     f"(sizes: {', '.join(map(str, sizes))}); or give the topology, "
                     f"e.g. {gen.name}:{grid[8]}")
  return Slice(name, gen, chips, f"{gen.name}:{grid[chips]}", num_slices)


def _generation(text: str, name: str) -> Generation:
  key = {"v5litepod": "v5e", "v5lite": "v5e", "v6": "v6e"}.get(text, text)
  if key not in GENERATIONS:
    raise ValueError(f"slice {name!r}: unknown TPU generation {text!r} "
                     f"(known: {', '.join(GENERATIONS)})")
  return GENERATIONS[key]


def compile_devices(tpu: Slice) -> list:
  """Compile-only devices of the slice (module docstring), ordered by slice,
  then as the topology numbers them.

  Raises:
    ImportError: libtpu is not installed (`pip install "jax[tpu]"`).
  """
  import importlib.util  # noqa: PLC0415

  from jax.experimental import topologies  # noqa: PLC0415
  if importlib.util.find_spec("libtpu") is None:
    raise ImportError("compiling for a TPU needs libtpu: pip install \"jax[tpu]\" (an x86 "
                      "Linux host; jax and libtpu as one matching pair)")
  # no TPU VM to ask for its metadata: the compiler needs none
  for key, value in (("TPU_SKIP_MDS_QUERY", "1"), ("TPU_WORKER_HOSTNAMES", "localhost"),
                     ("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")):
    os.environ.setdefault(key, value)
  kwargs = {"chip_config_name": tpu.chip_config} if tpu.chip_config else {}
  if tpu.num_slices > 1:
    kwargs["num_slices"] = tpu.num_slices
  devices = topologies.get_topology_desc(topology_name=tpu.topology, platform="tpu",
                                         **kwargs).devices
  return sorted(devices, key=lambda d: (getattr(d, "slice_index", 0), d.id))
