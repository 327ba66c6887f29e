# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exported GLoMo graphs in a Flax model of your own
#
# What "export for other JAX projects" means: load a frozen graph predictor
# with one call, compute its graphs for your inputs, and fuse them into your
# own model with the gated `[H; HM]` layer of `glomo_jax.transfer`. Copy the
# cells you need; nothing here depends on the rest of glomo_jax's training code.
#
# The export is the one the notebook *pretrain_export_look* writes
# (`runs/notebook_pretrain/export`), or any other (`EXPORT` below); without one,
# the next cells pretrain a small predictor first. On Colab, put this repository
# at `/content/glomo_jax` first, or set `GLOMO_JAX_SOURCE`.

# %%
import os
import sys

if "google.colab" in sys.modules:  # install on Colab only; elsewhere use your environment
  import subprocess
  source = os.environ.get("GLOMO_JAX_SOURCE", "/content/glomo_jax")
  if "://" not in source and not os.path.exists(source):
    raise FileNotFoundError(f"glomo_jax is not at {source}: upload or clone the repository "
                            "there, or set GLOMO_JAX_SOURCE to a pip requirement")
  subprocess.run([sys.executable, "-m", "pip", "install", "-q", source], check=True)

# %%
import jax

PRESET = os.environ.get("GLOMO_JAX_NOTEBOOK_PRESET", "full")  # 'tiny': CI's smoke run
tiny = PRESET == "tiny"
EXPORT = os.path.abspath("runs/notebook_pretrain/export")
print(f"JAX {jax.__version__}, {len(jax.devices())} {jax.devices()[0].device_kind} device(s); "
      f"preset {PRESET!r}")

# %% [markdown]
# ## An export (pretrained here only if there is none)

# %%
if not os.path.exists(EXPORT):
  from glomo_jax import ModelConfig
  from glomo_jax.data import CorpusSpec, SyntheticConfig
  from glomo_jax.pretraining import PretrainConfig, train_and_evaluate
  from glomo_jax.train.config import LoopOptions
  from glomo_jax.train.console import show_progress
  show_progress()
  summary = train_and_evaluate(PretrainConfig(
      model=ModelConfig(dim=16 if tiny else 64, num_heads=4, head_dim=8 if tiny else 32,
                        num_graph_layers=2, key_layers=2, query_layers=2, kernel_size=3,
                        context_length=3, decoder_layers=1, sample_positions=0),
      corpus=CorpusSpec(synthetic=SyntheticConfig(num_documents=60 if tiny else 3000)),
      batch_size=16 * len(jax.devices()), bptt=64, shift=32, optimizer="sgd",
      learning_rate=8.0, momentum=0.2, clip_norm=0.25, eval_batches=2, heldout_fraction=0.05,
      loop=LoopOptions(num_steps=6 if tiny else 2000, log_every=3 if tiny else 200,
                       eval_every=6 if tiny else 1000, checkpoint_every=6 if tiny else 1000,
                       plateau_patience=0, compile_fast=tiny)), os.path.dirname(EXPORT))
  EXPORT = summary["export"]

# %% [markdown]
# ## One call to load it

# %%
from glomo_jax.export import load_graph_predictor

predictor = load_graph_predictor(EXPORT)
num_layers = predictor.config.num_graph_layers
print(predictor)

# %% [markdown]
# ## Your data
#
# Here: agreement judgements on the synthetic language (does every verb agree
# with its subject?), from documents the predictor never read. Your model reads
# *words* with its own vocabulary; `word_graphs` runs the predictor on the
# words' pieces and pools its graphs to words: `[batch, 2L, heads, W, W]`,
# target row, source column, forward layers then backward.

# %%
import numpy as np

from glomo_jax.classification.agreement import load_agreement_task
from glomo_jax.graphs import word_graphs

MAX_WORDS = 32
data = load_agreement_task(num_train=64 if tiny else 4000, num_validation=32 if tiny else 500,
                           num_test=1)
vocab = {w: i + 1 for i, w in enumerate(sorted({w for s in data.splits["train"].texts["text"]
                                                 for w in s}))}  # 0: padding / unknown


def encode(split):
  """Word ids [N, W], mask [N, W], labels [N], graphs [N, 2L, K, W, W]."""
  texts = [list(s)[:MAX_WORDS] for s in split.texts["text"]]
  ids = np.zeros((len(texts), MAX_WORDS), np.int32)
  for i, s in enumerate(texts):
    ids[i, :len(s)] = [vocab.get(w, 0) for w in s]
  graphs, mask = word_graphs(predictor, predictor.tokenizer, texts, MAX_WORDS)
  return ids, mask, split.labels, graphs


train, validation = encode(data.splits["train"]), encode(data.splits["validation"])
print(f"train {train[0].shape[0]} sentences, graphs {train[3].shape} "
      f"({train[3].nbytes / 2**20:.0f} MiB)")

# %% [markdown]
# ## Your model, with the graphs fused in
#
# `GraphTransfer` mixes the predictor's graphs G^l and their products Λ^l,
# applies the mixtures to your features H and returns `[H; gate ⊙ HM]`;
# `mode='uniform'` (every word reads the mean of all the words) and
# `mode='none'` (H unchanged) are the controls.

# %%
import flax.linen as nn
import jax.numpy as jnp
import optax

from glomo_jax.transfer import GraphTransfer


class Classifier(nn.Module):
  vocab_size: int
  mode: str = "glomo"
  dim: int = 32

  @nn.compact
  def __call__(self, ids, mask, graphs):
    h = nn.Embed(self.vocab_size, self.dim)(ids)                          # [B, W, d]
    h = GraphTransfer(mode=self.mode, num_layers=num_layers)(h, graphs, mask)  # [B, W, 2d]
    h = nn.relu(nn.Dense(self.dim)(h))
    h = jnp.where(mask[..., None], h, -1e9).max(axis=1)                     # [B, d]
    return nn.Dense(2)(h)


def train_and_score(mode, steps, batch=32, seed=0):
  model = Classifier(len(vocab) + 1, mode)
  ids, mask, labels, graphs = train
  params = model.init(jax.random.PRNGKey(seed), ids[:2], mask[:2], graphs[:2])["params"]
  optimizer = optax.adam(3e-3)
  opt_state = optimizer.init(params)

  @jax.jit
  def step(params, opt_state, ids, mask, labels, graphs):
    def loss_fn(p):
      logits = model.apply({"params": p}, ids, mask, graphs)
      return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = optimizer.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state, loss

  order = np.random.default_rng(seed)
  for i in range(steps):
    pick = order.integers(0, len(labels), batch)
    params, opt_state, loss = step(params, opt_state, ids[pick], mask[pick], labels[pick],
                                   graphs[pick])
    if i % max(1, steps // 5) == 0 or i == steps - 1:
      print(f"  {mode:>7} step {i + 1:4d}/{steps}: loss {float(loss):.3f}")
  v_ids, v_mask, v_labels, v_graphs = validation
  logits = model.apply({"params": params}, v_ids, v_mask, v_graphs)
  return float((np.asarray(logits).argmax(-1) == v_labels).mean())


STEPS = 5 if tiny else 1500
accuracy = {mode: train_and_score(mode, STEPS) for mode in ("none", "uniform", "glomo")}
for mode, value in accuracy.items():
  print(f"{mode:>7}: validation accuracy {value:.3f} ({len(validation[2])} sentences, "
        "chance 0.5)")
