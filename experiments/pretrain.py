r"""Pretrain GLoMo: corpus → graph predictor, checkpoints, export.

  python -m experiments.pretrain --config=experiments/configs/demo.py \
      --workdir=/tmp/glomo_demo [--config.num_steps=100 ...]

Rerunning the same command with the same workdir resumes from the newest
checkpoint. SIGTERM saves a checkpoint and stops (preemption; on several
hosts every process saves the same step). GLOMO_JAX_CPU_TUNING=1 switches
on the CPU-host tuning of `glomo_jax.tuning`.
"""
from __future__ import annotations

import json
import os

from absl import flags, logging
from ml_collections import config_flags

from experiments import cli

_CONFIG = config_flags.DEFINE_config_file("config", None, "Training config file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, logs and export.")
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed", bool(os.environ.get("GLOMO_JAX_DISTRIBUTED")),
    "Call jax.distributed.initialize() first (multi-host TPU pods / GPU clusters; "
    "coordinator from the environment or --coordinator_address).")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None, "host:port of process 0.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes in the job.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  from glomo_jax import tuning  # noqa: PLC0415
  tuning.start_process()  # GLOMO_JAX_CPU_TUNING=1 only; may restart the program
  import jax  # noqa: PLC0415
  if _DISTRIBUTED.value:
    jax.distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
  from glomo_jax.pretraining import PretrainConfig, train_and_evaluate  # noqa: PLC0415
  config = PretrainConfig.from_dict(_CONFIG.value.to_dict())
  summary = train_and_evaluate(config, _WORKDIR.value,
                               compilation_cache_dir=cli.compilation_cache_dir(_WORKDIR.value))
  logging.info("summary: %s", json.dumps({k: v for k, v in summary.items() if k != "history"},
                                          default=str))
  print(json.dumps({"step": summary["step"], "train_loss": summary["train"].get("loss"),
                    "eval": summary["eval"].get("heldout"), "export": summary.get("export"),
                    "preempted": summary["preempted"]}, default=str, indent=1))


if __name__ == "__main__":
  cli.run(main)
