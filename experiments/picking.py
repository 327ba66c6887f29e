r"""The picking task (Ke et al. 2018) with the focused hierarchical encoder
or a baseline (`glomo_jax.focused.run_picking`; docs/focused.md).

  python -m experiments.picking --config=experiments/configs/picking.py \
      --workdir=runs/picking/fhe_s0 [--config.model.kind=lstm1|lstm2|fhe] \
      [--config.gate.gamma=0.1 --config.gate.beta=0.01] [--config.seed=1]

Writes <workdir>/results.json (validation accuracy of the best step; test,
n400 ... n10000 and malicious scores with gate openness; Figure 3's data;
the curve and times). Rerunning the same command resumes the run.
Flags, --distributed and the printed summary: `experiments.entry`.
"""
from experiments import entry

if __name__ == "__main__":
  entry.run_kind("picking")
