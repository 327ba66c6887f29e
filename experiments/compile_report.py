"""The compile check of `experiments.tpu_compile`: a run's programs compiled
for a slice's devices by the loop's own `RunPrograms`, their per-device
bytes, and the search for the largest batch that fits."""
from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from typing import Callable

import jax

from experiments import compile_targets
from experiments.kinds import KINDS
from glomo_jax.tpu import GiB, MiB
from glomo_jax.train.memory import ProgramDoesNotFitError, ProgramMemory, advice
from glomo_jax.train.programs import RunPrograms
from glomo_jax.train.sharding import batch_sharding, make_mesh, replicated

_MOSAIC = re.compile(r'%([A-Za-z_]\w*?)(?:\.\d+)? = [^\n]*custom_call_target="tpu_custom_call"')


@contextlib.contextmanager
def jax_config(name: str, value):
  """JAX's config option `name` set to `value` within the block."""
  before = getattr(jax.config, name)
  jax.config.update(name, value)
  try:
    yield
  finally:
    jax.config.update(name, before)


def no_persistent_cache():
  """Nothing written to JAX's persistent compilation cache (where one is
  set): an executable of compile-only devices cannot be loaded back."""
  return jax_config("jax_persistent_cache_min_compile_time_secs", float("inf"))


def mosaic_calls(hlo_text: str) -> dict[str, int]:
  """{kernel: calls} of the Pallas (Mosaic) kernels in a compiled module's text."""
  names = _MOSAIC.findall(hlo_text)
  return {n: names.count(n) for n in sorted(set(names))}


def batch_field(kind: str) -> str:
  """The config field of a kind's global batch size: a downstream kind's
  config holds it in `optim` (`kinds.KINDS`)."""
  return "optim.batch_size" if KINDS[kind].downstream else "batch_size"


def with_batch(config, kind: str, batch: int):
  """`config` with its global batch set to `batch`."""
  if batch_field(kind) == "batch_size":
    return dataclasses.replace(config, batch_size=batch)
  return dataclasses.replace(config, optim=dataclasses.replace(config.optim, batch_size=batch))


def batch_of(config, kind: str) -> int:
  return config.batch_size if batch_field(kind) == "batch_size" else config.optim.batch_size


