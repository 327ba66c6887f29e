r"""Picking-task configs (Ke et al. 2018, §5.1; docs/focused.md).

Presets:
* '' : the CPU pilot's choice (experiments/results/focused.md): n = 200,
  k in 1..200, 100,000 training sequences, LSTMs of 64, Adam 1e-3 (clipped at 1),
  batch 64, 6,000 steps evaluated every 500; the gate's β = 0.01 (reached
  after 500 steps), γ = 0.1, entropy weight 0.01, sampled gates at test;
  tested at 400, 800, 1,600 and 10,000 digits (k in the trained range)
  and on malicious sequences. About 45 / 25 / 20 minutes of one core for
  FHE / LSTM2 / LSTM1.
* 'tiny': a seconds-long smoke run.
The model is --config.model.kind (fhe | lstm1 | lstm2); n is
--config.min_length / --config.max_length (experiments/picking_grid.py sets
both), γ and β --config.gate.gamma / --config.gate.beta.
"""
import dataclasses

from experiments.configs.common import config_dict
from glomo_jax.downstream.options import OptimOptions
from glomo_jax.focused import FocusedOptions, PickingConfig
from glomo_jax.train.config import DOWNSTREAM_LOOP

RUN_KIND = "picking"   # experiments/kinds.py


def get_config(arg: str = ""):
  config = PickingConfig()
  if arg == "tiny":
    config = config.replace(
        model=FocusedOptions(hidden=8, digit_dim=4, gate_hidden=4, attention_hidden=4,
                             position_scale=10.0),
        min_length=12, max_length=12, train_examples=64, validation_examples=8,
        test_examples=8, test_lengths=(24,),
        optim=OptimOptions(batch_size=8, eval_batch_size=8),
        loop=dataclasses.replace(DOWNSTREAM_LOOP, num_steps=4, eval_every=2, log_every=1,
                                 compile_fast=True))
  elif arg != "":
    raise ValueError(f"unknown picking preset {arg!r}; use '' or 'tiny'")
  return config_dict(config)
