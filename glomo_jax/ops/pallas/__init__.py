"""Fused Pallas kernels of the pretraining step, each beside the reference op
it replaces (selected by `ModelConfig.kernels`; the reference ops stay the
default):

* `tied_softmax.fused_tied_softmax_cross_entropy` for
  `ops.chunked_cross_entropy.tied_softmax_cross_entropy`: no [rows, V] logits
  or logits-gradient array in memory.
* `graph_mix.fused_graph_mix` for `ops.sparse_graph.normalize_graph`
  (squared ReLU) followed by `models.feature_predictor.mix_heads`: no
  [batch, K, T, T] graph in memory.

Each kernel has a form per lowering, chosen when it is traced (`KernelMode`):
'gpu' (Triton; an in-kernel loop over the reduced axis, the other axes on the
grid) and, where written, 'tpu' (Mosaic TPU; the reduced axis is the grid's
last, sequential axis with the accumulators in VMEM scratch). Off those
platforms (the CPU) a form runs in Pallas interpret mode: the same kernel
body evaluated by XLA, which is how the tests check every form against its
reference. The TPU forms are written but have never run on a TPU.

Compiled for a GPU, Triton loads only tensors whose sizes are powers of two:
the feature width d (the loss) and the head widths H and d / K (the graph
kernel) must be. A `pallas_call` is one device's program: under a mesh of
several devices XLA does not partition it (the tests' 8 CPU devices run the
interpreted form, which is plain XLA); the kernels are meant for one device
until they are wrapped in `shard_map`.
"""
from __future__ import annotations

import dataclasses

import jax

FORMS = ("gpu", "tpu")


@dataclasses.dataclass(frozen=True)
class KernelMode:
  """How a kernel runs: `form` ('gpu' or 'tpu') and whether in interpret mode."""
  form: str
  interpret: bool

  def __post_init__(self):
    if self.form not in FORMS:
      raise ValueError(f"kernel form {self.form!r} is not one of {list(FORMS)}")


def kernel_mode(form: str | None = None, interpret: bool | None = None) -> KernelMode:
  """The mode of a kernel traced now.

  form: None picks the form of JAX's default backend: 'tpu' on a TPU, else
    'gpu' (also on the CPU, where it is interpreted).
  interpret: None interprets unless the default backend is a GPU or a TPU
    (Pallas compiles kernels for those only).

  The default backend is read when the calling function is traced: a
  program for another backend's devices (a CPU mesh on a GPU host) must pass
  both arguments.
  """
  backend = jax.default_backend()
  native = "tpu" if backend == "tpu" else ("gpu" if backend in ("gpu", "cuda", "rocm") else None)
  if form is None:
    form = "tpu" if native == "tpu" else "gpu"
  if interpret is None:
    interpret = native != form
  return KernelMode(form, bool(interpret))


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
