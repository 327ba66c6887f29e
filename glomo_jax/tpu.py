"""TPU generations: what the compiler, the compile check and the Pallas
kernels need to know of each, in one table.

Per device (a chip: v4 and v5p chips hold two TensorCores that JAX drives as
one device, "megacore"): HBM; per TensorCore: VMEM, and the default limit
the compiler gives one kernel's VMEM (its "scoped" limit, raised per kernel
by `pltpu.CompilerParams(vmem_limit_bytes=...)` up to the VMEM). Figures:
Cloud TPU's system architecture pages and `jax.experimental.pallas.tpu`'s
`get_tpu_info_for_chip` (HBM, VMEM); the scoped limits are the compiler's
defaults (16 MiB, 32 MiB on v6e), which its own messages state
("Scoped allocation with size … and limit 16.00M").

The kernels' blocks per generation (`KERNEL_BLOCKS`) are chosen here: each
kernel's VMEM at those blocks stays within the generation's scoped limit
at the paper model's sizes (tests/test_tpu_compile.py compiles them for
every generation); larger blocks on the chips with 128 MiB of VMEM would
need a higher limit (`ops.pallas.tpu_compiler_params` raises it when a
call's estimate asks for it) and have not been timed on a TPU.
"""
from __future__ import annotations

import dataclasses

MiB = 2 ** 20
GiB = 2 ** 30


@dataclasses.dataclass(frozen=True)
class Generation:
  """A TPU generation.

  Attributes:
    name: as slice names write it ('v5e'). device_kind: what
      `jax.Device.device_kind` says of its devices.
    megacore: two TensorCores per chip as one device (slice names count cores).
    torus: 2 (v5e, v6e) or 3 (v4, v5p) axes of chips.
    hbm_gib: HBM per device. vmem_mib: VMEM per TensorCore.
    scoped_vmem_mib: the compiler's default VMEM limit of one kernel.
  """
  name: str
  device_kind: str
  megacore: bool
  torus: int
  hbm_gib: int
  vmem_mib: int
  scoped_vmem_mib: int

  @property
  def hbm_bytes(self) -> int:
    return self.hbm_gib * GiB

  @property
  def vmem_bytes(self) -> int:
    return self.vmem_mib * MiB

  @property
  def scoped_vmem_bytes(self) -> int:
    return self.scoped_vmem_mib * MiB


GENERATIONS = {
    "v4": Generation("v4", "TPU v4", True, 3, 32, 16, 16),
    "v5e": Generation("v5e", "TPU v5 lite", False, 2, 16, 128, 16),
    "v5p": Generation("v5p", "TPU v5", True, 3, 95, 64, 16),
    "v6e": Generation("v6e", "TPU v6 lite", False, 2, 32, 128, 32),
}
# what devices of each generation call themselves (compile-only ones as real ones)
_KINDS = {g.device_kind: g for g in GENERATIONS.values()}
_KINDS.update({"TPU v5e": GENERATIONS["v5e"], "TPU v5p": GENERATIONS["v5p"],
               "TPU v6e": GENERATIONS["v6e"]})
DEFAULT = GENERATIONS["v5e"]    # a TPU form traced for no known device (lowering_for('tpu'))

# Pallas kernels' TPU blocks per generation: tied softmax (rows, vocabulary
# rows), graph mixing (target rows, sources); multiples of Mosaic's (8, 128)
# tiles. At the paper's sizes (d 512, H 256) each call's VMEM stays under
# 16 MiB, every generation's scoped limit.
KERNEL_BLOCKS = {
    name: {"tied_softmax": (256, 512), "graph_mix": (128, 128)} for name in GENERATIONS
}


def generation_of(device_kind: str | None) -> Generation | None:
  """The generation of a device kind ('TPU v5 lite'), or None."""
  return _KINDS.get(device_kind) if device_kind else None
