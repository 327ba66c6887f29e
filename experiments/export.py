r"""Export the frozen graph predictor of a pretraining run's newest checkpoint.

  python -m experiments.export --workdir=/tmp/glomo_demo [--out=DIR] [--step=N]

Writes an export directory (config, tokenizer, graph-predictor parameters,
format version, content hash; see glomo_jax/export) that
`glomo_jax.export.load_graph_predictor` reads. Pretraining also exports at
its end; this command exports any saved step.
"""
from __future__ import annotations

import json
import os

from absl import flags

from experiments import cli

_WORKDIR = flags.DEFINE_string("workdir", None, "Pretraining workdir.")
_OUT = flags.DEFINE_string("out", None, "Export directory (default <workdir>/export).")
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: the newest).")
_OVERWRITE = flags.DEFINE_bool("overwrite", True, "Replace an existing export.")
flags.mark_flags_as_required(["workdir"])


def export_checkpoint(workdir: str, out: str | None = None, step: int | None = None,
                      overwrite: bool = True) -> str:
  """Exports checkpoint `step` (newest if None) of `workdir`; returns the path."""
  from glomo_jax.export import export_graph_predictor  # noqa: PLC0415
  from glomo_jax.pretraining import restore_checkpoint  # noqa: PLC0415

  config, tokenizer, variables, step = restore_checkpoint(workdir, step)
  model_config = config.model.replace(vocab_size=tokenizer.vocab_size)
  return export_graph_predictor(out or os.path.join(workdir, "export"), model_config,
                                variables, tokenizer, metadata={"step": step},
                                overwrite=overwrite)


def main(argv):
  del argv
  print(export_checkpoint(_WORKDIR.value, _OUT.value, _STEP.value, _OVERWRITE.value))


if __name__ == "__main__":
  cli.run(main)
