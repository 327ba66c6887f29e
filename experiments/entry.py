"""The entry point the training run kinds share: flags → config → task → loop.

  python -m experiments.KIND --config=experiments/configs/FILE.py[:PRESET] \
      --workdir=DIR [--config.FIELD=VALUE ...] [--distributed ...]

KIND is a key of `KINDS` (experiments/kinds.py, the registry: pretrain,
pretrain_images, classify, squad, cifar, picking, lstm_lm), each a module of experiments/ that
calls `run_kind` and whose docstring has its commands; each config file states
its kind (`RUN_KIND`). The other runnable modules of experiments/ are
tools around these runs, each with flags of its own: export, plots, graph
statistics, syntax alignment, word vectors, questions to a SQuAD run
(squad_answer), grids of runs (classify_grid, data_efficiency,
predictor_table), the demo and the accelerator pipeline. The ConfigDict of
`--config` (every field of the kind's config dataclass, overridable by
`--config.x.y=...`; a typo fails before any work) becomes the library's
config (`<Config>.from_dict`), the kind's run function trains its task on
the one loop in the workdir (rerunning the same command resumes the run;
SIGTERM saves a checkpoint and stops), and a summary is printed as JSON.

`--distributed` calls `jax.distributed.initialize()` first, for a job of
several hosts (a TPU pod slice, GPU hosts): every process runs the same
command; the coordinator comes from the environment (TPU) or from
--coordinator_address, --num_processes and --process_id. The processes
share the workdir; process 0 writes the files a run writes once.
GLOMO_JAX_CPU_TUNING=1 switches on the CPU-host tuning of `glomo_jax.tuning`.
"""
from __future__ import annotations

import json
import os

from absl import flags, logging
from ml_collections import config_flags

from experiments import cli
from experiments.kinds import KINDS

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file of the run kind (experiments/configs/*.py[:preset]).",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory of the run (checkpoints, logs, "
                               "results); rerunning in it resumes the run.")
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed", bool(os.environ.get("GLOMO_JAX_DISTRIBUTED")),
    "Call jax.distributed.initialize() first (multi-host TPU pods / GPU clusters; "
    "coordinator from the environment or --coordinator_address).")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None, "host:port of process 0.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes in the job.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index.")
flags.mark_flags_as_required(["config", "workdir"])


def summary_line(out: dict) -> dict:
  """What is printed of a run's outcome: a pretraining run's loop summary
  (step, train loss, the last held-out evaluation, best, export), or a
  downstream run's results.json without its curve and config."""
  if "history" in out:
    return {"step": out["step"], "train_loss": out["train"].get("loss"),
            "eval": out["eval"].get("heldout"), "best": out.get("best"),
            "export": out.get("export"), "preempted": out["preempted"]}
  return {k: v for k, v in out.items() if k not in ("curves", "config")}


def run_kind(kind: str) -> None:
  """Parses the flags and runs `kind` (module docstring)."""
  def main(argv):
    del argv
    from glomo_jax import tuning  # noqa: PLC0415
    tuning.start_process()  # GLOMO_JAX_CPU_TUNING=1 only; may restart the program
    if _DISTRIBUTED.value:
      import jax  # noqa: PLC0415
      jax.distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
    config_class, run = KINDS[kind]()
    workdir = _WORKDIR.value
    out = run(config_class.from_dict(_CONFIG.value.to_dict()), workdir,
              compilation_cache_dir=cli.compilation_cache_dir(workdir))
    if "history" in out:
      logging.info("summary: %s", json.dumps({k: v for k, v in out.items() if k != "history"},
                                              default=str))
    print(json.dumps(summary_line(out), default=str, indent=1))
  cli.run(main)
