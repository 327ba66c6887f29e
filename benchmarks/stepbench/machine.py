"""Facts about the machine and the running process: memory, CPU, JAX."""
from __future__ import annotations

import os
import platform
import resource


def rss_mb() -> float:
  """Peak resident set size of this process so far (ru_maxrss), MiB."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def current_rss_mb() -> float:
  """Resident set size of this process now (/proc/self/statm), MiB; NaN
  where /proc is missing."""
  try:
    with open("/proc/self/statm") as f:
      return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
  except OSError:
    return float("nan")


def machine_info() -> dict:
  """Host name, CPU model, core counts, load average and Python version."""
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          cpu = line.split(":", 1)[1].strip()
          break
  except OSError:
    pass
  try:
    load = [round(x, 2) for x in os.getloadavg()]
  except OSError:
    load = None
  return {"host": platform.node(), "cpu": cpu, "cores": os.cpu_count(),
          "affinity": len(os.sched_getaffinity(0)), "loadavg": load,
          "python": platform.python_version()}


def jax_info() -> dict:
  """JAX's version, backend, first device kind, device count and XLA_FLAGS."""
  import jax  # imported here: the driver never imports JAX
  dev = jax.devices()[0]
  return {"jax": jax.__version__, "backend": jax.default_backend(),
          "device_kind": getattr(dev, "device_kind", str(dev)),
          "devices": jax.device_count(), "xla_flags": os.environ.get("XLA_FLAGS", "")}


def device_memory() -> dict | None:
  """memory_stats() of the first device (GPU/TPU), MiB; None where
  unavailable (CPU)."""
  import jax
  try:
    stats = jax.devices()[0].memory_stats()
  except Exception:  # noqa: BLE001 - backends without the API
    return None
  if not stats:
    return None
  keep = ("peak_bytes_in_use", "bytes_in_use", "bytes_limit", "largest_alloc_size")
  return {k: round(stats[k] / 2**20, 1) for k in keep if k in stats} | {"unit": "MiB"}
