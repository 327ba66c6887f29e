"""Text pretraining as a task of the training loop: corpus → tokenizer →
windows → GLoMo's loss; evaluation on held-out windows; the planted-arc
scores on the built-in corpus; the frozen graph predictor exported at the end.

`train_and_evaluate(config, workdir)` is the whole run. The tokenizer is
saved in the workdir on the first run and reused by every resume and by the
export; `config.json` records the run's config once the workdir's
checkpoints are known to fit it.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from glomo_jax import tuning
from glomo_jax.data import PretrainingData, Tokenizer, pretraining_data
from glomo_jax.data.corpus import iter_documents
from glomo_jax.data.synthetic import vocabulary as synthetic_vocabulary
from glomo_jax.data.tokenizer import train_tokenizer, train_word_tokenizer
from glomo_jax.errors import InputError
from glomo_jax.eval.arcs import ArcAccumulator
from glomo_jax.eval.graph_stats import row_health
from glomo_jax.eval.locality import SUMS as LOCALITY_SUMS
from glomo_jax.eval.locality import locality_metrics
from glomo_jax.io import write_json
from glomo_jax.pretraining.config import PretrainConfig, TextPretrainConfigBase
from glomo_jax.pretraining.fixed_graphs import fixed_graph_fn
from glomo_jax.pretraining.objective import GLoMoObjective
from glomo_jax.train import loop
from glomo_jax.train.run_config import CONFIG_FILE
from glomo_jax.train.task import RunContext, RunEval, Task
from glomo_jax.train.workdir import holding_workdir

logger = logging.getLogger("glomo_jax.train")

TOKENIZER_FILE = "tokenizer.model"
ARC_FILE = "arc_scores.json"
HELDOUT = "heldout"


def prepare_tokenizer(config: TextPretrainConfigBase, workdir: str) -> Tokenizer:
  """The run's tokenizer: the one saved in the workdir, else the configured
  file, else trained on a sample of the corpus; saved in the workdir."""
  path = os.path.join(workdir, TOKENIZER_FILE)
  if os.path.exists(path):
    return Tokenizer.load(path)
  spec = config.corpus
  if config.tokenizer_path:
    tokenizer = Tokenizer.load(config.tokenizer_path)
  elif spec.source == "synthetic":
    tokenizer = train_word_tokenizer(synthetic_vocabulary(), os.path.join(workdir, "spm_tmp/"))
  else:
    logger.info("training a %d-piece SentencePiece model on up to %d characters of %s",
                config.vocab_size, config.tokenizer_sample_chars, spec.describe())
    try:
      tokenizer = train_tokenizer(iter_documents(spec), config.vocab_size,
                                  os.path.join(workdir, "spm_tmp/"),
                                  sample_chars=config.tokenizer_sample_chars,
                                  model_type=config.tokenizer_model_type)
    except InputError:
      raise
    except ValueError as e:  # the tokenizer's complaints, about this corpus
      raise InputError(spec.describe(), str(e)) from None
  tokenizer.save(path)
  return tokenizer


def text_data(config: TextPretrainConfigBase, workdir: str
              ) -> tuple[Tokenizer, PretrainingData]:
  """(tokenizer, `PretrainingData`) of a text run: the tokenizer
  (`prepare_tokenizer`), then the corpus tokenized (cached in
  <workdir>/cache), split and cut into the config's windows (this
  process's rows of each batch)."""
  tokenizer = prepare_tokenizer(config, workdir)
  data = pretraining_data(
      config.corpus, tokenizer, batch_size=config.batch_size, bptt=config.bptt,
      shift=config.shift, seed=config.seed, heldout_fraction=config.heldout_fraction,
      cache_dir=os.path.join(workdir, "cache"), process_index=jax.process_index(),
      process_count=jax.process_count(), num_threads=os.cpu_count() or 1)
  eval_stream = data.eval_stream
  logger.info("corpus: %d training tokens in %d windows; %s held-out tokens; vocabulary %d",
              data.train_stream.num_tokens, data.train.num_windows,
              eval_stream.num_tokens if eval_stream is not None else 0, tokenizer.vocab_size)
  return tokenizer, data


