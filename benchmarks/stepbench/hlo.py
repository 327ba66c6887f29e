"""What XLA says about a compiled step: its cost and memory analyses, and
the arrays and ops of its optimised HLO text."""
from __future__ import annotations

import re

_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(\w+)\[([\d,]*)\]")


def cost_analysis(compiled) -> dict:
  """XLA's cost analysis of a compiled executable (flops, bytes accessed, ...)."""
  try:
    cost = compiled.cost_analysis()
  except Exception as e:  # noqa: BLE001
    return {"error": repr(e)[:200]}
  if isinstance(cost, (list, tuple)):
    cost = cost[0] if cost else {}
  keep = ("flops", "transcendentals", "bytes accessed", "optimal_seconds")
  return {k: float(cost[k]) for k in keep if k in (cost or {})}


def memory_analysis(compiled) -> dict | None:
  """The executable's buffer sizes (temporaries, arguments, outputs, ...), MiB."""
  try:
    m = compiled.memory_analysis()
  except Exception:  # noqa: BLE001
    return None
  if m is None:
    return None
  names = ("temp_size_in_bytes", "argument_size_in_bytes", "output_size_in_bytes",
           "alias_size_in_bytes", "generated_code_size_in_bytes")
  return {n.replace("_in_bytes", "_mb"): round(getattr(m, n) / 2**20, 1)
          for n in names if hasattr(m, n)}


def vocab_arrays(hlo_text: str, vocab: int, dim: int) -> dict:
  """Arrays with a dimension of size `vocab` in optimised HLO, apart from
  vectors and [V, dim] tables (the embedding, its gradient, its momentum):
  their shapes and counts, split into buffers that an instruction of a
  non-fused computation produces (materialised) and values that live only
  inside a fusion."""
  found = {"materialised": {}, "inside_fusions": {}}
  fused = False
  for line in hlo_text.splitlines():
    m = _COMPUTATION.match(line)
    if m:
      name = m.group(2)
      fused = "fused" in name or "fusion" in name or name.startswith("wrapped_")
      continue
    m = _INSTRUCTION.match(line)
    if not m or not m.group(3):
      continue
    dims = [int(x) for x in m.group(3).split(",")]
    if vocab not in dims or len(dims) < 2:
      continue
    if dims == [vocab, dim]:
      continue
    shape = f"{m.group(2)}[{m.group(3)}]"
    bucket = found["inside_fusions" if fused else "materialised"]
    bucket[shape] = bucket.get(shape, 0) + 1
  return found


def convolutions(hlo_text: str) -> int:
  """The number of convolution ops in HLO text."""
  return len(re.findall(r"\bconvolution\(", hlo_text))
