r"""The one-command demo: a small GLoMo on the built-in synthetic corpus (CPU).

The synthetic language has planted long-range dependencies (agreement across
clauses, brackets, copied names) whose true arcs are known, so the run can
report how much of the learned graphs' weight falls on them.

  python -m experiments.pretrain --config=experiments/configs/demo.py --workdir=/tmp/glomo_demo

6,000 steps of 16 windows × 64 tokens, about 6 minutes on 2 CPU cores;
README has the held-out loss and the planted-arc scores it reaches for
three seeds. Why 6,000: after 2,000 steps whether the downstream classifier
could use the graphs depended on the seed and the machine
(experiments/results/agreement.md).
The optimiser is the authors' (SGD lr 8, momentum 0.2, global-norm clip 0.25:
no dead head, experiments/results/predictor.md); `:adam` the earlier preset
(Adam 3e-3, clip 1.0), kept for comparison. `:tiny` gives a seconds-long
smoke run.
"""
from glomo_jax import ModelConfig
from experiments.configs.common import base_config

RUN_KIND = "pretrain"   # experiments/kinds.py


def get_config(arg: str = ""):
  model = ModelConfig(dim=64, num_heads=4, head_dim=32, num_graph_layers=2,
                      key_layers=2, query_layers=2, kernel_size=3, context_length=3,
                      decoder_layers=1, sample_positions=0, loss_chunk_size=2048)
  config = base_config(
      model, {"source": "synthetic", "synthetic": {"num_documents": 3000, "seed": 0}},
      {"num_steps": 6000, "log_every": 100, "eval_every": 500, "checkpoint_every": 500,
       "plateau_patience": 0},
      batch_size=16, bptt=64, shift=32, optimizer="sgd", learning_rate=8.0, momentum=0.2,
      clip_norm=0.25, eval_batches=8, heldout_fraction=0.05)
  if arg == "tiny":
    config.model.dim = 16
    config.model.head_dim = 8
    config.corpus.synthetic.num_documents = 60
    config.loop.num_steps = 6
    config.loop.log_every = 2
    config.loop.eval_every = 3
    config.loop.checkpoint_every = 3
    config.eval_batches = 2
    config.loop.compile_fast = True
  elif arg == "adam":
    config.optimizer, config.learning_rate, config.clip_norm = "adam", 3e-3, 1.0
  elif arg:
    raise ValueError(f"unknown demo preset {arg!r}; use '', 'tiny' or 'adam'")
  return config
