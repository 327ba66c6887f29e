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

The kernels' blocks per generation (`KERNEL_BLOCKS`) are chosen here, from
the width of the generation's matrix units (`mxu`: 128, 256 on v6e): the
graph kernel's tiles one MXU square (an axis within two of them is one
whole block, unpadded), the tied softmax's (2, 4) times the width. Each kernel's VMEM at those blocks stays within the generation's
scoped limit at the paper model's sizes (tests/test_tpu_compile.py compiles
them); a call whose estimate passes it gets a higher limit
(`ops.pallas.tpu_compiler_params`), up to the VMEM. The blocks have not
been timed on a TPU.
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
    mxu: the side of a matrix unit's systolic array (128, or 256 on v6e).
  """
  name: str
  device_kind: str
  megacore: bool
  torus: int
  hbm_gib: int
  vmem_mib: int
  scoped_vmem_mib: int
  mxu: int

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
    "v4": Generation("v4", "TPU v4", True, 3, 32, 16, 16, 128),
    "v5e": Generation("v5e", "TPU v5 lite", False, 2, 16, 128, 16, 128),
    "v5p": Generation("v5p", "TPU v5", True, 3, 95, 64, 16, 128),
    "v6e": Generation("v6e", "TPU v6 lite", False, 2, 32, 128, 32, 256),
}
# what devices of each generation call themselves (compile-only ones as real ones)
_KINDS = {g.device_kind: g for g in GENERATIONS.values()}
_KINDS.update({"TPU v5e": GENERATIONS["v5e"], "TPU v5p": GENERATIONS["v5p"],
               "TPU v6e": GENERATIONS["v6e"]})
DEFAULT = GENERATIONS["v5e"]    # a TPU form traced for no known device (lowering_for('tpu'))

# Pallas kernels' TPU blocks per generation: tied softmax (rows, vocabulary
# rows), graph mixing (target rows, sources); multiples of Mosaic's (8, 128)
# tiles and of the MXU. At the paper's sizes (d 512, H 256, float32) each
# call's VMEM estimate (`ops.pallas.tpu_vmem`) stays within the scoped limit:
# the tied softmax's 8.75 MiB at (256, 512), 19.5 MiB at (512, 1024) (v6e: 32).
KERNEL_BLOCKS = {
    name: {"tied_softmax": (2 * g.mxu, 4 * g.mxu), "graph_mix": (g.mxu, g.mxu)}
    for name, g in GENERATIONS.items()
}


def generation_of(device_kind: str | None) -> Generation | None:
  """The generation of a device kind ('TPU v5 lite'), or None."""
  return _KINDS.get(device_kind) if device_kind else None
