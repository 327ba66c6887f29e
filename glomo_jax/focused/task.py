"""The picking task on the training loop: `run_picking(config, workdir)`.

Sets, all generated from `data_seed` (each from its own stream, so one
set's size changes no other; `glomo_jax.focused.picking`): train
(`train_examples`, shuffled by `seed` each epoch), validation (selects the
best step), and, scored with the best variables, test (the training
distribution), n<L> for each test length L (k in the trained range; with
test_k 'any' or 'both' also n<L>_anyk, k up to L), malicious (runs of one
digit at the training length) and the user's `test_file` ('file'). Every
score has its accuracy, mean loss and gate openness (the share of real
digits the gate opened; 1 for the baselines).

Training: `GateObjective.loss` (`focused_loss`: the answer's
log-likelihood; REINFORCE with the leave-one-out baseline, the sparsity
cost in the reward, the entropy term) with gates sampled from the 'gate'
rng stream, `gate.samples` of each example (or the answer's
log-likelihood alone with an oracle gate, `model.train_gate` 'prefix' or
'kth'); the sparsity weight grows linearly from 0 to β over the first
`gate.beta_warmup` steps (each batch carries its step, `NumberedBatches`),
so the network learns to read before the gate is asked to close. At the
end <workdir>/profile.json holds, for the best variables, the data of the
slides' Figure 3
('profile': the gate openness and the attention's mean weight at each
position t for k = 1/5 .. 5/5 of the largest trained k, on sequences of
the longest training length) and one sequence's open gates ('sequence': the first test
example).
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax

from glomo_jax.downstream.run import train_and_report
from glomo_jax.downstream.scores import classification_sums, summed_accuracy
from glomo_jax.downstream.task import VALIDATION, DownstreamTask
from glomo_jax.focused.config import PickingConfig
from glomo_jax.focused.model import PickingReader, evaluation_rng
from glomo_jax.focused.picking import (PickingSet, generate, generate_malicious,
                                       read_picking)
from glomo_jax.io import write_json
from glomo_jax.train.batches import NumberedBatches, batch_order, host_rows
from glomo_jax.train.task import RunContext, RunEval
from glomo_jax.train.workdir import holding_workdir

logger = logging.getLogger("glomo_jax.train")

STREAMS = {"train": 0, VALIDATION: 1, "test": 2, "malicious": 3, "n": 4, "n_anyk": 5,
           "profile": 6}
PROFILE_POINTS = 5
PROFILE_FILE = "profile.json"


def length_splits(config: PickingConfig) -> list[tuple[str, int, bool]]:
  """(split name, length, k up to the length) of each longer test set."""
  out = []
  for n in config.test_lengths:
    if config.test_k in ("trained", "both"):
      out.append((f"n{n}", n, False))
    if config.test_k in ("any", "both"):
      out.append((f"n{n}_anyk", n, True))
  return out


def length_set(config: PickingConfig, n: int, any_k: bool = False) -> PickingSet:
  """The test set of n-digit sequences: split n<n> (k in the trained range)
  or, any_k, n<n>_anyk (k up to n)."""
  c = config
  return generate(_stream(c, "n_anyk" if any_k else "n", n), c.test_examples, n, n, c.min_k,
                  None if any_k else c.trained_max_k)


def _stream(config: PickingConfig, name: str, n: int = 0) -> np.random.Generator:
  """The generator of one set (`STREAMS`; n: its length, for the n<L> sets)."""
  return np.random.default_rng([config.data_seed, STREAMS[name], n])


def load_picking(config: PickingConfig) -> dict[str, PickingSet]:
  """Every set of the module docstring, by split name."""
  c = config
  trained = dict(min_k=c.min_k, max_k=c.trained_max_k)
  splits = {name: generate(_stream(c, name), count, c.min_length, c.max_length, **trained)
            for name, count in (("train", c.train_examples),
                                (VALIDATION, c.validation_examples),
                                ("test", c.test_examples))}
  for name, n, any_k in length_splits(c):
    splits[name] = length_set(c, n, any_k)
  splits["malicious"] = generate_malicious(_stream(c, "malicious"), c.test_examples, c.max_length,
                                           c.malicious_max_run, **trained)
  if c.test_file:
    splits["file"] = read_picking(c.test_file)
  return splits


class PickingTask(DownstreamTask):
  """The module docstring's task: `PickingReader` on `PickingSet`s."""
  rng_streams = ("gate",)
  log_metrics = ("loss", "accuracy", "openness")

  def __init__(self, config: PickingConfig, splits: Mapping[str, PickingSet]):
    self.splits = dict(splits)
    self.held_out = tuple(s for s in self.splits if s not in ("train", VALIDATION))
    self.model = config.model.reader()
    super().__init__(config, self.splits["train"],
                     lambda idx: self._batch("train", idx, config.optim.batch_size),
                     eval_batch_size=100)
    self.tokens_per_batch = self.batch_size * config.max_length
    self.unit_name = "digits"

  def _batch(self, split: str, indices, size: int) -> dict:
    return host_rows(self.splits[split].batch(indices, size), *self.process)

  # ---- model ------------------------------------------------------------------
  def init_variables(self, rng):
    return self.model.init(rng, *PickingReader.example_inputs())

  def _answer(self, variables, batch, decide: str, rng=None):
    return self.model.apply(variables, batch["digits"], batch["length"], batch["k"],
                            decide=decide, rng=rng)

  def loss(self, variables, batch, rngs):
    gate = self.config.model.train_gate
    batch = sample_copies(batch, self.config.gate.samples)
    out = self._answer(variables, batch, gate, rngs["gate"] if gate == "sample" else None)
    log_likelihood = -optax.softmax_cross_entropy_with_integer_labels(
        out.logits.astype(jnp.float32), batch["target"])
    loss, metrics = self.config.gate.loss(log_likelihood, out.gate_logits, out.readable,
                                          out.mask, batch["weight"], batch["step"][0])
    correct = (jnp.argmax(out.logits, -1) == batch["target"]).astype(jnp.float32)
    accuracy = jnp.sum(correct * batch["weight"]) / jnp.maximum(jnp.sum(batch["weight"]), 1)
    return loss, dict(metrics, accuracy=accuracy), variables["batch_stats"]

  # ---- data and evaluation ----------------------------------------------------
  def train_batches(self):
    return NumberedBatches(self.batches)

  def batch_spec(self):
    b, t = self.batch_size, self.splits["train"].max_length
    rows = jax.ShapeDtypeStruct((b,), jnp.int32)
    return {"digits": jax.ShapeDtypeStruct((b, t), jnp.int32), "length": rows, "k": rows,
            "target": rows, "index": rows, "weight": jax.ShapeDtypeStruct((b,), jnp.float32),
            "step": rows}

  def eval_step(self, variables, batch):
    """Sums over the batch: `classification_sums`; 'opened' and 'digits'
    (real digits opened, real digits); per position [T]: 'gate_at'
    (examples whose gate is open there) and 'focus_at' (attention weight)."""
    rng = None
    if self.config.model.test_gate == "sample":
      rng = evaluation_rng(self.config.seed, batch["index"][0])
    out = self._answer(variables, batch, self.config.model.test_gate, rng)
    w = batch["weight"]
    mask = out.mask.astype(jnp.float32) * w[:, None]
    return {**classification_sums(out.logits, batch["target"], w),
            "opened": jnp.sum(out.readable * mask), "digits": jnp.sum(mask),
            "gate_at": jnp.sum(out.readable * mask, 0),
            "focus_at": jnp.sum(out.attention * w[:, None], 0)}

  def split_sums(self, split: str, run_eval: RunEval) -> tuple[dict, dict]:
    """(accuracy, loss and examples of a split; the sums of `eval_step`'s
    other outputs over it, unrounded: 'opened', 'digits', 'gate_at',
    'focus_at')."""
    extra: dict = {}
    scores = summed_accuracy((self._batch(split, indices, self.eval_batch_size)
                              for indices in batch_order(self.splits[split],
                                                         self.eval_batch_size)),
                             run_eval, extra)
    return scores, extra

  def evaluate(self, split: str, run_eval: RunEval) -> dict[str, Any]:
    """Accuracy (a fraction), mean loss, examples and gate openness of a
    split; a 'profile…' split (Figure 3's data) also gives the gate openness
    and mean attention at each position."""
    scores, extra = self.split_sums(split, run_eval)
    scores["openness"] = float(extra["opened"] / max(float(extra["digits"]), 1.0))
    if split.startswith("profile"):
      count = max(scores["examples"], 1.0)
      scores["gate_at"] = (extra["gate_at"] / count).round(4).tolist()
      scores["focus_at"] = (extra["focus_at"] / count).round(4).tolist()
    return scores

  def curve(self, entry: dict) -> dict:
    """A point of results.json's curve, with the train and validation openness."""
    return dict(super().curve(entry), train_openness=entry["train"].get("openness"),
                validation_openness=entry[VALIDATION].get("openness"))

  def on_end(self, ctx: RunContext) -> dict[str, Any]:
    """The held-out scores (`DownstreamTask.on_end`), then Figure 3's data
    and one sequence's gates for the best variables (module docstring)."""
    out = super().on_end(ctx)
    best = ctx.best_variables()
    c = self.config
    top = c.trained_max_k
    positions = sorted({max(c.min_k, round(top * i / PROFILE_POINTS))
                        for i in range(1, PROFILE_POINTS + 1)})
    sequences = generate(np.random.default_rng([c.data_seed, STREAMS["profile"]]),
                         c.validation_examples, c.max_length, c.max_length)
    profile = []
    for k in positions:
      self.splits[f"profile_{k}"] = sequences.with_k(k)
      profile.append({"k": k, **ctx.evaluate(f"profile_{k}", best)})
    test = self.splits["test"]
    one = test.rows(np.zeros(self.eval_batch_size, np.int64))   # one example, repeated
    self.splits["profile_sequence"] = one
    seen = ctx.evaluate("profile_sequence", best)
    n = int(test.lengths[0])
    sequence = {"digits": "".join(map(str, test.digits[0, :n])), "k": int(test.k[0]),
                "target": int(test.targets[0]), "correct": seen["accuracy"],
                "gate_at": seen["gate_at"][:n], "focus_at": seen["focus_at"][:n]}
    if ctx.is_main:
      write_json(os.path.join(ctx.workdir, PROFILE_FILE), {"profile": profile,
                                                           "sequence": sequence})
    return dict(out, profile_file=PROFILE_FILE)


