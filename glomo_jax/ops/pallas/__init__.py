"""Fused Pallas kernels of the pretraining step, each beside the reference op
it replaces (selected by `ModelConfig.kernels`; the reference ops stay the
default):

* `tied_softmax.fused_tied_softmax_cross_entropy` for
  `ops.chunked_cross_entropy.tied_softmax_cross_entropy`: no [rows, V] logits
  or logits-gradient array in memory.
* `graph_mix.fused_graph_mix` for `ops.sparse_graph.normalize_graph`
  (squared ReLU) followed by `models.feature_predictor.mix_heads`: no
  [batch, K, T, T] graph in memory.

Each kernel has two forms, chosen when it is traced (`KernelMode`): 'gpu'
(Triton; an in-kernel loop over the reduced axis, the other axes on the
grid) and 'tpu' (Mosaic TPU; the reduced axis is the grid's last, sequential
axis with the accumulators in VMEM scratch). Off those platforms (the CPU) a
form runs in Pallas interpret mode: the same kernel body evaluated by XLA,
which is how the tests check every form against its reference. The TPU forms
lower for a TPU (tests/test_lowering.py exports the sharded steps on a CPU
host) but have not run on one.

The form follows the program's target (`target_platform`), not the host:
a platform given for cross-lowering (`lowering_for`), else the platform of
the devices of the mesh in context (`jax.set_mesh`; the training loop sets
its mesh), else `jax.default_backend()`.

Under a mesh of several devices (in context) each kernel runs per shard
(`per_shard`): inside `shard_map`, on the device's rows of the batch, which
is split over every axis of the mesh as `train.sharding` splits batches.

Compiled for a GPU, Triton loads only tensors whose sizes are powers of two:
the feature width d (the loss) and the head widths H and d / K (the graph
kernel) must be.

Every call goes through `pallas_call`, which requires a `pl.CostEstimate`
(XLA's scheduler sees a custom call's cost only through it). A TPU form's
default blocks and VMEM limit follow the target's generation
(`tpu_generation`, `glomo_jax.tpu.KERNEL_BLOCKS`); `tpu_call` estimates each
call's VMEM and raises its limit where the estimate passes the generation's
scoped default (`vmem_limit`).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from typing import Callable, Iterator, Sequence

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from glomo_jax.tpu import DEFAULT, KERNEL_BLOCKS, MiB, Generation, generation_of

FORMS = ("gpu", "tpu")
GPU_PLATFORMS = ("gpu", "cuda", "rocm")
_LOWERING = contextvars.ContextVar("glomo_jax_kernel_lowering", default=None)


@dataclasses.dataclass(frozen=True)
class KernelMode:
  """How a kernel runs: `form` ('gpu' or 'tpu') and whether in interpret mode."""
  form: str
  interpret: bool

  def __post_init__(self):
    if self.form not in FORMS:
      raise ValueError(f"kernel form {self.form!r} is not one of {list(FORMS)}")


@contextlib.contextmanager
def lowering_for(platform: str) -> Iterator[None]:
  """Kernels traced inside take the form of `platform` ('tpu', 'cuda', 'rocm',
  'cpu'): for a program lowered for another platform than the host's
  (`jax.export.export(..., platforms=(platform,))`). Only traces inside
  count: a function jitted and traced before keeps its forms."""
  token = _LOWERING.set(platform)
  try:
    yield
  finally:
    _LOWERING.reset(token)


def _mesh():
  """The abstract mesh in context (`jax.set_mesh`), or None."""
  mesh = jax.sharding.get_abstract_mesh()
  return None if mesh.empty else mesh


def target_platform() -> str:
  """The platform the kernels traced now are for: `lowering_for`'s, else
  that of the context mesh's devices, else `jax.default_backend()`."""
  platform = _LOWERING.get()
  mesh = _mesh()
  if platform is None and mesh is not None and mesh.abstract_device is not None:
    platform = mesh.abstract_device.platform
  return platform or jax.default_backend()


