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

Flags, --distributed and the printed summary: `experiments.entry`.
"""
from experiments import entry

if __name__ == "__main__":
  entry.run_kind("squad")
