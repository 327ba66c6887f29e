r"""The training step of each row of `experiments.predictor_table`, timed in one
process, alternating, on a quiet machine: the table's speed column, measured
fairly (the table's own steps/s come from runs that may share the machine).

  python benchmarks/predictor_rows_speed.py \
      --pretrain_config=experiments/configs/wiki_cpu.py \
      --rows=optimizer,structure,fixed_graphs,distance_prior --rounds=3 --steps=20

Every row's step (its model, optimiser and fixed graphs, at the config's
batch and window, vocabulary `--pretrain_config.vocab_size`) is compiled
first; then each round times `--steps` steps of every row in turn, on the same
random batches. Prints, per row, the median ms per step over the rounds,
steps/s and the ratio to the first row. Rows whose graphs come from an
export are timed with uniform graphs (the same work in the step; the export's
predictor adds a forward pass, not counted). Quiet machine only.
"""
from __future__ import annotations

import os
import statistics
import sys
import time

from absl import app, flags
from ml_collections import config_flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from experiments.table_rows import row_config, table_rows  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("pretrain_config", None, "Pretraining config file.",
                                          lock_config=True)
_ROWS = flags.DEFINE_list("rows", [], "Named row sets of experiments/configs/predictor_rows.py.")
_ONLY = flags.DEFINE_list("only", None, "Keep only these rows.")
_ROW = flags.DEFINE_multi_string("row", [], "A row 'NAME: field=value ...'.")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Rounds of every row, alternating.")
_STEPS = flags.DEFINE_integer("steps", 20, "Timed steps of a row in a round.")
flags.mark_flags_as_required(["pretrain_config"])


def compiled_step(config):
  """(state, jitted step, batch maker) of one row's PretrainConfig."""
  import jax  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415

  from glomo_jax import tuning  # noqa: PLC0415
  from glomo_jax.pretraining import GLoMoObjective  # noqa: PLC0415
  from glomo_jax.pretraining.fixed_graphs import fixed_graph_fn  # noqa: PLC0415
  from glomo_jax.train.step import init_state, state_creator, train_step  # noqa: PLC0415
  model = config.model.replace(vocab_size=config.vocab_size)
  source = "uniform" if config.graph_source == "export" else config.graph_source
  tx = config.build_optimizer()
  task = GLoMoObjective(model, config.bptt, tx,
                        split_batch_scores=tuning.split_batch_scores(jax.devices()),
                        fixed_graphs=fixed_graph_fn(source, model.num_graph_layers,
                                                    model.num_heads))
  state = init_state(state_creator(task, tx), jax.random.PRNGKey(config.seed))
  step = jax.jit(lambda s, b: train_step(task, tx, s, b), donate_argnums=0)
  shape = (config.batch_size, config.bptt)

  def batch(rng):
    tokens = rng.integers(4, model.vocab_size, shape, dtype=np.int32)
    out = {"tokens": tokens, "mask": np.ones(shape, np.int32)}
    if config.graph_source == "planted":
      out["arc_source"] = np.full(shape, -1, np.int32)
    return out
  return state, step, batch


def main(argv):
  del argv
  import jax  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415
  rows = table_rows(_ROWS.value, _ONLY.value, _ROW.value)
  base = _CONFIG.value.to_dict()
  runs = {}
  for name, changes in rows.items():
    config = row_config(base, {k: v for k, v in changes.items() if k != "steps_fraction"},
                        None, "/unused", 0)
    state, step, batch = compiled_step(config)
    rng = np.random.default_rng(0)
    state, metrics = step(state, batch(rng))          # compile and warm up
    jax.block_until_ready(metrics["loss"])
    runs[name] = [state, step, batch]
    print(f"compiled {name}", flush=True)
  times = {name: [] for name in runs}
  for _ in range(_ROUNDS.value):
    for name, run in runs.items():
      state, step, batch = run
      rng = np.random.default_rng(1)
      batches = [batch(rng) for _ in range(_STEPS.value)]
      start = time.perf_counter()
      for b in batches:
        state, metrics = step(state, b)
      jax.block_until_ready(metrics["loss"])
      times[name].append((time.perf_counter() - start) / _STEPS.value)
      run[0] = state
  first = statistics.median(next(iter(times.values())))
  print(f"\n{jax.devices()[0].device_kind}, {os.cpu_count()} CPUs; {_ROUNDS.value} rounds of "
        f"{_STEPS.value} steps per row, alternating\n")
  print("| row | ms / step (median) | steps/s | × the first row |\n|---|---|---|---|")
  for name, values in times.items():
    ms = 1e3 * statistics.median(values)
    print(f"| {name} | {ms:.0f} | {1e3 / ms:.2f} | {ms / (1e3 * first):.2f} |")


if __name__ == "__main__":
  app.run(main)
