"""The end of every downstream run: train the task on the loop, then write
<workdir>/results.json: the task's scores, best step, length, validation
curve, times, the predictor read and the config. Rerunning a run in the same
workdir resumes it, or, once finished, evaluates again without training."""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable

import jax

from glomo_jax.io import write_json
from glomo_jax.train import loop

logger = logging.getLogger("glomo_jax.downstream")

RESULTS_FILE = "results.json"


def load_predictor(export: str, units: str = "tokens"):
  """The exported graph predictor a run reads (`glomo_jax.export`), which
  must be one of `units` ('tokens': text; 'pixels')."""
  from glomo_jax.export import load_graph_predictor  # noqa: PLC0415
  predictor = load_graph_predictor(export)
  found = predictor.manifest.get("units", "tokens")
  if found != units:
    writer = ("experiments/pretrain_images.py" if units == "pixels"
              else "experiments/pretrain.py")
    raise ValueError(f"{export} is a predictor of {found}; this task reads one of {units} "
                     f"({writer})")
  return predictor


def train_and_report(task, workdir: str, scores: Callable[[dict], dict], *, start: float,
                     predictor=None, devices=None, compilation_cache_dir: str | None = None
                     ) -> dict[str, Any]:
  """Trains `task` (a `DownstreamTask`) in `workdir` and returns (and, on
  process 0, writes) results.json's dict.

  scores: the loop's summary -> the task's own fields of results.json (its
    scores of `summary['results']`, counts, ...), placed after the variant
    and seed; then come best_step, steps, stopped_early, the curve
    (`task.curve` of each evaluation), train_time_s (in the loop),
    wall_time_s (since `start`), predictor (its directory or None) and config.
  A preempted run returns {'preempted': True, 'step'} and writes nothing.
  devices: the mesh's (default all); compilation_cache_dir: JAX's
  persistent cache (None: off).
  """
  settings = task.config.loop.loop_config(task.batches.batches_per_epoch,
                                          **task.loop_fields(),
                                          compilation_cache_dir=compilation_cache_dir)
  summary = loop.run(task, settings, workdir, devices=devices)
  if summary["preempted"]:
    return {"preempted": True, "step": summary["step"]}
  config = task.config
  results = {"variant": config.variant, "seed": config.seed, **scores(summary),
             "best_step": summary["best"].get("step"), "steps": summary["step"],
             "stopped_early": summary["stopped_early"],
             "curves": [task.curve(e) for e in summary["history"]],
             "train_time_s": summary["train_seconds"], "wall_time_s": time.time() - start,
             "predictor": predictor.directory if predictor is not None else None,
             "config": config.to_dict()}
  if jax.process_index() == 0:
    write_json(os.path.join(workdir, RESULTS_FILE), results)
  logger.info("results: %s", {k: v for k, v in results.items()
                              if k not in ("curves", "config")})
  return results
