"""One run per workdir: `hold_workdir(workdir)` holds its lock while a run
writes there.

The lock is ``<workdir>/run.lock`` held with `fcntl.flock` by the running
process: a second run on the same workdir (the command started twice, from
two shells) gets a `WorkdirInUseError` naming the holder and starts no
work. The operating system drops the lock when its process ends however it
ends, so a run killed (SIGKILL, a crash, a lost machine) leaves nothing to
clean: the next run takes the lock over. The file records its holder
(process id, host, start time) for the message, and is removed when the
run ends (so is the workdir, if the run created it and wrote nothing: a
mistake found before any work leaves nothing behind).

Several processes (a multi-host job) hold one lock per job: process 0
takes it and tells the others whether it could (a collective: every
process calls `hold_workdir`). Nested calls in one process (a run function
around the training loop) hold the lock once. Where the filesystem has no
locks (some network filesystems), a warning says so and the run goes on.
"""
from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import functools
import logging
import os
import socket
from typing import Iterator

import jax
import numpy as np
from jax.experimental import multihost_utils

from glomo_jax.errors import InputError

logger = logging.getLogger(__name__)

LOCK_FILENAME = "run.lock"
_held: dict[str, list[int]] = {}          # lock path -> [file descriptor, depth]


class WorkdirInUseError(InputError):
  """Another live run holds the workdir's lock."""


def _take(path: str) -> tuple[int | None, str]:
  """(file descriptor holding the lock, ''), or (None, the holder's record)
  when another process holds it; (-1, '') where the filesystem has no locks."""
  fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip()
    os.close(fd)
    return None, holder
  except OSError as e:
    os.close(fd)
    if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
      logger.warning("cannot lock %s (%s): nothing stops a second run on this workdir",
                     path, e.strerror)
      return -1, ""
    raise
  record = (f"pid {os.getpid()} on {socket.gethostname()} since "
            f"{datetime.datetime.now().isoformat(timespec='seconds')}\n").encode()
  with contextlib.suppress(OSError):         # the record is for messages only
    os.ftruncate(fd, 0)
    os.pwrite(fd, record, 0)
  return fd, ""


@contextlib.contextmanager
def hold_workdir(workdir: str) -> Iterator[None]:
  """Holds `workdir`'s lock (created with the directory) for the block.

  Raises:
    WorkdirInUseError: another live run holds it.
  """
  path = os.path.join(os.path.abspath(workdir), LOCK_FILENAME)
  if path in _held:
    _held[path][1] += 1
    try:
      yield
    finally:
      _held[path][1] -= 1
    return
  fd, holder = -1, ""                       # -1: no lock held by this process
  created = False                           # the workdir, by this call
  if jax.process_index() == 0:
    created = not os.path.isdir(os.path.dirname(path))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, holder = _take(path)
  if jax.process_count() > 1:               # process 0's outcome, on every process
    taken = bool(multihost_utils.broadcast_one_to_all(np.int32(fd is not None)))
    if not taken and jax.process_index() != 0:
      fd, holder = None, "process 0 names its holder"
  if fd is None:
    if created:
      _remove_empty(os.path.dirname(path))
    raise WorkdirInUseError(os.path.dirname(path), f"another run is using this workdir "
                            f"({holder or 'its holder left no record'}); wait for it to end, "
                            "or use another --workdir")
  _held[path] = [fd, 1]
  try:
    yield
  finally:
    del _held[path]
    if fd >= 0:
      # removed while still held: a run starting now either meets the held
      # file (and is refused) or makes a new one; never two holders of one
      with contextlib.suppress(OSError):
        os.remove(path)
      fcntl.flock(fd, fcntl.LOCK_UN)
      os.close(fd)
    if created:                             # a run that failed before any work
      _remove_empty(os.path.dirname(path))


def _remove_empty(directory: str) -> None:
  with contextlib.suppress(OSError):
    os.rmdir(directory)                     # only if empty


def holding_workdir(run):
  """Decorates `run(config, workdir, ...)` to hold the workdir's lock
  (`hold_workdir`) for the whole run: data preparation, training, results."""
  @functools.wraps(run)
  def held(config, workdir, *args, **kwargs):
    with hold_workdir(workdir):
      return run(config, workdir, *args, **kwargs)
  return held
