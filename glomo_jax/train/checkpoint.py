"""Orbax checkpoints of the train state plus the data iterator's position.

Each checkpoint step holds two items: 'state' (the TrainState pytree, sharded
arrays restored onto the current mesh) and 'extra' (JSON: the data iterator's
state and run metadata). Saves are asynchronous; `wait` before exiting.
Restoring walks back from the newest step: a checkpoint that fails to load
(half-written, truncated, corrupt) is skipped with a warning and the one
before it is used, and the unreadable newer steps are moved aside to
`<directory>-unreadable/<step>` (kept for inspection, out of the way of the
resumed run's own saves of those steps). Half-written saves that orbax never
committed are not listed at all. A checkpoint whose saved arrays have other
paths or shapes than the run's state (another model or optimiser config) is
an `UnrestorableCheckpointError` naming the first difference, found from the
metadata before any restore; nothing is moved or overwritten.

Integrity: orbax finds a cut-short array file but not overwritten bytes
(its compressed chunks carry no checksum), nor a changed JSON item. So each
save stores, in 'extra' under "integrity", a fingerprint of every array of
the state (`fingerprints`) and the sha256 of the rest of 'extra' (and marks
the step's orbax metadata as holding one); a restore whose arrays or JSON
do not match is unreadable like a corrupt one (the step before it is used).
Checkpoints saved without the record (older glomo_jax) are read as they are.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from jax.experimental import multihost_utils

from glomo_jax.errors import write_failed

INTEGRITY = "integrity"       # the key of the record in 'extra'


class UnrestorableCheckpointError(RuntimeError):
  """Checkpoints exist but none of them loads into this run's state."""


