r"""Verb number prediction on real English (glomo_jax.classification.verb_number): the
words before a finite verb → singular or plural; scores split by attractors
and subject distance where the data has them.

  python -m experiments.verb_number_data --out=runs/verb_number_data \
      --corpus='../shared/data/wiki_text/enwiki2015_wikiextractor_part[45678].jsonl.xz' \
      --conllu_train=../shared/data/ud_english_ewt/en_ewt-ud-train.conllu.gz \
      --conllu_dev=../shared/data/ud_english_ewt/en_ewt-ud-dev.conllu.gz

  # trained on rule-labelled Wikipedia, tested on held-out Wikipedia and on
  # every gold-parsed UD instance (never seen in training):
  python -m experiments.classify --config=experiments/configs/verb_number.py \
      --config.files.train=runs/verb_number_data/wiki_train.jsonl.gz \
      --config.files.test=runs/verb_number_data/wiki_test.jsonl.gz \
      --config.files.gold=runs/verb_number_data/ud_all.jsonl.gz \
      --config.max_train_examples=8000 --workdir=runs/verb_number/baseline
  ... --config.variant=embeddings --config.predictor_export=runs/wiki_cpu/export

  # the oracles (gold arcs as graphs): `:ud` trains on UD train, tests on UD dev
  python -m experiments.classify --config=experiments/configs/verb_number.py:ud \
      --config.files.train=runs/verb_number_data/ud_train.jsonl.gz \
      --config.files.gold=runs/verb_number_data/ud_dev.jsonl.gz \
      --config.variant=embeddings --config.graph_source=arcs \
      --config.oracle_arcs=subject --workdir=runs/verb_number_ud/subject

The model is the one-text classifier of sst2.py (BiGRU, self-attention
pooling), reading only the words before the verb. `:tiny` is a
seconds-long smoke run.
"""
from experiments.configs.common import classification_config, tiny_preset

RUN_KIND = "classify"   # experiments/kinds.py


def get_config(arg: str = ""):
  config = classification_config(
      "verb_number", max_words=50,
      model={"embed_dim": 100, "hidden": 128, "rnn_layers": None, "dropout_rate": 0.2},
      optim={"learning_rate": 1e-3, "clip_norm": 10.0, "batch_size": 32},
      loop={"epochs": 4.0, "eval_every": 200, "patience": 5})
  config.length_multiple = 16
  config.graph_text = "raw"          # the predictor reads the words as written
  if arg == "ud":
    config.loop.epochs = 8.0        # 3,741 training examples
  elif arg == "tiny":
    tiny_preset(config, max_words=24)
  elif arg:
    raise ValueError(f"unknown verb_number preset {arg!r}; use '', 'ud' or 'tiny'")
  return config