class Checker:
  """Compiles run kind `kind`'s programs for `devices` (a `tpu_slices.Slice`'s).

  Attributes:
    hbm: bytes a program may use per device: `limit`, else the chip's HBM.
  """

  def __init__(self, kind: str, tpu, devices, sizes=compile_targets.Sizes(),
               limit: int | None = None):
    self.kind, self.tpu, self.devices, self.sizes = kind, tpu, devices, sizes
    self.hbm = limit or tpu.generation.hbm_bytes
    self.rows: dict[int, dict] = {}

  def _setup(self, config):
    loop = config.loop
    mesh = make_mesh(loop.mesh_data, loop.mesh_fsdp, self.devices)
    with jax.set_mesh(mesh):
      target = compile_targets.target(self.kind, config, self.sizes)
      programs = RunPrograms(target.task, mesh)
    return mesh, target, programs

  def _row(self, name: str, target, mesh, compile_fn: Callable) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    with jax.set_mesh(mesh), no_persistent_cache():
      compiled = compile_fn()
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    memory = ProgramMemory.of(compiled)
    if memory.needed > self.hbm:
      raise ProgramDoesNotFitError(
          f"the {name} does not fit on {self.tpu.describe()}: it needs "
          f"{memory.needed / GiB:.2f} GiB per device, the limit is {self.hbm / GiB:.2f} GiB; "
          + advice(target.task.batch_flag, getattr(target.task, "kernels_flag", None)),
          memory.needed, self.hbm)
    cost = compiled.cost_analysis() or {}
    if isinstance(cost, list):
      cost = cost[0] if cost else {}
    return {"program": name, "seconds": seconds, "cpu_seconds": cpu_seconds,
            "memory": memory.to_dict(),
            "mosaic_calls": mosaic_calls(compiled.as_text()),
            "flops": float(cost.get("flops", 0.0)), "assumed": target.assumed,
            "target": target.name}

  def compile_all(self, config, which=("train", "eval", "predict")) -> list[dict]:
    """A row per program of `which` (`_row`): train step, eval step, the
    export's predict (kinds that export a predictor)."""
    mesh, target, programs = self._setup(config)
    rows = []
    if "train" in which:
      rows.append(self._row("train step", target, mesh,
                            lambda: programs.compile_train(target.train)))
    if "eval" in which:
      rows.append(self._row("eval step", target, mesh,
                            lambda: programs.compile_eval(target.eval)))
    if "predict" in which and target.predict is not None:
      rows.append(self._row("export's predict", target, mesh,
                            lambda: compile_predict(target, mesh)))
    return rows

  def fits(self, config) -> tuple[bool, int | None]:
    """(whether the train step fits, its bytes or the compiler's count); the
    step's row (`compile_all`) is kept in `self.rows` by its batch."""
    try:
      row = self.compile_all(config, ("train",))[0]
    except ProgramDoesNotFitError as e:
      return False, e.needed
    self.rows[batch_of(config, self.kind)] = row
    return True, row["memory"]["needed"]

  def find_batch(self, config, max_batch: int = 1 << 16, log: Callable = print,
                 step: int | None = None) -> dict:
    """The largest global batch (a multiple of `step`, default the device
    count; at most `max_batch`) whose train step fits, found by compiling.
    A step's bytes grow nearly linearly with its batch, so each next batch
    tried is where the line through the two largest that fit reaches the
    limit (from the config's batch and twice it; through the smallest and
    the largest where the compiler, packing harder near the limit, gave the
    larger batch fewer bytes), kept between the largest that fits and the
    smallest that does not; where it gives no new batch, bisection. It ends
    when those two are one step apart. Near the limit the bytes need not
    grow with the batch, so a batch past the one found may fit too: the
    search reports the boundary it brackets. Returns {'batch',
    'bytes', 'next' (the smallest tried that does not fit), 'next_bytes',
    'tries'}."""
    step = step or len(self.devices)
    if step % len(self.devices):
      raise ValueError(f"the batch step {step} is not a multiple of the "
                       f"{len(self.devices)} devices")
    tries = {}

    def probe(batch: int) -> bool:
      ok, used = self.fits(with_batch(config, self.kind, batch))
      tries[batch] = (ok, used)
      log(f"  batch {batch:6d}: {'fits' if ok else 'does not fit'}"
          + (f" ({used / GiB:.2f} GiB)" if used else ""))
      return ok

    start = max(step, min(batch_of(config, self.kind), max_batch) // step * step)
    good, bad = (start, None) if probe(start) else (0, start)
    while (bad is None or bad - good > step) and good + step <= max_batch:
      fitted = sorted(b for b, (ok, _) in tries.items() if ok)
      top = bad if bad is not None else max_batch + step
      guess = None
      if len(fitted) >= 2:
        (b0, m0), (b1, m1) = [(b, tries[b][1]) for b in fitted[-2:]]
        if m1 <= m0:    # the compiler packs harder near the limit: the line from the smallest
          b0, m0 = fitted[0], tries[fitted[0]][1]
        if m1 > m0:
          guess = b1 + int((0.98 * self.hbm - m1) * (b1 - b0) / (m1 - m0)) // step * step
          guess = max(guess, good + step)
          guess = guess if guess < top else None
      if guess is None and good and bad is None:     # no line yet: double
        guess = min(2 * good, max_batch) // step * step
      if guess is None or guess in tries:
        guess = (good + top) // 2 // step * step
        if guess <= good or guess in tries:
          break
      if probe(guess):
        good = guess
      else:
        bad = guess
    if bad is not None and bad > max_batch:
      bad = None
    found = {b: used for b, (_, used) in tries.items()}
    return {"batch": good or None, "bytes": found.get(good), "next": bad,
            "next_bytes": found.get(bad),
            "tries": [{"batch": b, "fits": ok, "bytes": used, "row": self.rows.get(b)}
                      for b, (ok, used) in tries.items()]}


def compile_predict(target, mesh):
  """The export's predict jitted as a user's program runs it: the variables
  replicated, the batch split over the mesh."""
  variables, *batch = target.predict_args
  in_sh = (jax.tree_util.tree_map(lambda _: replicated(mesh), variables),
           *[batch_sharding(mesh, len(b.shape)) for b in batch])
  out_rank = 5
  jitted = jax.jit(target.predict, in_shardings=in_sh,
                   out_shardings=batch_sharding(mesh, out_rank))
  return jitted.lower(variables, *batch).compile()


def table(rows: list[dict], hbm: int) -> str:
  """A text table of `Checker.compile_all`'s rows (MiB a device; `needed`
  as `train.memory.ProgramMemory.needed`)."""
  head = ("program", "compile CPU s", "arguments", "outputs", "alias", "temporaries", "peak",
          "code", "needed", "of HBM", "Mosaic calls", "GFLOP")
  lines = ["  ".join(f"{h:>12s}" for h in head)]
  for r in rows:
    m = r["memory"]
    calls = sum(r["mosaic_calls"].values())
    cells = [r["program"], f"{r['cpu_seconds']:.1f}"] + [
        f"{m[k] / MiB:.1f}" for k in ("argument", "output", "alias", "temp", "peak", "code",
                                     "needed")
    ] + [f"{100 * m['needed'] / hbm:.1f} %", str(calls), f"{r['flops'] / 1e9:.1f}"]
    lines.append("  ".join(f"{c:>12s}" for c in cells))
  return "\n".join(lines)
