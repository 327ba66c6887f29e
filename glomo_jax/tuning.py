"""Opt-in tuning for CPU hosts, and the one place for XLA compiler options.

Off by default: a user on a TPU VM, a GPU host or a laptop gets JAX's and
glibc's defaults. ``GLOMO_JAX_CPU_TUNING=1`` in the environment switches on
the settings below, made for training on CPU devices; 1 and 3 act on the
host process (its heap) whatever the devices, 2, 4 and 5 only on CPU ones:

1. glibc heap settings (`MALLOC_TUNABLES`): one never-trimmed heap on
   transparent huge pages, no mmaps, so XLA:CPU's large per-step temporary
   buffer is reused from the heap instead of being mapped and page-faulted
   afresh every step. glibc reads them only at process start, so
   `start_process` restarts the program once with them set.
2. Synchronous CPU dispatch: a step returns once done, its temporary buffer
   already freed, so the next step's request reuses it instead of growing
   the heap.
3. `release_free_memory` (glibc ``malloc_trim``) once set-up is done: the
   pages that compiling and initialising left free go back to the kernel.
4. `compiler_options(platform, one_off=True)`: programs that run once (the
   state's initialisation) compile with XLA:CPU's older emitters at LLVM
   -O1: the same numbers with a smaller compile working set.
5. `split_batch_scores(devices)`: on a single CPU device the graph predictor's
   batched affinity product is computed as two half-batch products, which
   XLA:CPU's executor runs on two threads.

The measurements behind each setting are in benchmarks/RESULTS.md; the
benchmark switches the tuning on for its CPU runs.
"""
from __future__ import annotations

import os
import sys

ENV_VAR = "GLOMO_JAX_CPU_TUNING"
MALLOC_TUNABLES = ("glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:"
                   "glibc.malloc.trim_threshold=18446744073709551615")
# Cheap compiles for tests and smoke runs (CPU only): no LLVM optimisation.
FAST_COMPILE_OPTIONS = {"xla_backend_optimization_level": 0,
                        "xla_cpu_use_fusion_emitters": False}
# The same as XLA_FLAGS, for every program of a process (the test suite).
FAST_COMPILE_XLA_FLAGS = " ".join(f"--{name}={str(value).lower()}"
                                  for name, value in FAST_COMPILE_OPTIONS.items())
# Programs that run once (initialisation), with the tuning on (CPU only).
ONE_OFF_CPU_OPTIONS = {"xla_cpu_use_fusion_emitters": False,
                       "xla_backend_optimization_level": 1}
# XLA_FLAGS of a process pinned to one core (experiments.classify_grid
# --parallel): XLA:CPU's Eigen thread pool off.
ONE_CORE_XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false"
# XLA_FLAGS of short runs that compile much (the accelerator pipeline's graph
# caches, analyses and transfer grids): no Triton GEMM fusions, whose
# autotuning dominates a GPU compile; a run that executes each program
# briefly gains more compile time than the slower steps lose
# (benchmarks/RESULTS.md). Only GPUs read the flag.
SHORT_GPU_RUN_XLA_FLAGS = "--xla_gpu_enable_triton_gemm=false"
# XLA command buffers (CUDA graphs: a program's kernels launched as recorded
# graphs instead of one launch each), opt-in settings that
# `benchmarks/gpu_run.sh` stage `cmdbuf` measures against XLA's default set
# of recorded kinds: off, and every kind including loops and conditionals
# (the tied softmax's scan), however small a graph. Only GPUs read the flags; the product keeps XLA's
# default until a measurement says otherwise (benchmarks/RESULTS.md).
GPU_COMMAND_BUFFERS_OFF_XLA_FLAGS = "--xla_gpu_enable_command_buffer="
GPU_COMMAND_BUFFERS_ALL_XLA_FLAGS = (
    "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,"
    "CONDITIONAL --xla_gpu_graph_min_graph_size=1")


def with_xla_flags(flags: str, env: dict | None = None) -> str:
  """XLA_FLAGS of `env` (default os.environ) with `flags` appended."""
  current = (os.environ if env is None else env).get("XLA_FLAGS", "")
  return f"{current} {flags}".strip()


def enabled(env=None) -> bool:
  """Whether GLOMO_JAX_CPU_TUNING=1 is set (in `env`, default os.environ)."""
  return (os.environ if env is None else env).get(ENV_VAR, "0") == "1"


def tuned_environment(env: dict | None = None) -> dict:
  """A copy of `env` (default os.environ) with MALLOC_TUNABLES added."""
  env = dict(os.environ if env is None else env)
  current = env.get("GLIBC_TUNABLES", "")
  if MALLOC_TUNABLES not in current:
    env["GLIBC_TUNABLES"] = f"{current}:{MALLOC_TUNABLES}" if current else MALLOC_TUNABLES
  return env


def malloc_tuned() -> bool:
  """Whether this process started with MALLOC_TUNABLES."""
  return MALLOC_TUNABLES in os.environ.get("GLIBC_TUNABLES", "")


def start_process() -> bool:
  """Applies settings 1 and 2 when the tuning is on; returns whether it is.

  Call it first thing in a program's main, before JAX computes anything: on
  Linux it restarts the program once (same argv, MALLOC_TUNABLES added);
  synchronous dispatch follows the glibc settings (without them, on other
  systems, neither is applied).
  """
  if not enabled():
    return False
  if (not malloc_tuned() and sys.platform.startswith("linux")
      and getattr(sys, "orig_argv", None)):
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, tuned_environment())
  if malloc_tuned():
    import jax  # noqa: PLC0415 (the benchmark driver loads this module without JAX)
    jax.config.update("jax_cpu_enable_async_dispatch", False)
  return True


def describe() -> str:
  """One line for the logs: whether the tuning is on and what of it applies."""
  if not enabled():
    return "off (GLOMO_JAX_CPU_TUNING=1 switches it on)"
  return f"on (glibc heap settings {'in place' if malloc_tuned() else 'not in place'})"


def release_free_memory() -> bool:
  """glibc ``malloc_trim(0)`` when the tuning is on; returns whether it ran."""
  if not enabled() or not sys.platform.startswith("linux"):
    return False
  try:
    import ctypes  # noqa: PLC0415
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return True
  except (OSError, AttributeError):
    return False


def compiler_options(platform: str, *, fast: bool = False,
                     one_off: bool = False) -> dict | None:
  """XLA options for `jax.jit(...).lower(...).compile(compiler_options=...)`.

  platform: of the devices the program runs on ('cpu', 'gpu', 'tpu').
  fast: cheap compiles (tests, smoke presets). one_off: a program that runs
  once (setting 4, with the tuning on). Only the CPU gets options; None
  elsewhere.
  """
  if platform != "cpu":
    return None
  if fast:
    return dict(FAST_COMPILE_OPTIONS)
  if one_off and enabled():
    return dict(ONE_OFF_CPU_OPTIONS)
  return None


def split_batch_scores(devices) -> bool:
  """Setting 5: the tuning is on and `devices` (a run's mesh) is one CPU device."""
  devices = list(devices)
  return enabled() and len(devices) == 1 and devices[0].platform == "cpu"
