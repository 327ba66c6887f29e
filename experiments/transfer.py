r"""Downstream transfer: IMDB / MNLI / SNLI / agreement classifiers with or
without GLoMo graphs (`glomo_jax.tasks.run_transfer`).

  python -m experiments.transfer --config=experiments/configs/imdb.py \
      --config.files.train=../shared/data/imdb/imdb_train.jsonl.gz \
      --workdir=runs/imdb_baseline [--config.variant=embeddings \
      --config.predictor_export=runs/wiki_cpu/export] [--config.seed=1]

  python -m experiments.transfer --config=experiments/configs/mnli.py \
      --config.files.train=../shared/data/mnli/mnli_train_subset_9k.jsonl.xz \
      --workdir=runs/mnli_baseline

Writes <workdir>/results.json (and prints it without the curve and config);
checkpoints, the best variables, TensorBoard events and the graph cache go
to the workdir too. Rerunning the same command resumes the run.
GLOMO_JAX_CPU_TUNING=1 switches on the CPU-host tuning of `glomo_jax.tuning`.
"""
from __future__ import annotations

import json

from absl import flags
from ml_collections import config_flags

from experiments import cli

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Transfer config file (experiments/configs/imdb.py, mnli.py, "
    "agreement.py).", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory of the run.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  from glomo_jax import tuning  # noqa: PLC0415
  tuning.start_process()  # GLOMO_JAX_CPU_TUNING=1 only; may restart the program
  from glomo_jax.tasks import TransferConfig, run_transfer  # noqa: PLC0415
  results = run_transfer(TransferConfig.from_dict(_CONFIG.value.to_dict()), _WORKDIR.value,
                         compilation_cache_dir=cli.compilation_cache_dir(_WORKDIR.value))
  print(json.dumps({k: v for k, v in results.items() if k not in ("curves", "config")},
                   default=str, indent=1))


if __name__ == "__main__":
  cli.run(main)
