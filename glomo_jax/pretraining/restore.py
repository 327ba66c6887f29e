"""`restore_checkpoint`: a text pretraining run's config, tokenizer and
variables at one of its checkpoints (for export and for probes of the whole
model, e.g. `glomo_jax.classification.lm_agreement`); any run on the text
windows whose config is a `TextPretrainConfigBase` (`config_class`)."""
from __future__ import annotations

import json
import os

import orbax.checkpoint as ocp

from glomo_jax.data import Tokenizer
from glomo_jax.pretraining.config import PretrainConfig, TextPretrainConfigBase
from glomo_jax.pretraining.task import CONFIG_FILE, TOKENIZER_FILE


def restore_checkpoint(workdir: str, step: int | None = None,
                       config_class: type[TextPretrainConfigBase] = PretrainConfig):
  """(config, tokenizer, variables {'params', 'batch_stats'}, step) of a
  pretraining workdir's checkpoint `step` (the newest if None); the
  recorded config.json read as a `config_class`.

  Raises:
    FileNotFoundError: not a pretraining workdir, or no checkpoint yet.
    ValueError: no checkpoint at `step`, or one that cannot be read.
  """
  config_path = os.path.join(workdir, CONFIG_FILE)
  if not os.path.exists(config_path):
    raise FileNotFoundError(f"{workdir} is not a pretraining workdir (no {CONFIG_FILE}); "
                            "pass the --workdir of an experiments.pretrain run")
  with open(config_path) as f:
    config = config_class.from_dict(json.load(f))
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
                     f"({type(e).__name__}: {first}); use another step "
                     f"(saved: {steps})") from None
  variables = {"params": state["params"], "batch_stats": state.get("batch_stats") or {}}
  return config, tokenizer, variables, step
