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
# # GLoMo in JAX: pretrain, export, look
#
# Pretrains a GLoMo graph predictor (Yang et al., NeurIPS 2018) on the
# built-in synthetic language, whose long-range dependencies (subject–verb
# agreement across clauses, brackets, copied names) are planted and known;
# exports the frozen predictor; and draws the graphs of a sentence you type.
#
# Runs on a Colab TPU (a v5e chip), a GPU or a CPU runtime: the mesh is sized
# from `jax.devices()`. On Colab, put this repository at `/content/glomo_jax`
# first (upload it, or `git clone` your copy), or set `GLOMO_JAX_SOURCE` to
# anything `pip install` accepts.

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

# %% [markdown]
# ## The devices

# %%
import jax

devices = jax.devices()
print(f"JAX {jax.__version__}, backend {jax.default_backend()}: {len(devices)} "
      f"{devices[0].device_kind} device(s), {jax.process_count()} process(es)")

# %% [markdown]
# ## One config
#
# `PRESET` is `"full"` here (2,000 steps: about 2 minutes on 2 CPU cores,
# seconds on a TPU); the environment variable `GLOMO_JAX_NOTEBOOK_PRESET=tiny`
# gives the seconds-long run that CI executes. The batch grows with the number
# of devices (16 windows per device), so every device of the mesh's data axis
# gets the same share.

# %%
from glomo_jax import ModelConfig
from glomo_jax.data import CorpusSpec, SyntheticConfig
from glomo_jax.pretraining import PretrainConfig
from glomo_jax.train.config import LoopOptions

PRESET = os.environ.get("GLOMO_JAX_NOTEBOOK_PRESET", "full")
WORKDIR = os.path.abspath("runs/notebook_pretrain")
tiny = PRESET == "tiny"

config = PretrainConfig(
    model=ModelConfig(dim=16 if tiny else 64, num_heads=4, head_dim=8 if tiny else 32,
                      num_graph_layers=2, key_layers=2, query_layers=2, kernel_size=3,
                      context_length=3, decoder_layers=1, sample_positions=0,
                      loss_chunk_size=2048),
    corpus=CorpusSpec(source="synthetic",
                      synthetic=SyntheticConfig(num_documents=60 if tiny else 3000)),
    batch_size=16 * len(devices), bptt=64, shift=32, optimizer="sgd", learning_rate=8.0,
    momentum=0.2, clip_norm=0.25, eval_batches=2 if tiny else 8, heldout_fraction=0.05,
    loop=LoopOptions(num_steps=6 if tiny else 2000, log_every=2 if tiny else 100,
                     eval_every=3 if tiny else 500, checkpoint_every=3 if tiny else 500,
                     plateau_patience=0, compile_fast=tiny))
print(f"preset {PRESET!r}: {config.loop.num_steps} steps of {config.batch_size} windows × "
      f"{config.bptt} tokens, d={config.model.dim}, {config.model.num_heads} heads, "
      f"L={config.model.num_graph_layers}; workdir {WORKDIR}")

# %% [markdown]
# ## Pretraining
#
# Progress (steps/s, loss, ETA) is printed as the run goes; rerunning the cell
# resumes from the last checkpoint in `WORKDIR`. At the end the frozen graph
# predictor is exported to `WORKDIR/export`.

# %%
from glomo_jax.pretraining import train_and_evaluate
from glomo_jax.train.console import show_progress

show_progress()
summary = train_and_evaluate(config, WORKDIR)
print(f"step {summary['step']}: held-out loss {summary['eval']['heldout']['loss']:.3f}; "
      f"export {summary['export']}")

# %% [markdown]
# ## The exported predictor, loaded as another program would

# %%
from glomo_jax.export import load_graph_predictor

predictor = load_graph_predictor(summary["export"])
print(predictor)

# %% [markdown]
# ## The graphs of a sentence
#
# Type a sentence of the synthetic language (determiners such as `the`,
# `these`; nouns such as `baker`/`bakers`; verbs such as `sees`/`see`; `that`,
# prepositions, `[ ... ]`, `named` and names; `glomo_jax.data.synthetic` lists
# them all). Each small map is one (direction, layer, head): rows are targets,
# columns the sources they read from; a row's weights sum to 1, or to 0 when
# every score is under the threshold.

# %%
from IPython.display import Image, display

from glomo_jax.visualize import plot_graphs

TEXT = "the bakers that the painter likes [ beside the doors ] see a tall lion named judy ."  # @param {type:"string"}
graphs, tokens, mask, pieces = predictor.graphs_from_text([TEXT])
print(f"{len(pieces[0])} pieces: {' '.join(pieces[0])}")
print(f"graphs {graphs.shape} = [batch, 2L (forward, then backward), heads, target, source]")
png = plot_graphs(graphs[0], pieces[0], os.path.join(WORKDIR, "sentence_graphs.png"))
display(Image(filename=png))

# %% [markdown]
# ## TensorBoard
#
# Training and held-out metrics were written to `WORKDIR/tensorboard`. On
# Colab they are shown inline; elsewhere run the printed command.

# %%
logdir = os.path.join(WORKDIR, "tensorboard")
if "google.colab" in sys.modules:
  from tensorboard import notebook
  notebook.start(f"--logdir {logdir}")
else:
  print(f"tensorboard --logdir {logdir}")
