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
  import orbax.checkpoint as ocp  # noqa: PLC0415
  from glomo_jax.data import Tokenizer  # noqa: PLC0415
  from glomo_jax.export import export_graph_predictor  # noqa: PLC0415
  from glomo_jax.pretraining import CONFIG_FILE, TOKENIZER_FILE, PretrainConfig  # noqa: PLC0415

  config_path = os.path.join(workdir, CONFIG_FILE)
  if not os.path.exists(config_path):
    raise FileNotFoundError(f"{workdir} is not a pretraining workdir (no {CONFIG_FILE}); "
                            "pass the --workdir of an experiments.pretrain run")
  with open(config_path) as f:
    config = PretrainConfig.from_dict(json.load(f))
  tokenizer = Tokenizer.load(os.path.join(workdir, TOKENIZER_FILE))
  ckpt_dir = os.path.join(workdir, "checkpoints")
  steps = sorted(int(d) for d in os.listdir(ckpt_dir) if d.isdigit()) \
      if os.path.isdir(ckpt_dir) else []
  if not steps:
    raise FileNotFoundError(f"no checkpoint in {ckpt_dir}: the run saved none yet")
  step = steps[-1] if step is None else step
  if step not in steps:
    raise ValueError(f"no checkpoint at step {step} in {ckpt_dir}; saved steps: {steps}")
  path = os.path.abspath(os.path.join(ckpt_dir, str(step), "state"))   # orbax wants it so
  try:
    state = ocp.StandardCheckpointer().restore(path)
  except Exception as e:  # noqa: BLE001 (orbax raises many kinds for a damaged file)
    first = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
    raise ValueError(f"the checkpoint at step {step} in {ckpt_dir} cannot be read "
                     f"({type(e).__name__}: {first}); export another step with "
                     f"--step (saved: {steps})") from None
  variables = {"params": state["params"], "batch_stats": state.get("batch_stats") or {}}
  model_config = config.model.replace(vocab_size=tokenizer.vocab_size)
  return export_graph_predictor(out or os.path.join(workdir, "export"), model_config,
                                variables, tokenizer, metadata={"step": step},
                                overwrite=overwrite)


def main(argv):
  del argv
  print(export_checkpoint(_WORKDIR.value, _OUT.value, _STEP.value, _OVERWRITE.value))


if __name__ == "__main__":
  cli.run(main)
