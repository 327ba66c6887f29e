r"""SQuAD v1.1 with GLoMo transfer: Clark & Gardner's reader (the paper's §3.1).

  python -m experiments.squad --config=experiments/configs/squad.py \
      --config.files.train=../shared/data/squad_v1.1/squad_train-v1.1_rebuilt.json.xz \
      --config.files.dev=../shared/data/squad_v1.1/squad_dev_v1.1_part1_reconstructed.json.gz \
      --config.glove_path=PATH/glove.840B.300d.txt --workdir=runs/squad_baseline \
      [--config.variant=embeddings --config.predictor_export=runs/wiki_cpu/export]

  python -m experiments.squad --config=experiments/configs/squad.py \
      --config.source=tfds --workdir=runs/squad_tfds          # TFDS squad/v1.1

Defaults are document-qa's published SQuAD settings (allenai/document-qa,
docqa/scripts/ablate_squad.py and the paper's appendix): GloVe 840B 300-d
vectors, fixed; char embeddings 20-d, 100 filters of width 5, words cut to
14 characters, characters seen fewer than 50 times → unk; GRU 100; dense
layers 200; variational dropout 0.2 (keep 0.8); answers of at most 17 words;
Adadelta, learning rate 1, batch 45, 26 epochs. Not reproduced: their
exponential moving average of the weights (the GLoMo paper uses none).
Validation (model selection) is 1,000 questions of whole train articles;
dev is evaluated with the best variables.

`:cpu` is the CPU-scale experiment of experiments/results/text_tasks.md (a
subset of train, smaller vectors, Adam); `:tiny` a seconds-long smoke run.
`--config.model.passage_encoder=focused` reads the passage with Ke et al.'s
focused hierarchical encoder conditioned on the question (its options
`--config.model.focused.*`, e.g. `.gate.beta`, `.gate.gamma`,
`.gate.beta_warmup`, `.test_gate`; docs/focused.md), with any variant.
"""
import dataclasses

from experiments.configs.common import config_dict
from glomo_jax.downstream.options import OptimOptions
from glomo_jax.squad import ReaderOptions, SquadConfig
from glomo_jax.train.config import DOWNSTREAM_LOOP

RUN_KIND = "squad"   # experiments/kinds.py


def get_config(arg: str = ""):
  config = config_dict(SquadConfig(
      char_min_count=50, max_word_chars=14, max_span=17, length_multiple=16,
      bucket_batches=20, model=ReaderOptions(embed_dim=300),
      optim=OptimOptions(optimizer="adadelta", learning_rate=1.0, batch_size=45),
      loop=dataclasses.replace(DOWNSTREAM_LOOP, epochs=26.0, log_every=100)))
  if arg == "cpu":
    config.model.embed_dim = 100              # glove.6B.100d
    config.max_train_questions = 20_000
    config.char_min_count = 10
    config.optim.optimizer, config.optim.learning_rate = "adam", 1e-3
    config.length_multiple = 64               # few step shapes, each compiled once
    config.optim.batch_size, config.loop.epochs = 32, 1.0
    config.loop.eval_every, config.loop.log_every = 200, 50
  elif arg == "tiny":
    config.model.embed_dim, config.model.hidden, config.model.dense = 16, 8, 16
    config.model.char_dim, config.model.char_filters = 4, 8
    config.val_questions, config.max_train_questions, config.max_dev_questions = 8, 48, 16
    config.char_min_count, config.max_context_words = 1, 160
    config.optim.optimizer, config.optim.learning_rate = "adam", 1e-2
    config.optim.batch_size, config.loop.num_steps, config.loop.eval_every = 8, 4, 2
    config.loop.log_every, config.loop.epochs = 2, None
    config.loop.compile_fast = True
  elif arg:
    raise ValueError(f"unknown squad preset {arg!r}; use '', 'cpu' or 'tiny'")
  return config
