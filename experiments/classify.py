r"""Text classification: IMDB / MNLI / SNLI / SST-2 / agreement / verb-number
classifiers with or without GLoMo graphs (`glomo_jax.classification.run_classification`).

  python -m experiments.classify --config=experiments/configs/imdb.py \
      --config.files.train=../shared/data/imdb/imdb_train.jsonl.gz \
      --workdir=runs/imdb_baseline [--config.variant=embeddings \
      --config.predictor_export=runs/wiki_cpu/export] [--config.seed=1]

  python -m experiments.classify --config=experiments/configs/mnli.py \
      --config.files.train=../shared/data/mnli/mnli_train_subset_9k.jsonl.xz \
      --workdir=runs/mnli_baseline

Writes <workdir>/results.json (and prints it without the curve and config);
checkpoints, the best variables, TensorBoard events and the graph cache go
to the workdir too. Rerunning the same command resumes the run.

Flags, --distributed and the printed summary: `experiments.entry`.
"""
from experiments import entry

if __name__ == "__main__":
  entry.run_kind("classify")
