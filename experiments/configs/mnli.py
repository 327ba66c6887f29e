r"""MNLI (or SNLI) with GLoMo transfer: ESIM + self-attention (the paper's §3.2).

  python -m experiments.classify --config=experiments/configs/mnli.py \
      --config.files.train=../shared/data/mnli/mnli_train_subset_9k.jsonl.xz \
      --config.glove_path=../shared/data/glove/glove.6B.100d.top2604.txt.gz \
      --workdir=runs/mnli_baseline [--config.seed=1]

  python -m experiments.classify --config=experiments/configs/mnli.py \
      --config.files.train=../shared/data/mnli/mnli_train_subset_9k.jsonl.xz \
      --config.variant=embeddings --config.predictor_export=runs/wiki_cpu/export \
      --workdir=runs/mnli_embeddings

The local file is a train-only subset: validation is carved from it and only
validation accuracy is reported (results.json: "matched" / "mismatched" null
with a note); `--config.test_fraction=0.1` carves a held-out share of it as
"matched" (the subset's genres are the matched ones). `--config.source=tfds`
(glue/mnli) or `--config.files.matched=... --config.files.mismatched=...`
adds the official validation_matched / mismatched accuracies (what the paper
reports). `--config.task=snli` reads SNLI (eval split 'test'). Data paths have no default. Variants and the graph
cache as in imdb.py. `:tiny` is a seconds-long smoke run.
"""
from experiments.configs.common import classification_config, tiny_preset

RUN_KIND = "classify"   # experiments/kinds.py


def get_config(arg: str = ""):
  config = classification_config(
      "mnli", max_words=64,
      model={"embed_dim": 100, "hidden": 300, "dropout_rate": 0.5, "self_attention": True},
      optim={"learning_rate": 4e-4, "clip_norm": 10.0, "batch_size": 32},
      loop={"epochs": 10.0, "eval_every": 500, "patience": 5})
  config.length_multiple = 32   # 2 padded lengths per sentence: few step compiles
  if arg == "tiny":
    tiny_preset(config, max_words=16)
  elif arg:
    raise ValueError(f"unknown mnli preset {arg!r}; use '' or 'tiny'")
  return config
