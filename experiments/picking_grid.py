r"""The picking task's experiments (Ke et al. 2018; docs/focused.md): LSTM1,
LSTM2 and FHE trained at n = 200 (and 100, 400) over seeds, each tested at
its training length, the n = 200 runs also at 400, 800, 1,600 and 10,000
digits (k in the trained range) and on malicious sequences; a table beside
the slides' numbers, and the slides' Figure 3 and one sequence's open gates.

  python -m experiments.picking_grid --root=runs/picking \
      --models=lstm1,lstm2,fhe --lengths=200,100,400 --seeds=0,1,2,3,4 --parallel=2 \
      [-- --config.loop.num_steps=6000]

  # the accuracy-openness trade-off: FHE at other sparsity targets γ and weights β
  python -m experiments.picking_grid --root=runs/picking --models=fhe_g0.05,fhe_g0.02_b0.2 \
      --lengths=100 --seeds=0,1,2,3,4 --parallel=2

Models: lstm1, lstm2 or fhe, then options: _g<γ> (FHE with
--config.gate.gamma=γ), _b<β> (FHE with --config.gate.beta=β), _prefix or
_kth (FHE with that oracle gate in training and at test), _samples<S> (FHE
with --config.gate.samples=S), _detach (FHE with
--config.model.reinforce_encoder=false), _gpos (FHE with
--config.model.gate_positions=true), _pos (--config.model.positions=true);
e.g. fhe_g0.05, fhe_g0.02_b0.2, fhe_prefix, fhe_samples2, fhe_gpos, lstm1_pos.
Each run is `python -m experiments.picking --config=CONFIG
--config.model.kind=... --config.min_length=n --config.max_length=n
--config.seed=S --workdir=ROOT/<model>_n<n>_s<S>` plus the arguments after
`--`; runs at n other than 200 test at their training length only. A
finished run (results.json) is not repeated, so rerunning resumes
(`grid.run_commands`; --parallel=N pins N runs to a core each).
ROOT/table.md: accuracy (%) at the training length and the gate openness
there, and the n = 200 runs' longer lengths and malicious set (mean ± sample
std over seeds), with the slides' numbers (their Tables 2 and 4), and each
other model paired with LSTM1 and LSTM2 by seed (mean ± standard error).
ROOT/gates_by_position.png (Figure 3: openness and focus at each position,
one panel per k asked) and ROOT/open_gates.png, from the profile.json of the
first finished FHE run at n = 200 (--figure_run: another workdir).
"""
from __future__ import annotations

import os

from absl import flags

from experiments import cli
from experiments.grid import run_command, run_commands, write_table
from experiments.picking_report import (OPTIONS, TRAINED, draw_figures, model_arguments,
                                        picking_table, run_arguments)

_ROOT = flags.DEFINE_string("root", None, "Directory of the runs (ROOT/MODEL_nN_sSEED).")
_CONFIG = flags.DEFINE_string("config", "experiments/configs/picking.py", "Config file.")
_MODELS = flags.DEFINE_list("models", ["lstm1", "lstm2", "fhe"],
                            f"lstm1, lstm2, fhe, with options {OPTIONS}.")
_LENGTHS = flags.DEFINE_list("lengths", ["200"], "Training lengths n.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2", "3", "4"], "Seeds (config.seed).")
_PARALLEL = flags.DEFINE_integer("parallel", 1, "Runs at once, one CPU core each.")
_TABLE_ONLY = flags.DEFINE_bool("table_only", False, "Only tabulate and draw existing runs.")
_FIGURE_RUN = flags.DEFINE_string("figure_run", None, "The workdir whose profile.json is "
                                  "drawn (default: the first finished fhe_n200 run).")
flags.mark_flags_as_required(["root"])


def main(argv):
  extra = list(argv[1:])
  root, models = _ROOT.value, _MODELS.value
  lengths = [int(n) for n in _LENGTHS.value]
  for model in models:
    model_arguments(model)                       # unknown models fail before any run
  if not _TABLE_ONLY.value:
    todo = []
    for n in lengths:
      for model in models:
        for seed in _SEEDS.value:
          workdir = os.path.join(root, f"{model}_n{n}_s{seed}")
          todo.append((run_command(_CONFIG.value, "baseline", seed, workdir,
                                   run_arguments(model, n) + extra, entry="picking"), workdir))
    run_commands(todo, _PARALLEL.value)
  write_table(root, picking_table(root, models, lengths, _CONFIG.value, extra))
  figure_run = _FIGURE_RUN.value
  if figure_run is None:
    done = sorted(name for name in (os.listdir(root) if os.path.isdir(root) else [])
                  if name.startswith(f"fhe_n{TRAINED}_s")
                  and os.path.exists(os.path.join(root, name, "profile.json")))
    figure_run = os.path.join(root, done[0]) if done else None
  if figure_run is not None:
    print("\n".join(draw_figures(figure_run, root)))


if __name__ == "__main__":
  cli.run(main)
