r"""IMDB sentiment with GLoMo transfer (the paper's §3.2 classifier).

  python -m experiments.classify --config=experiments/configs/imdb.py \
      --config.files.train=../shared/data/imdb/imdb_train.jsonl.gz \
      --config.glove_path=../shared/data/glove/glove.6B.100d.top2604.txt.gz \
      --workdir=runs/imdb_baseline [--config.seed=1]

  python -m experiments.classify --config=experiments/configs/imdb.py \
      --config.files.train=../shared/data/imdb/imdb_train.jsonl.gz \
      --config.variant=embeddings --config.predictor_export=runs/wiki_cpu/export \
      --workdir=runs/imdb_embeddings

The local file is train-only: a validation split is carved from it
(`val_fraction`) and only validation accuracy is reported (results.json has
"test": null and a note), unless `--config.test_fraction=0.1` carves a
held-out test split from it too. With `--config.source=tfds` (imdb_reviews) or
`--config.files.test=...` the test accuracy is reported too. Data paths have
no default so a run never reads data it was not pointed at.

Variants: baseline (glomo 'none'), embeddings, rnn (need
`predictor_export`: a `glomo_jax.export` directory), uniform (the
uniform-graph ablation; no predictor). Graphs are precomputed once per
(export, dataset, max_words) into `graph_cache_dir` (default
<workdir>/graph_cache): per example 2L·K·n² values, n = min(words,
max_words) (float16: ~0.5 MB per 100-word review for L = 3, K = 4), so the
whole IMDB train set needs tens of GB. Rerunning a command resumes its run.
`:tiny` is a seconds-long smoke run.
"""
from experiments.configs.common import classification_config, tiny_preset

RUN_KIND = "classify"   # experiments/kinds.py


def get_config(arg: str = ""):
  config = classification_config(
      "imdb", max_words=400,
      model={"embed_dim": 100, "hidden": 128, "rnn_layers": None, "dropout_rate": 0.2},
      optim={"learning_rate": 1e-3, "clip_norm": 10.0, "batch_size": 32},
      loop={"epochs": 10.0, "eval_every": 500, "patience": 5})
  if arg == "tiny":
    tiny_preset(config, max_words=32)
  elif arg:
    raise ValueError(f"unknown imdb preset {arg!r}; use '' or 'tiny'")
  return config
