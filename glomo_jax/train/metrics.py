"""Console progress and TensorBoard event files (tensorboardX: no TensorFlow)."""
from __future__ import annotations

import logging
import os
import time

logger = logging.getLogger("glomo_jax.train")


class MetricWriter:
  """Scalars to <workdir>/tensorboard (process 0 only); a no-op elsewhere."""

  def __init__(self, workdir: str, enabled: bool = True):
    self.writer = None
    if enabled:
      from tensorboardX import SummaryWriter
      self.writer = SummaryWriter(os.path.join(workdir, "tensorboard"))

  def scalars(self, step: int, values: dict, prefix: str = "") -> None:
    if self.writer is None:
      return
    for k, v in values.items():
      self.writer.add_scalar(prefix + k, float(v), step)
    self.writer.flush()

  def close(self):
    if self.writer is not None:
      self.writer.close()


class Progress:
  """Steps/s, tokens/s and ETA over the last logging interval."""

  def __init__(self, first_step: int, last_step: int, tokens_per_step: int):
    self.last_step, self.tokens_per_step = last_step, tokens_per_step
    self._t, self._step = time.perf_counter(), first_step
    self.start = self._t

  def restart(self, step: int) -> None:
    """Excludes time spent since the last update (evaluation, saving)."""
    self._t, self._step = time.perf_counter(), step

  def peek(self, step: int) -> dict:
    """Rates since the last update, without starting a new interval."""
    rate = (step - self._step) / max(time.perf_counter() - self._t, 1e-9)
    eta = (self.last_step - step) / rate if rate > 0 else float("inf")
    return {"steps_per_s": rate, "tokens_per_s": rate * self.tokens_per_step, "eta_s": eta}

  def update(self, step: int) -> dict:
    """Rates since the last update; starts a new interval."""
    rates = self.peek(step)
    self._t, self._step = time.perf_counter(), step
    return rates


def format_eta(seconds: float) -> str:
  if seconds == float("inf"):
    return "?"
  seconds = int(seconds)
  return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