def sample_copies(batch: dict, samples: int) -> dict:
  """S copies of a batch's rows, sample-major (row s B + i is example i), the
  layout `leave_one_out_baseline` reads; the batch itself when S is 1."""
  if samples == 1:
    return batch
  return {name: jnp.tile(value, (samples,) + (1,) * (jnp.ndim(value) - 1))
          for name, value in batch.items()}


@holding_workdir
def run_picking(config: PickingConfig, workdir: str, *, devices=None,
                compilation_cache_dir: str | None = None) -> dict[str, Any]:
  """One picking run (module docstring); returns and writes results.json:
  the validation accuracy of the best step, every held-out split's scores
  ('scores': accuracy, loss, examples, openness, as fractions), the curve
  and times; and writes profile.json (module docstring)."""
  start = time.time()
  os.makedirs(workdir, exist_ok=True)
  splits = load_picking(config)
  logger.info("picking %s: %s", config.model.kind,
              ", ".join(f"{k} {len(v)}" for k, v in splits.items()))
  return train_and_report(
      PickingTask(config, splits), workdir,
      lambda summary: {"kind": config.model.kind,
                       "validation_accuracy": summary["results"][VALIDATION],
                       "test": summary["results"].get("test"),
                       "scores": summary["held_out_metrics"]},
      start=start, devices=devices, compilation_cache_dir=compilation_cache_dir)