def kernel_mode(form: str | None = None, interpret: bool | None = None) -> KernelMode:
  """The mode of a kernel traced now.

  form: None picks the target's (`target_platform`): 'tpu' for a TPU, else
    'gpu' (also for the CPU, where it is interpreted).
  interpret: None interprets unless the target is a GPU or a TPU (Pallas
    compiles kernels for those only).
  """
  target = target_platform()
  native = "tpu" if target == "tpu" else ("gpu" if target in GPU_PLATFORMS else None)
  if form is None:
    form = "tpu" if native == "tpu" else "gpu"
  if interpret is None:
    interpret = native != form
  return KernelMode(form, bool(interpret))


def batch_axes(rows: int) -> tuple[str, ...] | None:
  """The mesh axes a kernel's batch of `rows` is split over: every axis of
  the context mesh when it has several devices that divide `rows` and no
  axis is manual already (inside `shard_map`); else None (one call)."""
  mesh = _mesh()
  if mesh is None or mesh.size == 1 or mesh.manual_axes or rows % mesh.size:
    return None
  return tuple(mesh.axis_names)


def per_shard(fn: Callable, batched: tuple, out_batched, rows: int, *args):
  """`fn(*args)` on each device's rows (`batch_axes(rows)`), or once.

  batched: per argument, the axis split over the mesh (None: replicated; a
    None argument stays None), or (axis, mesh axis name): split over that
    mesh axis only (e.g. a table's rows over 'fsdp'; `fn` sees its share
    and may use the axis name in collectives); out_batched: the split axis
    of the output, or a tuple of them for a tuple of outputs (every output
    is split: a sum over the rows returns each shard's sum, [1], summed by
    the caller). An argument's gradient is summed over the mesh axes it is
    not split over.
  """
  axes = batch_axes(rows)
  if axes is None:
    return fn(*args)

  def spec(entry):
    if entry is None:
      return P()
    axis, names = entry if isinstance(entry, tuple) else (entry, axes)
    return P(*([None] * axis), names)

  present = [i for i, a in enumerate(args) if a is not None]

  def local(*xs):
    full = list(args)
    for i, x in zip(present, xs):
      full[i] = x
    return fn(*full)

  return jax.shard_map(local, in_specs=tuple(spec(batched[i]) for i in present),
                       out_specs=(tuple(spec(a) for a in out_batched)
                                  if isinstance(out_batched, tuple) else spec(out_batched)),
                       check_vma=False)(*(args[i] for i in present))


def axis_size(name: str) -> int:
  """Devices along mesh axis `name` of the context mesh (1 without it)."""
  mesh = _mesh()
  return 1 if mesh is None or name not in mesh.axis_names else mesh.shape[name]


def check_triton_widths(mode: KernelMode, **widths: int) -> None:
  """Raises ValueError unless every width is a power of two, for a compiled
  GPU kernel (interpret mode and the TPU form take any width)."""
  if mode.interpret or mode.form != "gpu":
    return
  bad = {k: v for k, v in widths.items() if v & (v - 1)}
  if bad:
    raise ValueError(f"the Triton form of a fused kernel needs widths that are powers of "
                     f"two; got {bad}: use ModelConfig.kernels='reference'")


