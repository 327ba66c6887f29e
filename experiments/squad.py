r"""SQuAD v1.1: Clark & Gardner's reader with or without GLoMo graphs
(`glomo_jax.squad.run_squad`).

  python -m experiments.squad --config=experiments/configs/squad.py:cpu \
      --config.files.train=../shared/data/squad_v1.1/squad_train-v1.1_rebuilt.json.xz \
      --config.files.dev=../shared/data/squad_v1.1/squad_dev_v1.1_part1_reconstructed.json.gz \
      --config.glove_path=../shared/data/glove/glove.6B.100d.top2604.txt.gz \
      --workdir=runs/squad_baseline [--config.variant=embeddings \
      --config.predictor_export=runs/wiki_cpu/export] [--config.seed=1]

Writes <workdir>/results.json (validation and dev EM / F1, speeds, cuts; it
prints it without the curve and config) and predictions.json (the dev
answers, for the official evaluate-v1.1.py); checkpoints, the best
variables, TensorBoard events, vocabularies and the graph cache go to the
workdir too. Rerunning the same command resumes the run. Ask a finished run
a question with `python -m experiments.squad_answer --workdir=...`.
GLOMO_JAX_CPU_TUNING=1 switches on the CPU-host tuning of `glomo_jax.tuning`.
"""
from __future__ import annotations

import json

from absl import flags
from ml_collections import config_flags

from experiments import cli

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "SQuAD config file (experiments/configs/squad.py[:cpu|:tiny]).",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory of the run.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  from glomo_jax import tuning  # noqa: PLC0415
  tuning.start_process()  # GLOMO_JAX_CPU_TUNING=1 only; may restart the program
  from glomo_jax.squad import SquadConfig, run_squad  # noqa: PLC0415
  results = run_squad(SquadConfig.from_dict(_CONFIG.value.to_dict()), _WORKDIR.value,
                      compilation_cache_dir=cli.compilation_cache_dir(_WORKDIR.value))
  print(json.dumps({k: v for k, v in results.items() if k not in ("curves", "config")},
                   default=str, indent=1))


if __name__ == "__main__":
  cli.run(main)