class Checkpointer:
  """Periodic + final saves, keep-N (None: keep all), newest-valid restore."""

  def __init__(self, directory: str, keep: int | None = 3, save_every: int = 1,
               async_save: bool = True):
    self.directory = os.path.abspath(directory)
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep, save_interval_steps=max(1, save_every),
        enable_async_checkpointing=async_save, create=True)
    manager = lambda: ocp.CheckpointManager(  # noqa: E731
        self.directory, options=options, item_names=("state", "extra"))
    try:
      self.manager = manager()
    except Exception as e:  # noqa: BLE001 (orbax reads every step's metadata here)
      damaged = [int(d) for d in os.listdir(self.directory)
                 if d.isdigit() and not _metadata_readable(os.path.join(self.directory, d))]
      if not damaged:
        raise UnrestorableCheckpointError(
            f"the checkpoints in {self.directory} cannot be listed ({type(e).__name__}: "
            f"{str(e).splitlines()[0][:200] if str(e) else ''})") from e
      self._move_aside(damaged)
      self.manager = manager()

  def steps(self) -> list[int]:
    return sorted(self.manager.all_steps())

  def save(self, step: int, state, extra: dict, force: bool = False) -> bool:
    """Saves if the step is on the interval (or `force`); returns whether it
    did. `extra` (JSON) gets the integrity record (module docstring)."""
    if not force and not self.manager.should_save(step):
      return False
    sealed = dict(extra, **{INTEGRITY: _record(extra, fingerprints(state))})
    return self._writing(lambda: self.manager.save(
        step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                      extra=ocp.args.JsonSave(sealed)),
        custom_metadata={INTEGRITY: True}, force=force))

  def _writing(self, write):
    """`write()`; an OSError of a save (no space, no permission; an
    asynchronous save's surfaces at the next save or `wait`) becomes one
    naming the directory and the last checkpoint kept. orbax commits a step
    by renaming it into place, so a failed save leaves the earlier steps as
    they were and the next run resumes from the last of them."""
    try:
      return write()
    except OSError as e:
      steps = self.steps()
      kept = (f"the checkpoints saved before are kept (last: step {steps[-1]}); rerun to "
              "resume from it" if steps else "no checkpoint had been saved")
      raise write_failed(self.directory, e, kept) from e

  def restore(self, step: int, abstract_state) -> tuple[Any, dict]:
    """(state, extra) of the checkpoint at `step` (arrays placed as
    `abstract_state`'s shardings say), checked against its integrity record.

    Raises:
      ValueError: the arrays or 'extra' differ from the record.
    """
    restored = self.manager.restore(
        step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state),
                                      extra=ocp.args.JsonRestore()))
    state, extra = restored["state"], dict(restored["extra"])
    record = extra.pop(INTEGRITY, None)
    if record is None and (self.manager.metadata(step).custom_metadata or {}).get(INTEGRITY):
      raise ValueError(f"the JSON item of step {step} lost its integrity record")
    if record is not None:
      if not isinstance(record, dict) or record != _record(extra, record.get("arrays")):
        raise ValueError(f"the JSON item of step {step} differs from its sha256 hash")
      stored = fingerprints(state)
      changed = sorted(p for p in stored.keys() | record["arrays"].keys()
                       if stored.get(p) != record["arrays"].get(p))
      if changed:
        raise ValueError(f"the arrays of step {step} differ from their fingerprints "
                         f"({', '.join(changed[:3])})")
    return state, extra

  def stored_shapes(self, step: int) -> dict[str, tuple[int, ...]]:
    """{path: shape} of every array of the state saved at `step` (paths as
    `shapes_by_path` writes them), read from the checkpoint's metadata
    without restoring it."""
    handler = ocp.StandardCheckpointHandler()
    try:
      metadata = handler.metadata(epath.Path(self.directory) / str(step) / "state")
    finally:
      handler.close()
    return shapes_by_path(getattr(metadata, "tree", metadata))  # a plain tree in older orbax

  def shape_difference(self, step: int, abstract_state) -> str | None:
    """The first array whose saved shape at `step` differs from
    `abstract_state`'s, or that only one side has, in words; None when all
    agree or the metadata cannot be read (a restore then says what is wrong)."""
    try:
      stored = self.stored_shapes(step)
    except Exception:  # noqa: BLE001 (a corrupt checkpoint: left to the restore)
      return None
    wanted = shapes_by_path(abstract_state)
    for path in sorted(stored.keys() | wanted.keys()):
      if path not in wanted:
        return f"it holds {path}, which this run's state has not"
      if path not in stored:
        return f"it lacks {path} {wanted[path]}"
      if stored[path] != wanted[path]:
        return f"{path} is {stored[path]} there and {wanted[path]} here"
    return None

  def check_fits(self, abstract_state) -> dict[int, str | None]:
    """{step: `shape_difference`} of every checkpoint, newest first, read
    from the metadata alone (the loop asks before anything compiles).

    Raises:
      UnrestorableCheckpointError: no checkpoint's arrays fit
        `abstract_state`: another model's or optimiser's.
    """
    steps = list(reversed(self.steps()))
    differences = {step: self.shape_difference(step, abstract_state) for step in steps}
    if steps and all(differences.values()):
      raise UnrestorableCheckpointError(
          f"the checkpoint at step {steps[0]} in {self.directory} was saved from another "
          f"model or optimiser config ({differences[steps[0]]}); use a new --workdir, or the "
          "config that run was trained with (nothing was overwritten)")
    return differences

  def restore_latest(self, abstract_state) -> tuple[Any, dict, int] | None:
    """(state, extra, step) of the newest checkpoint that loads, else None.

    abstract_state: a pytree of jax.ShapeDtypeStruct with shardings (the
    restored arrays are placed accordingly). When an older step is used,
    the newer ones that failed are moved to `<directory>-unreadable/`; when
    none loads, nothing is moved. Raises UnrestorableCheckpointError if no
    checkpoint's arrays fit `abstract_state` (`check_fits`): another
    config's. Where some do, the newer ones that do not are damaged (a run
    never saves two configs) and skipped like unreadable ones.
    """
    differences = self.check_fits(abstract_state)
    failed = []
    for step in differences:
      if differences[step] is not None:
        logging.warning("the metadata of the checkpoint at step %d in %s does not fit the "
                        "older ones (%s); trying the previous one", step, self.directory,
                        differences[step])
        failed.append(step)
        continue
      try:
        state, extra = self.restore(step, abstract_state)
      except Exception as e:  # a corrupt checkpoint: say so, use the previous one
        logging.warning("checkpoint at step %d in %s could not be restored (%s: %s); "
                        "trying the previous one", step, self.directory,
                        type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")
        failed.append(step)
        continue
      if failed:
        self._move_aside(failed)
        self.manager.reload()
      return state, extra, step
    return None

  def _move_aside(self, steps: list[int]) -> None:
    """Moves unreadable step directories out of the manager's directory (the
    resumed run will save those steps again)."""
    aside = self.directory + "-unreadable"
    if jax.process_index() == 0:
      for step in steps:
        target = os.path.join(aside, str(step))
        if os.path.exists(target):
          target += f".{len(os.listdir(aside))}"
        os.makedirs(aside, exist_ok=True)
        shutil.move(os.path.join(self.directory, str(step)), target)
        logging.warning("moved the unreadable checkpoint at step %d to %s", step, target)
    if jax.process_count() > 1:
      multihost_utils.sync_global_devices("glomo_jax checkpoints moved aside")

  def delete_after(self, step: int) -> None:
    """Deletes the checkpoints of steps after `step`."""
    for later in [s for s in self.steps() if s > step]:
      self.manager.delete(later)
      logging.info("deleted the checkpoint at step %d of %s (after step %d)", later,
                   self.directory, step)

  def delete_before(self, step: int) -> None:
    """Deletes the checkpoints of steps before `step`."""
    for earlier in [s for s in self.steps() if s < step]:
      self.manager.delete(earlier)

  def wait(self):
    self._writing(self.manager.wait_until_finished)

  def close(self):
    try:
      self.wait()
    finally:
      self.manager.close()


def _metadata_readable(step_directory: str) -> bool:
  """Whether orbax reads a step's metadata file (its manager fails on one it
  cannot read, before any restore could skip the step); orbax's own reader
  where this orbax has it, else a JSON object is taken as readable."""
  try:
    with open(os.path.join(step_directory, "_CHECKPOINT_METADATA"), encoding="utf-8") as f:
      metadata = json.load(f)
  except FileNotFoundError:
    return True
  except (OSError, ValueError):
    return False
  try:
    from orbax.checkpoint._src.metadata import (  # noqa: PLC0415
        step_metadata_serialization)
  except ImportError:
    return isinstance(metadata, dict)
  try:
    step_metadata_serialization.deserialize(metadata)
  except Exception:  # noqa: BLE001 (whatever orbax's reader raises)
    return False
  return True


def _fingerprint(x: jax.Array) -> jax.Array:
  """uint32 Σ_i bits(x_i)·(2i + 1) mod 2³² over the elements in row-major
  order: any one changed element changes it; integer sums are exact in any
  order, so every sharding gives the same value."""
  if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
    x = jax.random.key_data(x)
  if x.dtype == jnp.bool_:
    x = x.astype(jnp.uint8)
  width = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint32}[x.dtype.itemsize]
  bits = jax.lax.bitcast_convert_type(x, width).astype(jnp.uint32).reshape(-1)
  weights = jnp.arange(bits.size, dtype=jnp.uint32) * jnp.uint32(2) + jnp.uint32(1)
  return jnp.sum(bits * weights, dtype=jnp.uint32)