def model_batch(batch: dict, with_arcs: bool) -> dict:
  """A window batch as the model reads it: {'tokens', 'mask'} int32 (and the
  planted arcs' 'arc_source' for the 'planted' graph source)."""
  keys = ("tokens", "mask", "arc_source") if with_arcs else ("tokens", "mask")
  return {k: batch[k].astype(np.int32) for k in keys}


class TrainWindows:
  """The training windows (a `WindowIterator`) as the loop's batches
  (`model_batch`), resumable."""

  def __init__(self, windows, with_arcs: bool):
    self.windows, self.with_arcs = windows, with_arcs

  def __iter__(self):
    return self

  def __next__(self) -> dict:
    return model_batch(next(self.windows), self.with_arcs)

  def state(self) -> dict:
    return self.windows.state()

  def restore(self, state) -> None:
    self.windows.restore(state)


class PretrainingTask(GLoMoObjective, Task):
  """GLoMo pretraining on a text corpus (see the module docstring).

  Attributes:
    config: the PretrainConfig. workdir: the run directory.
    tokenizer, data: the run's tokenizer and `PretrainingData`.
    model_config: config.model with the tokenizer's vocabulary size.
  """
  log_metrics = ("loss", "loss_fw", "loss_bw", "arc_predicting_best", "arc_predicting_chance",
                 "arc_own_best")
  batch_flag = "--config.batch_size"
  kernels_flag = "--config.model.kernels"

  def __init__(self, config: PretrainConfig, workdir: str, *, split_batch_scores: bool = False):
    self.config, self.workdir = config, workdir
    os.makedirs(workdir, exist_ok=True)
    self.tokenizer, self.data = text_data(config, workdir)
    eval_stream = self.data.eval_stream
    self.has_arcs = self.data.train_stream.has_arcs
    self.arcs_in_batch = config.graph_source == "planted"
    model = config.model
    super().__init__(model.replace(vocab_size=self.tokenizer.vocab_size), config.bptt,
                     config.build_optimizer(),
                     split_batch_scores=split_batch_scores, with_graphs=self.has_arcs,
                     fixed_graphs=fixed_graph_fn(
                         config.graph_source, model.num_graph_layers, model.num_heads,
                         export=config.graph_export,
                         tokenizer_fingerprint=self.tokenizer.fingerprint))
    self.eval_splits = (HELDOUT,) if eval_stream is not None else ()
    self.tokens_per_batch = config.batch_size * config.bptt
    logger.info("model config: %s", self.model_config)

  # ---- data -------------------------------------------------------------------
  def train_batches(self):
    return TrainWindows(self.data.train, self.arcs_in_batch)

  def batch_spec(self):
    shape = jax.ShapeDtypeStruct((self.config.batch_size, self.config.bptt), jnp.int32)
    keys = ("tokens", "mask", "arc_source") if self.arcs_in_batch else ("tokens", "mask")
    return {k: shape for k in keys}

  # ---- evaluation -------------------------------------------------------------
  def evaluate(self, split: str, run_eval: RunEval) -> dict[str, Any]:
    """Held-out loss per predicted token, the empty rows and dead heads of
    each graph layer (`glomo_jax.eval.row_health`; with running BatchNorm
    statistics, and as 'batch_stats_*' with the batch's, as in training),
    the graphs' locality (`glomo_jax.eval.locality`), and arc scores on the
    built-in corpus, over the first `eval_batches` batches (0: all)."""
    loss_sum = tokens = real_rows = 0.0
    live_rows = batch_live_rows = 0
    locality = dict.fromkeys(LOCALITY_SUMS, 0)
    arcs = ArcAccumulator()
    for i, batch in enumerate(self.data.eval_iterator()):
      if self.config.eval_batches and i >= self.config.eval_batches:
        break
      out = run_eval(model_batch(batch, self.arcs_in_batch))
      loss_sum += float(out["loss_sum"])
      tokens += float(out["tokens"])
      live_rows = live_rows + np.asarray(out["live_rows"])
      if "live_rows_batch_stats" in out:
        batch_live_rows = batch_live_rows + np.asarray(out["live_rows_batch_stats"])
      locality = {k: v + np.asarray(out["locality"][k]) for k, v in locality.items()}
      real_rows += float(out["real_rows"])
      if self.has_arcs:
        arcs.add(out["graphs"],
                 multihost_utils.process_allgather(batch["arc_source"], tiled=True))
    result = {"loss": loss_sum / max(tokens, 1.0), "tokens": tokens}
    if real_rows:
      result.update(row_health(live_rows, real_rows))
      if not isinstance(batch_live_rows, int):
        result.update({f"batch_stats_{k}": v
                       for k, v in row_health(batch_live_rows, real_rows).items()})
      result.update(locality_metrics(locality))
    if self.has_arcs:
      result.update({f"arc_{k}": v for k, v in arcs.result().items()})
    return result

  # ---- hooks ------------------------------------------------------------------
  def _arc_record(self) -> dict:
    path = os.path.join(self.workdir, ARC_FILE)
    if not os.path.exists(path):
      return {}
    with open(path) as f:
      return json.load(f)

  def _write_arc_record(self, ctx: RunContext, record: dict) -> None:
    # atomic: the other processes read this file at the same moment
    if ctx.is_main and record:
      write_json(os.path.join(self.workdir, ARC_FILE), record, indent=2)

  def on_start(self, ctx: RunContext) -> None:
    if ctx.is_main:  # written once the run is known to fit the workdir's checkpoints
      write_json(os.path.join(self.workdir, CONFIG_FILE), self.config.to_dict(), indent=2)
    # decided on what every process knows (the step), so all of them join
    if self.has_arcs and self.eval_splits and int(ctx.state.step) == 0:
      record = self._arc_record()
      record["untrained"] = _arcs(ctx.evaluate(HELDOUT))
      self._write_arc_record(ctx, record)

  def on_end(self, ctx: RunContext) -> dict:
    out: dict[str, Any] = {}
    record = self._arc_record()
    if self.has_arcs and ctx.history and HELDOUT in ctx.history[-1]:
      record["final"] = dict(_arcs(ctx.history[-1][HELDOUT]), step=ctx.history[-1]["step"])
      self._write_arc_record(ctx, record)
    out["arcs"] = record
    if self.config.export:
      from glomo_jax.export import export_graph_predictor  # noqa: PLC0415 (optional piece)
      # every process takes part (sharded arrays are gathered); process 0 writes
      out["export"] = export_graph_predictor(
          os.path.join(self.workdir, "export"), self.model_config, ctx.state.variables,
          self.tokenizer, metadata={"step": int(ctx.state.step),
                                    "workdir": os.path.abspath(self.workdir)},
          overwrite=True)
    return out


def _arcs(metrics: dict) -> dict:
  return {k[len("arc_"):]: v for k, v in metrics.items() if k.startswith("arc_")}


@holding_workdir
def train_and_evaluate(config: PretrainConfig, workdir: str, *,
                       compilation_cache_dir: str | None = None, devices=None) -> dict[str, Any]:
  """Runs (or resumes) a pretraining run in `workdir`.

  Returns the loop's summary (`glomo_jax.train.loop.run`) plus 'arcs' (the
  planted-arc scores, untrained and final, on the built-in corpus) and
  'export' (the export's path, when config.export). A SIGTERM at any
  moment leads to a checkpoint after the current step and a return with
  summary['preempted'] = True (no export).
  """
  devices = jax.devices() if devices is None else list(devices)
  task = PretrainingTask(config, workdir,
                         split_batch_scores=tuning.split_batch_scores(devices))
  return loop.run(task, config.loop.loop_config(**config.loop_fields(),
                                                compilation_cache_dir=compilation_cache_dir),
                  workdir, devices=devices)
