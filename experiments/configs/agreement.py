r"""Agreement judgements on the built-in synthetic language (no download):
does every verb agree with its subject? (glomo_jax.classification.agreement)

  python -m experiments.classify --config=experiments/configs/agreement.py \
      --workdir=runs/agreement_baseline

  python -m experiments.classify --config=experiments/configs/agreement.py \
      --config.variant=embeddings --config.predictor_export=runs/demo/export \
      --workdir=runs/agreement_embeddings

The sentences come from the synthetic documents right after the pretraining
corpus (`synthetic.num_documents` and `synthetic.seed` must be those of the
predictor's pretraining run: experiments/configs/demo.py uses 3000 and 0),
so the predictor never saw them. Model: the IMDB classifier (BiGRU + linear +
self-attention) with random word vectors. The demo (`experiments.demo`)
runs the baseline and the GLoMo variant of this config after pretraining.
`:tiny` is a seconds-long smoke run.
"""
from experiments.configs.common import classification_config, tiny_preset

RUN_KIND = "classify"   # experiments/kinds.py


def get_config(arg: str = ""):
  config = classification_config(
      "agreement", max_words=32,
      model={"embed_dim": 64, "hidden": 64, "rnn_layers": None, "dropout_rate": 0.1},
      optim={"learning_rate": 2e-3, "clip_norm": 5.0, "batch_size": 32},
      loop={"num_steps": 1000, "eval_every": 50, "patience": None})
  config.source = "synthetic"
  config.synthetic.num_documents = 3000
  # 2,000 training sentences: few enough that what the graphs add shows (with
  # many more, every variant learns the task; experiments/results/agreement.md)
  config.synthetic.train = 2000
  if arg == "tiny":
    tiny_preset(config, max_words=32)
    config.synthetic.train, config.synthetic.validation, config.synthetic.test = 64, 32, 32
  elif arg:
    raise ValueError(f"unknown agreement preset {arg!r}; use '' or 'tiny'")
  return config
