"""Host memory settings for CPU training (glibc heap, synchronous steps).

XLA:CPU allocates one temporary buffer per executed step (470 MB at the
peer's `small` config, 700 MB at `small` decoding every position, 1.4 GB at
the paper model with batch 8) and, with JAX's default asynchronous CPU
dispatch, frees it from the thread that ran the step *after* the step's
results are ready: the next step's buffer is often requested before the
previous one is freed.

- With glibc's defaults each buffer is a fresh mmap, page-faulted in 4 KiB
  at a time (≈160k faults, 0.3 s of system time a step at `small`).
- Fresh mmaps on transparent huge pages (the setting used before) fault in
  2 MiB at a time, but every step's buffer is still new memory to the
  kernel. On a VM whose balloon reports free pages to the host (this
  project's machines), the host takes back what a step frees after ≈ 2 s,
  and touching it again costs 0.5–1.3 s of system time: every other step
  decoding every position at `small` (1.85 → 2.3–2.8 s).
- Keeping freed memory in the heap (the PyTorch peer's `tune_malloc`) avoids
  both, but with overlapping requests the heap grows by a whole buffer now
  and then (peak RSS +1.4 GB after 11 steps decoding every position at
  `small`; 1.1 → 2.5 GB at `small` in 2 runs of 4).

So `MALLOC_TUNABLES` keeps everything in one never-trimmed heap on
transparent huge pages (no mmaps at all), and `use_synchronous_cpu_dispatch`
turns JAX's asynchronous CPU dispatch off: a step returns once it is done,
its buffer already freed, so the next step's request reuses it instead of
growing the heap. Measured on 2 cores, 30–40 steps in each of 6 runs
(`small`, every position and sampled): flat RSS, no system time after the
first step, every-position steps 1.73–2.26 s with no slow ones. The loss of
overlap between the host and the step costs nothing measurable here: the
input pipeline's host work per step is microseconds.

These glibc settings only work when glibc reads them at process start
(GLIBC_TUNABLES), so `reexec_with_tuned_malloc` restarts the program once
with the variable set (default on; GLOMO_JAX_MALLOC_TUNE=0 turns it off,
and with it the synchronous dispatch). `release_free_memory` hands the
pages that initialisation and compiling left free back to the kernel once
set-up is done.
"""
from __future__ import annotations

import os
import sys

MALLOC_TUNABLES = ("glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:"
                   "glibc.malloc.trim_threshold=18446744073709551615")


def tuned_environment(env: dict | None = None) -> dict:
  """A copy of `env` (default os.environ) with MALLOC_TUNABLES added."""
  env = dict(os.environ if env is None else env)
  current = env.get("GLIBC_TUNABLES", "")
  if MALLOC_TUNABLES not in current:
    env["GLIBC_TUNABLES"] = f"{current}:{MALLOC_TUNABLES}" if current else MALLOC_TUNABLES
  return env


def malloc_tuned() -> bool:
  return MALLOC_TUNABLES in os.environ.get("GLIBC_TUNABLES", "")


def reexec_with_tuned_malloc() -> None:
  """Restarts this process with MALLOC_TUNABLES in its environment, unless
  they are there already, GLOMO_JAX_MALLOC_TUNE=0, or this is not Linux.
  Call it first thing in a program's main (before any work)."""
  if malloc_tuned() or os.environ.get("GLOMO_JAX_MALLOC_TUNE", "1") == "0":
    return
  if not sys.platform.startswith("linux") or not getattr(sys, "orig_argv", None):
    return
  sys.stdout.flush()
  sys.stderr.flush()
  os.execve(sys.executable, sys.orig_argv, tuned_environment())


def use_synchronous_cpu_dispatch() -> bool:
  """Turns JAX's asynchronous CPU dispatch off when the heap is tuned
  (`malloc_tuned`), so that a step's temporary buffer is freed before the
  next step asks for one (see the module docstring). Call it before JAX's
  first computation (the CPU client reads it when it is created). Affects
  only CPU devices; returns whether it was set."""
  if not malloc_tuned():
    return False
  import jax  # noqa: PLC0415 (the benchmark driver loads this module without JAX)
  jax.config.update("jax_cpu_enable_async_dispatch", False)
  return True


def release_free_memory() -> bool:
  """Hands the heap's free pages back to the kernel (glibc ``malloc_trim(0)``).

  Call it once set-up is done (parameters initialised, steps compiled):
  compiling and initialising leave hundreds of MB free but resident (the
  tuned heap never trims by itself), and the training steps then fault in
  only what they use. Returns False where glibc is not available.
  """
  if not sys.platform.startswith("linux"):
    return False
  try:
    import ctypes  # noqa: PLC0415
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return True
  except (OSError, AttributeError):
    return False
