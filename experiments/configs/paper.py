r"""The authors' pretraining run: their model and optimiser on English Wikipedia
from TFDS (the paper's corpus).

  python -m experiments.pretrain --config=experiments/configs/paper.py \
      --workdir=/mnt/runs/glomo_paper [--config.corpus.data_dir=gs://BUCKET/tfds]

Model: d 512, 8 heads of 256, 3 graph layers, 4+4 causal conv layers (kernel
3), D 3, 2-layer GRU decoders, per-query threshold, squared ReLU, GRU
composition, 20 sampled positions per batch and direction, embedding gradients
scaled by token frequency. Optimiser: SGD lr 8.0, momentum 0.2, global-norm
clip 0.25, lr halved after 3 evaluations without improvement; batch 32
windows of 200 tokens taken every 100 tokens. Vocabulary: a 100k-piece
SentencePiece model (the authors used 100k words).

The TFDS wikipedia dataset must be prepared beforehand (it is TFRecord-based:
install the `tf` extra); `--config.corpus.download=True` prepares it on first
use. Mesh: data-parallel over every device; `--config.loop.mesh_fsdp=N` shards
parameters and optimiser state N ways. Multi-host: add `--distributed`.
`:tiny` keeps the authors' model but a short run.
"""
from glomo_jax import ModelConfig
from experiments.configs.common import base_config

RUN_KIND = "pretrain"   # experiments/kinds.py


def get_config(arg: str = ""):
  config = base_config(
      ModelConfig.paper(),
      {"source": "tfds", "name": "wikipedia/20230601.en", "split": "train",
       "text_feature": "text", "tfds_reader": "auto"},
      {"num_steps": 300_000, "log_every": 100, "eval_every": 5000, "checkpoint_every": 2000,
       "keep_checkpoints": 3, "plateau_patience": 3, "plateau_factor": 0.5},
      vocab_size=100_000, tokenizer_sample_chars=50_000_000, heldout_fraction=0.001,
      batch_size=32, bptt=200, shift=100, optimizer="sgd", learning_rate=8.0,
      momentum=0.2, clip_norm=0.25, eval_batches=100)
  if arg == "tiny":
    config.loop.num_steps, config.loop.log_every, config.loop.eval_every = 10, 1, 5
    config.loop.checkpoint_every, config.eval_batches = 5, 2
    config.loop.compile_fast = True
  elif arg:
    raise ValueError(f"unknown paper preset {arg!r}; use '' or 'tiny'")
  return config
