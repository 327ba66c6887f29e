"""Preemption: a SIGTERM makes every process save the same step and stop.

One process: a SIGTERM handler sets a flag, checked once per step. Several
processes (jax.distributed): JAX's coordination service watches for SIGTERM
on every host (its preemption sync manager, started by
`jax.distributed.initialize`), and `reached_preemption_sync_point(step)`
returns True on every process at the same step, however far apart the hosts'
notices arrived. No Python handler is installed then: it would replace
JAX's. Without a sync manager (the preemption service turned off), each
process's own flag is all-gathered every step instead.
"""
from __future__ import annotations

import logging
import signal

import jax
import numpy as np
from jax.experimental import multihost_utils

logger = logging.getLogger("glomo_jax.train")


def _sync_manager():
  from jax._src import distributed  # noqa: PLC0415 (JAX's own handle on the service)
  return getattr(distributed.global_state, "preemption_sync_manager", None)


class Preemption:
  """Context manager; `reached(step)` says whether to save and stop now."""

  def __init__(self):
    self.requested = False
    self._old = None
    self._agree = jax.process_count() > 1
    self._jax_sync = self._agree and _sync_manager() is not None

  def __enter__(self):
    if not self._jax_sync:
      try:
        self._old = signal.signal(signal.SIGTERM, self._handle)
      except ValueError:  # not the main thread: no handler
        self._old = None
    return self

  def _handle(self, signum, frame):
    del signum, frame
    logger.warning("SIGTERM received: saving a checkpoint and stopping")
    self.requested = True

  def reached(self, step: int) -> bool:
    """True at the same step on every process once any of them got SIGTERM."""
    if self._jax_sync:
      if multihost_utils.reached_preemption_sync_point(step):
        logger.warning("preemption notice (SIGTERM on a host): saving step %d and stopping",
                       step)
        self.requested = True
    elif self._agree:
      flags = multihost_utils.process_allgather(np.int32(self.requested))
      self.requested = bool(np.any(flags))
    return self.requested

  def __exit__(self, *exc):
    if self._old is not None:
      signal.signal(signal.SIGTERM, self._old)