def round_up(n: int, multiple: int) -> int:
  return -(-n // multiple) * multiple


def pallas_call(kernel: Callable, *, name: str, cost, **kwargs):
  """`pl.pallas_call(kernel, name=name, cost_estimate=cost, **kwargs)`: every
  kernel's call, which must state its cost (`pl.CostEstimate`: flops,
  transcendentals, bytes_accessed, ints)."""
  from jax.experimental import pallas as pl  # noqa: PLC0415
  if not isinstance(cost, pl.CostEstimate):
    raise TypeError(f"the Pallas call {name} needs a pl.CostEstimate, got {cost!r}")
  return pl.pallas_call(kernel, name=name, cost_estimate=cost, **kwargs)


# ---- TPU generations, VMEM -------------------------------------------------------------
def tpu_generation() -> Generation:
  """The TPU generation the kernels traced now are for: the context mesh's
  device kind when its devices are TPUs (compile-only devices too), else
  the default backend's when it is a TPU, else `glomo_jax.tpu.DEFAULT`
  (`lowering_for('tpu')` on another host, or a kind the table lacks)."""
  mesh = _mesh()
  device = None if mesh is None else mesh.abstract_device
  if device is not None and device.platform == "tpu":
    return generation_of(device.device_kind) or DEFAULT
  if jax.default_backend() == "tpu":
    return generation_of(jax.devices()[0].device_kind) or DEFAULT
  return DEFAULT


def tpu_blocks(kernel: str) -> tuple[int, int]:
  """A TPU form's default blocks ('tied_softmax', 'graph_mix') for the
  target's generation (`glomo_jax.tpu.KERNEL_BLOCKS`)."""
  return KERNEL_BLOCKS[tpu_generation().name][kernel]


def vmem_bytes(shape: Sequence[int], dtype) -> int:
  """Bytes of an array of `shape` in VMEM: Mosaic stores the last two axes
  in tiles of (8 · 4 / itemsize) sublanes × 128 lanes, so a [rows, 1]
  column takes 128 lanes a row (a 1-axis array is one row)."""
  itemsize = np.dtype(dtype).itemsize
  shape = (1,) * max(0, 2 - len(shape)) + tuple(shape)
  sublanes = 8 * max(1, 4 // itemsize)
  return (int(np.prod(shape[:-2], dtype=np.int64)) * round_up(shape[-2], sublanes)
          * round_up(shape[-1], 128) * itemsize)


def vmem_limit(estimate: int, generation: Generation) -> int | None:
  """The `vmem_limit_bytes` of a TPU call whose VMEM `estimate` is given:
  None (the compiler's scoped default) while the estimate is within the
  generation's scoped limit; else 1.25 × the estimate in whole MiB, at
  most the generation's VMEM (a call needing more fails to compile, the
  compiler naming the kernel)."""
  if estimate <= generation.scoped_vmem_bytes:
    return None
  return min(round_up(int(1.25 * estimate), MiB), generation.vmem_bytes)


def tpu_compiler_params(semantics: Sequence[str], vmem_estimate: int):
  """Mosaic's compiler parameters: the grid's dimension semantics
  ('parallel' / 'arbitrary') and the VMEM limit of a call whose VMEM
  estimate is given (`vmem_limit` for the target's generation)."""
  from jax.experimental.pallas import tpu as pltpu  # noqa: PLC0415
  return pltpu.CompilerParams(dimension_semantics=tuple(semantics),
                              vmem_limit_bytes=vmem_limit(vmem_estimate, tpu_generation()))


def _block_shape(spec) -> tuple[int, ...]:
  """A BlockSpec's block as the kernel sees it (squeezed axes dropped)."""
  return tuple(n for n in spec.block_shape if isinstance(n, int))


def tpu_vmem(in_blocks, out_blocks, scratch, intermediates) -> int:
  """Estimated VMEM of a TPU call, each argument a list of (shape, dtype):
  its input and output blocks twice (the pipeline fetches the next grid
  step's blocks and writes back the last one's while computing), its
  scratch, and the in-kernel intermediates that Mosaic holds in VMEM (the
  tiles too large for the vector registers)."""
  size = lambda blocks: sum(vmem_bytes(s, d) for s, d in blocks)
  return 2 * (size(in_blocks) + size(out_blocks)) + size(scratch) + size(intermediates)


def tpu_call(kernel: Callable, args: Sequence[jax.Array], *, name: str, grid, in_specs,
             out_specs, out_shape, scratch, semantics, intermediates, cost,
             interpret: bool):
  """A TPU form's call `kernel(*args)`: `pallas_call` with `scratch` ((shape,
  dtype) VMEM buffers) and the VMEM limit of its estimate (`tpu_vmem` of
  the blocks of `in_specs` / `out_specs`, the scratch and `intermediates`)."""
  from jax.experimental.pallas import tpu as pltpu  # noqa: PLC0415
  outs = out_shape if isinstance(out_shape, (list, tuple)) else [out_shape]
  specs = out_specs if isinstance(out_specs, (list, tuple)) else [out_specs]
  estimate = tpu_vmem([(_block_shape(s), a.dtype) for s, a in zip(in_specs, args)],
                      [(_block_shape(s), o.dtype) for s, o in zip(specs, outs)],
                      scratch, intermediates)
  return pallas_call(kernel, name=name, cost=cost, grid=grid, in_specs=in_specs,
                     out_specs=out_specs, out_shape=out_shape,
                     scratch_shapes=[pltpu.VMEM(s, d) for s, d in scratch],
                     compiler_params=tpu_compiler_params(semantics, estimate),
                     interpret=interpret)(*args)
