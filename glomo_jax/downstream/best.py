"""`restore_best`: the best variables a downstream run kept, for tools that
use a trained model after (or while) it trains — SQuAD's `Answerer`, the
picking task's `load_picking_run`."""
from __future__ import annotations

import json
import os

import jax

from glomo_jax.downstream.run import RESULTS_FILE
from glomo_jax.train.run_config import CONFIG_FILE


def abstract_variables(model, *args, **kwargs) -> dict:
  """{'params', 'batch_stats': {}} of `model.init(key, *args, **kwargs)` as
  ShapeDtypeStructs on the first device (what `restore_best` restores into)."""
  shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), *args, **kwargs))
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  return {"params": jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device), shapes["params"]),
      "batch_stats": {}}


def restore_best(workdir: str, abstract: dict, model: str) -> dict:
  """The variables in <workdir>/best: at the step results.json names when
  the run has finished, else the newest best so far. abstract: the
  variables' ShapeDtypeStructs (`abstract_variables`); model: what they go
  into, for the errors ('the reader').

  Raises:
    FileNotFoundError: the run has not evaluated once (no best variables).
    ValueError: the saved variables do not fit `abstract` (naming the first
      difference) or cannot be read.
  """
  from glomo_jax.train.checkpoint import Checkpointer  # noqa: PLC0415 (orbax: late)
  best = os.path.join(workdir, "best")
  unevaluated = FileNotFoundError(f"{workdir} has no best variables yet (the run has "
                                  "not evaluated once): train it longer")

  def unfit(why: str) -> ValueError:
    return ValueError(f"{best}: the saved variables could not be restored into {model} "
                      f"{CONFIG_FILE} describes ({why}); a run trained by another version "
                      "of glomo_jax must be trained again with this one")
  if not os.path.isdir(best):
    raise unevaluated
  checkpoints = Checkpointer(best, keep=None)
  results = os.path.join(workdir, RESULTS_FILE)
  try:
    if not checkpoints.steps():
      raise unevaluated
    step = checkpoints.steps()[-1]
    if os.path.isfile(results):              # finished: the step its record names
      with open(results, encoding="utf-8") as f:
        step = int(json.load(f)["best_step"])
    difference = checkpoints.shape_difference(step, abstract)
    if difference is not None:
      raise unfit(difference)
    if os.path.isfile(results):
      return checkpoints.restore(step, abstract)[0]
    restored = checkpoints.restore_latest(abstract)
    if restored is None:
      raise unfit("no checkpoint loads")
    return restored[0]
  finally:
    checkpoints.close()