_fingerprint_tree = jax.jit(lambda tree: jax.tree_util.tree_map(_fingerprint, tree))


def _host_fingerprint(x: np.ndarray) -> int:
  """`_fingerprint` of a host array, in numpy (the same uint32 arithmetic,
  wrapping alike)."""
  x = np.ascontiguousarray(x)
  if x.dtype == np.bool_:
    x = x.astype(np.uint8)
  width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint32}[x.dtype.itemsize]
  bits = x.reshape(-1).view(width).astype(np.uint32)
  weights = np.arange(bits.size, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
  return int(np.sum(bits * weights, dtype=np.uint32))


def _on_this_host_cpu(x) -> bool:
  """Whether `x` is a jax CPU array this process holds whole (no typed key;
  other leaves take `_fingerprint`'s conversions)."""
  return (isinstance(x, jax.Array) and x.is_fully_addressable
          and not jnp.issubdtype(x.dtype, jax.dtypes.prng_key)
          and all(d.platform == "cpu" for d in x.sharding.device_set))


def fingerprints(tree) -> dict[str, int]:
  """{path: fingerprint} (`_fingerprint`; paths as `shapes_by_path` writes
  them) of every array of `tree`: computed where the arrays live, in one
  compiled program, unless all are CPU arrays of this process (numpy, no
  compile: the short runs' saves and restores)."""
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  if all(_on_this_host_cpu(x) for _, x in leaves):
    values = [(path, _host_fingerprint(np.asarray(x))) for path, x in leaves]
  else:
    arrays = jax.tree_util.tree_map(jnp.asarray, tree)
    values = [(path, int(np.asarray(v.addressable_data(0)))) for path, v in
              jax.tree_util.tree_flatten_with_path(_fingerprint_tree(arrays))[0]]
  return {"/".join(_key_name(k) for k in path): v for path, v in values}


def _record(extra: dict, arrays: dict | None) -> dict:
  """The integrity record of a save: the arrays' fingerprints and the
  sha256 of both with the rest of 'extra' (canonical JSON)."""
  canonical = json.dumps({"extra": extra, "arrays": arrays}, sort_keys=True,
                         separators=(",", ":"))
  return {"arrays": arrays, "sha256": hashlib.sha256(canonical.encode()).hexdigest()}


def shapes_by_path(tree) -> dict[str, tuple[int, ...]]:
  """{path: shape} of the leaves of `tree` that have a shape (arrays,
  jax.ShapeDtypeStruct, orbax's array metadata). Paths are key names joined
  by '/' ("params/dense/kernel", "opt_state/0/mu/..."), so a dataclass's
  field and the dict key orbax saves it under read the same."""
  leaves = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: hasattr(x, "shape"))[0]
  return {"/".join(_key_name(k) for k in path): tuple(leaf.shape) for path, leaf in leaves
          if hasattr(leaf, "shape")}


def _key_name(key) -> str:
  """The name in one entry of a key path (dict key, attribute, or index)."""
  for attr in ("key", "name", "idx"):
    if hasattr(key, attr):
      return str(getattr(key, attr))
  return str(key)
