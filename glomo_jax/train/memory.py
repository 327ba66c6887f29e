"""What a compiled program needs of one device's memory, and the one-line
error of a program that does not fit.

XLA reports per device (`Compiled.memory_analysis()`): the arguments (the
state and the batch), the outputs, the bytes of outputs that reuse a donated
argument's buffer (`alias`: the loop donates the train step's state), the
temporaries (`temp`), the generated code, and the compiler's peak (`peak`,
arguments included; on a small program it can exceed arguments + temp).
What a program needs of a device (`needed`) is

    peak + outputs − alias + code

On a TPU `temp` is not what the program is given: where the compiler
packs a program under pressure, its one temporary buffer (the buffer
assignment's) is within a GiB above `peak − arguments` while `temp` stands
up to 9 GiB higher, even above the HBM of programs the compiler accepts (a
fused v5p-8 step at 8,064 rows: buffer 90.59 GiB, peak 90.55, temp
99.52, accepted against 95.74 GiB); far below the HBM `temp` is 9 to 46 %
above the buffer (the paper step at 32 rows, docs/tpu.md). `total`
(arguments + outputs − alias + temp + code) is kept for comparison. A
program fits when the compiler accepts it (its own exact count against the
HBM it sees: a refusal is `ProgramDoesNotFitError`) and `needed` is within
the chip's HBM.

The TPU compiler refuses a program that exceeds the chip's HBM
("RESOURCE_EXHAUSTED: Ran out of memory on HBM … (25.81G) exceeds
available HBM (15.75G)", or "… Ran out of memory in memory space hbm.
Used 15.84G of 15.75G hbm"), whether it runs on a TPU or is compiled for one
elsewhere (`glomo_jax.train.tpu_slices`); `ProgramDoesNotFitError` carries
that refusal as one line naming the program, the device, the bytes and the
settings that change them.
"""
from __future__ import annotations

import dataclasses
import re

from glomo_jax.tpu import GiB

