"""The learning curves of `experiments.data_efficiency`: each task's settings
(`TASKS`), the config overrides of one training-set size, and the table and
drawing of the finished runs (accuracy against size, mean ± std over seeds);
no flags here."""
from __future__ import annotations

import dataclasses
import os
import statistics

from experiments.grid import finished_results


@dataclasses.dataclass(frozen=True)
class CurveTask:
  """One task of the curve: its config, the flag that sets the training
  size, the results.json key of its held-out split, and what it says."""
  config: str
  size_flag: str
  held_out: str
  examples: str
  title: str
  chance: float
  fixed: tuple[str, ...] = ()


TASKS = {
    "agreement": CurveTask("agreement.py", "--config.synthetic.train", "test",
                           "training sentences", "Agreement on the built-in language", 50.0),
    "sst2": CurveTask("sst2.py", "--config.max_train_examples", "test", "training sentences",
                      "SST-2 (GLUE dev as test)", 50.0, ("--config.max_eval_examples=1000",)),
    "imdb": CurveTask("imdb.py", "--config.max_train_examples", "test", "training reviews",
                      "IMDB (test: 0.1 of train held out)", 50.0,
                      ("--config.test_fraction=0.1", "--config.max_eval_examples=1000")),
    "mnli": CurveTask("mnli.py", "--config.max_train_examples", "matched", "training pairs",
                      "MNLI sample (matched: 0.1 of train held out)", 100 / 3,
                      ("--config.test_fraction=0.1", "--config.max_eval_examples=1000")),
}

ARCS = "arcs"          # the oracle row: variant embeddings, graph_source arcs
LABELS = {"baseline": "baseline (no graph)", "uniform": "uniform graph",
          "embeddings": "GLoMo on embeddings", "rnn": "GLoMo on RNN states",
          ARCS: "planted arcs as graphs (oracle)"}


def size_arguments(task: CurveTask, size: int, steps: int, export: str, root: str
                   ) -> list[str]:
  """The config overrides of one size (`steps` optimiser steps, whatever the
  number of epochs that makes, validation every steps/20), before the
  user's."""
  if size < 1 or steps < 1:
    raise ValueError(f"sizes and --steps must be positive, got {size} and {steps}")
  return [f"{task.size_flag}={size}", f"--config.loop.num_steps={steps}",
          f"--config.loop.eval_every={max(1, steps // 20)}",
          f"--config.predictor_export={export}",
          f"--config.graph_cache_dir={os.path.join(root, 'graph_cache')}", *task.fixed]


def _finished(root: str, size: int, variant: str) -> list[dict]:
  """The finished runs of one size and variant (the oracle's: embeddings
  runs under nSIZE/arcs)."""
  if variant == ARCS:
    return finished_results(os.path.join(root, f"n{size}", ARCS), "embeddings")
  return finished_results(os.path.join(root, f"n{size}"), variant)


def collect(root: str, sizes, variants, held_out: str = "test") -> dict:
  """{size: {variant: [held-out accuracy in % per seed]}} of the finished runs.

  Raises ValueError for a run without a `held_out` accuracy (no held-out
  data) or one that trained on fewer examples than its size (the training
  file ran out)."""
  out = {}
  for size in sizes:
    out[size] = {}
    for variant in variants:
      found = _finished(root, size, variant)
      for r in found:
        if r.get(held_out) is None:
          raise ValueError(f"a run of size {size} ({variant}) has no {held_out} accuracy: give "
                           f"the task a held-out split (e.g. --config.files.{held_out}=PATH)")
        if r.get("examples", {}).get("train", size) < size:
          raise ValueError(f"size {size} is more than the training split holds "
                           f"({r['examples']['train']} examples after the carves)")
      out[size][variant] = [100 * r[held_out] for r in found]
  return out


def _cell(values: list[float]) -> str:
  if not values:
    return "–"
  each = ", ".join(f"{v:.1f}" for v in values)
  if len(values) == 1:
    return each
  return f"{statistics.fmean(values):.1f} ± {statistics.stdev(values):.1f} ({each})"


def held_out_size(root: str, sizes, variants, held_out: str) -> int | None:
  """Examples in the held-out split, from a finished run's results.json."""
  for size in sizes:
    for variant in variants:
      for result in _finished(root, size, variant):
        if held_out in result.get("examples", {}):
          return result["examples"][held_out]
  return None


def curve_table(results: dict, variants, steps: int, task: CurveTask = TASKS["agreement"],
                held_out_examples: int | None = None) -> str:
  lines = [f"| {task.examples} | " + " | ".join(LABELS.get(v, v) for v in variants) + " |",
           "|---|" + "---|" * len(variants)]
  for size, row in results.items():
    lines.append(f"| {size} | " + " | ".join(_cell(row[v]) for v in variants) + " |")
  count = f"{held_out_examples:,} examples, " if held_out_examples else ""
  return "\n".join(lines) + (
      f"\n\n{task.title}: {task.held_out} accuracy in % ({count}chance {task.chance:.0f}), "
      f"mean ± sample std over seeds (each seed in brackets); every run at most {steps} "
      "steps, best validation checkpoint.\n")


def plot_curve(results: dict, variants, path: str, task: CurveTask = TASKS["agreement"]
               ) -> str:
  import matplotlib  # noqa: PLC0415
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415
  figure, axis = plt.subplots(figsize=(6, 4))
  for variant in variants:
    points = [(size, row[variant]) for size, row in results.items() if row[variant]]
    if not points:
      continue
    axis.errorbar([s for s, _ in points], [statistics.fmean(v) for _, v in points],
                  yerr=[statistics.stdev(v) if len(v) > 1 else 0 for _, v in points],
                  marker="o", capsize=3, label=LABELS.get(variant, variant))
  axis.set_xscale("log")
  axis.set_xticks(list(results), [str(size) for size in results])
  axis.minorticks_off()
  axis.set_xlabel(task.examples)
  axis.set_ylabel(f"{task.held_out} accuracy (%)")
  axis.axhline(task.chance, color="grey", linewidth=0.5)
  axis.legend()
  axis.set_title(task.title)
  figure.tight_layout()
  figure.savefig(path, dpi=120)
  plt.close(figure)
  return path


