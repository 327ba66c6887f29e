r"""Per-device bytes of the paper model's training state and batch on TPU
slices, from the shapes and the loop's sharding rule (docs/tpu.md's table).

  python -m experiments.tpu_memory [--batch_size=32] [--bptt=200]

For each slice (its JAX devices: a v4 or v5p chip is one device, a v5e chip
one) and each mesh the loop builds on it (data parallel, fsdp 1; and
every device on fsdp), the bytes one device holds of the parameters, the
optimiser state (the authors' SGD with momentum: one trace per parameter)
and the batch (int32 tokens and mask). `train.sharding.fsdp_spec` decides
which arrays are split: an array is cut along its largest dimension the
fsdp size divides, unless it is small; a batch is split over every device.
Nothing is allocated: the state's shapes come from `jax.eval_shape`.
"""
from __future__ import annotations

import functools

import jax
import numpy as np
from absl import app, flags

from glomo_jax.train.sharding import fsdp_spec

# slice: (JAX devices, HBM GiB per device)
SLICES = {"v4-8": (4, 32), "v5e-8": (8, 16), "v5p-8": (4, 95)}


def device_bytes(tree, fsdp: int) -> int:
  """Bytes one device holds of a pytree of arrays / ShapeDtypeStructs split
  over `fsdp` devices by the fsdp rule (replicated over the data axis)."""
  total = 0
  for x in jax.tree_util.tree_leaves(tree):
    n = int(np.prod(x.shape, dtype=np.int64)) * np.dtype(x.dtype).itemsize
    total += n // fsdp if any(fsdp_spec(x.shape, fsdp)) else n
  return total


def batch_bytes(batch: dict, devices: int) -> int:
  """Bytes one device holds of a global batch split over `devices`."""
  return sum(int(np.prod(s.shape, dtype=np.int64)) * np.dtype(s.dtype).itemsize
             for s in batch.values()) // devices


def paper_state(batch_size: int = 32, bptt: int = 200):
  """(abstract train state, batch) of the paper config (experiments/configs/paper.py)."""
  from experiments.configs import paper  # noqa: PLC0415
  from glomo_jax.pretraining import GLoMoObjective, PretrainConfig  # noqa: PLC0415
  from glomo_jax.train import create_state  # noqa: PLC0415
  config = PretrainConfig.from_dict(paper.get_config().to_dict())
  task = GLoMoObjective(config.model.replace(vocab_size=config.vocab_size), bptt,
                        config.build_optimizer())
  state = jax.eval_shape(functools.partial(create_state, task, task.tx), jax.random.PRNGKey(0))
  tokens = jax.ShapeDtypeStruct((batch_size, bptt), np.int32)
  return state, {"tokens": tokens, "mask": tokens}


def table(state, batch) -> list[dict]:
  """One row per slice and mesh: slice, devices, mesh (data × fsdp), and
  the per-device bytes of params, opt_state, batch and their sum."""
  rows = []
  for name, (devices, hbm) in SLICES.items():
    for fsdp in (1, devices):
      params = device_bytes(state.params, fsdp) + device_bytes(state.batch_stats, fsdp)
      opt = device_bytes(state.opt_state, fsdp)
      data = batch_bytes(batch, devices)
      rows.append({"slice": name, "devices": devices, "hbm_gib": hbm,
                   "mesh": f"{devices // fsdp} × {fsdp}", "params": params,
                   "opt_state": opt, "batch": data, "total": params + opt + data})
  return rows


def markdown(rows: list[dict]) -> str:
  mib = lambda n: f"{n / 2 ** 20:,.1f}"
  lines = ["| slice (devices, HBM each) | mesh data × fsdp | params MiB | optimiser MiB "
           "| batch KiB | sum MiB |", "|---|---|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {r['slice']} ({r['devices']}, {r['hbm_gib']} GiB) | {r['mesh']} | "
                 f"{mib(r['params'])} | {mib(r['opt_state'])} | {r['batch'] / 1024:,.1f} | "
                 f"{mib(r['total'])} |")
  return "\n".join(lines)


def main(argv):
  del argv
  print(markdown(table(*paper_state(flags.FLAGS.batch_size, flags.FLAGS.bptt))))


if __name__ == "__main__":
  # defined here, not on import: the tests import this module beside other
  # entry points whose flags share these names
  flags.DEFINE_integer("batch_size", 32, "Global windows per step (the paper config's).")
  flags.DEFINE_integer("bptt", 200, "Tokens per window (the paper config's).")
  app.run(main)