_UNITS = {"K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}
# libtpu's words for a program over the HBM: "... (25.81G) exceeds available HBM (15.75G)"
_HBM = re.compile(r"\(([\d.]+)([KMGT])\)\s*exceeds available HBM\s*\(([\d.]+)([KMGT])\)")
# or, from the heap's layout: "CompileTimeHbmOom: ... Ran out of memory in memory space hbm.
# Used 15.84G of 15.75G hbm. Exceeded hbm capacity by 94.57M."
_HBM_USED = re.compile(r"Ran out of memory in memory space hbm\. Used ([\d.]+)([KMGT]) of "
                       r"([\d.]+)([KMGT]) hbm")
# and of a Pallas kernel over its VMEM limit: "... allocating on stack for
# %jvp_tied_softmax_rows_tpu_.1 = ... Scoped allocation with size 54.50M and limit 16.00M"
_VMEM = re.compile(r"Scoped allocation with size ([\d.]+)([KMGT]) and limit ([\d.]+)([KMGT])")
_VMEM_KERNEL = re.compile(r"allocating on stack for %(?:jvp_|transpose_)*(\w+?)_?(?:\.\d+)? =")
# and of a kernel whose VMEM limit is raised to the whole VMEM and is still
# short: "Ran out of memory in memory space vmem. Used 135.82M of 128.00M
# vmem. … Largest program allocations in vmem: 1. … XLA label:
# jvp_tied_softmax_vocab_tpu_.1 = custom-call(…), custom_call_target="tpu_custom_call""
# (or "… spill slots in HLO :: jvp_tied_softmax_rows_tpu_.1"): the first
# Mosaic call named is the largest allocation's
_VMEM_TOTAL = re.compile(r"Ran out of memory in memory space vmem\. Used ([\d.]+)([KMGT]) of "
                         r"([\d.]+)([KMGT]) vmem")
_MOSAIC_LABEL = re.compile(r"XLA label: %?([\w.]+) = custom-call\((?:(?!XLA label).)*?\), "
                           r'custom_call_target="tpu_custom_call"')


def advice(batch_flag: str, kernels_flag: str | None = None) -> str:
  """What a user changes when a program does not fit: the batch
  (`batch_flag`), the fsdp split, and where the task has a choice of kernels
  (`kernels_flag`), the kernels."""
  split = "split the parameters and optimiser state over more devices (--config.loop.mesh_fsdp=N)"
  if kernels_flag is None:
    return f"lower the batch ({batch_flag}) or {split}"
  return (f"lower the batch ({batch_flag}), {split} or change the kernels "
          f"({kernels_flag}=reference|fused)")


@dataclasses.dataclass(frozen=True)
class ProgramMemory:
  """Per-device bytes of a compiled program (module docstring)."""
  argument: int
  output: int
  alias: int
  temp: int
  code: int
  peak: int = 0     # 0 where the backend does not report it

  @classmethod
  def of(cls, compiled) -> "ProgramMemory":
    m = compiled.memory_analysis()
    return cls(argument=int(m.argument_size_in_bytes), output=int(m.output_size_in_bytes),
               alias=int(m.alias_size_in_bytes), temp=int(m.temp_size_in_bytes),
               code=int(m.generated_code_size_in_bytes),
               peak=int(getattr(m, "peak_memory_in_bytes", 0) or 0))

  @property
  def total(self) -> int:
    """arguments + outputs − alias + temporaries + code: the heap's sum
    (module docstring)."""
    return self.argument + self.output - self.alias + self.temp + self.code

  @property
  def needed(self) -> int:
    """What the program needs of a device: the compiler's peak + outputs −
    alias + code, or `total` where the backend reports no peak."""
    if not self.peak:
      return self.total
    return self.peak + self.output - self.alias + self.code

  def to_dict(self) -> dict:
    return dict(dataclasses.asdict(self), total=self.total, needed=self.needed)


class ProgramDoesNotFitError(ValueError):
  """A program that the compiler refused for want of device memory; ``str()``
  is one line. Attributes: needed, available (bytes, None where the
  compiler's message gave none), memory ('HBM' or 'VMEM')."""

  def __init__(self, message: str, needed: int | None = None,
               available: int | None = None, memory: str = "HBM"):
    super().__init__(message)
    self.needed, self.available, self.memory = needed, available, memory


def _bytes(value: str, unit: str) -> int:
  return int(float(value) * _UNITS[unit])


def is_out_of_memory(error: BaseException) -> bool:
  """The compiler refused a program for want of device memory (HBM, or a
  kernel's VMEM)."""
  return "RESOURCE_EXHAUSTED" in str(error)


def _largest_mosaic_call(text: str) -> str | None:
  """The kernel (pallas_call name) of the Mosaic call that a VMEM message
  names first (`_VMEM_TOTAL`), or None."""
  labels = {m.group(1) for m in _MOSAIC_LABEL.finditer(text)}
  if not labels:
    return None
  first = min(labels, key=text.find)
  return re.sub(r"_?\.\d+$", "", re.sub(r"^(?:jvp_|transpose_)+", "", first))


def does_not_fit(name: str, device: str, error: BaseException,
                 batch_flag: str = "--config.batch_size",
                 kernels_flag: str | None = None) -> ProgramDoesNotFitError:
  """The one-line error of `name` refused by the compiler for `device` (a
  description such as 'TPU v5 lite (v5e-8, 8 devices)'), from the compiler's
  `error` (`is_out_of_memory`); the flags as `advice`'s."""
  text = " ".join(str(error).split())
  change = advice(batch_flag, kernels_flag)
  hbm = _HBM.search(text) or _HBM_USED.search(text)
  if hbm:
    needed, available = _bytes(*hbm.group(1, 2)), _bytes(*hbm.group(3, 4))
    return ProgramDoesNotFitError(
        f"the {name} does not fit on {device}: it needs {needed / GiB:.2f} GiB of HBM per "
        f"device, {available / GiB:.2f} GiB are available; {change}", needed, available)
  vmem = _VMEM.search(text) or _VMEM_TOTAL.search(text)
  if vmem:
    kernel = _VMEM_KERNEL.search(text)
    kernel = kernel.group(1) if kernel else _largest_mosaic_call(text)
    what = f"the Pallas kernel {kernel}" if kernel else "a Pallas kernel"
    needed, limit = _bytes(*vmem.group(1, 2)), _bytes(*vmem.group(3, 4))
    return ProgramDoesNotFitError(
        f"the {name} does not fit on {device}: {what} needs {needed / 2 ** 20:.1f} MiB of "
        f"VMEM, its limit is {limit / 2 ** 20:.1f} MiB; use smaller kernel blocks or "
        "--config.model.kernels=reference", needed, limit, memory="VMEM")
  return ProgramDoesNotFitError(f"the {name} does not fit on {device} ({text[:300]}); {change}")
