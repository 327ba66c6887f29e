r"""SST-2 sentence sentiment with GLoMo transfer: the one-text classifier of
imdb.py on GLUE's SST-2 (lower-cased, PTB-tokenized sentences, label 1 =
positive).

  python -m experiments.classify --config=experiments/configs/sst2.py \
      --config.files.train=../shared/data/sst2/sst2_train.tsv.gz \
      --config.files.test=../shared/data/sst2/sst2_dev.tsv.gz \
      --config.glove_path=../shared/data/glove/glove.6B.100d.top2604.txt.gz \
      --workdir=runs/sst2_baseline [--config.seed=1]

  ... --config.variant=embeddings --config.predictor_export=runs/wiki_cpu/export \
      --workdir=runs/sst2_embeddings

The files are GLUE's train.tsv and dev.tsv (`sentence<TAB>label`); GLUE's
test labels are hidden, so the dev set is the held-out test split and
validation is carved from train (`val_fraction`), as for the other tasks;
`--config.max_train_examples=N` gives a seeded subset of train (learning
curves). `--config.source=tfds` reads glue/sst2 (its validation split as
test). Variants and the graph cache as in imdb.py. `:tiny` is a
seconds-long smoke run.
"""
from experiments.configs.common import classification_config, tiny_preset

RUN_KIND = "classify"   # experiments/kinds.py


def get_config(arg: str = ""):
  config = classification_config(
      "sst2", max_words=64,
      model={"embed_dim": 100, "hidden": 128, "rnn_layers": None, "dropout_rate": 0.2},
      optim={"learning_rate": 1e-3, "clip_norm": 10.0, "batch_size": 32},
      loop={"epochs": 3.0, "eval_every": 500, "patience": 5})
  config.length_multiple = 16   # sentences of a few to ~50 words: few step compiles
  if arg == "tiny":
    tiny_preset(config, max_words=32)
  elif arg:
    raise ValueError(f"unknown sst2 preset {arg!r}; use '' or 'tiny'")
  return config
