r"""How many tokens until the subject arc? The verb-form probe
(`glomo_jax.classification.lm_agreement`) and the held-out next-token loss of
language models at every kept checkpoint of their runs, one row per
(run, checkpoint), and where the curve of attractor items crosses 50 %.

  python -m experiments.token_curve --runs=runs/tokens/glomo_d128_s0,runs/tokens/lstm_s0 \
      --examples=runs/verb_number_data/ud_all.jsonl.gz --out=runs/tokens/curve

Each run is a GLoMo pretraining run or an LSTM control run
(`experiments.lstm_lm`), kept checkpoints every few million tokens; tokens
are steps × batch × window (the loop's count; windows overlap by half, so
each token of the corpus is read about twice per pass). A checkpoint's
figures are kept in <run>/probe/<step>.json and reused (the held-out loss
over the first --eval_batches batches of the run's held-out windows). --out gets
table.md (model, parameters, tokens, the probe on items with an attractor
and without, the held-out next-token cross-entropy), curve.json, and
curve.png.

The checkpoint for a transfer (--choose_on=FILE, a subset of --examples,
e.g. the verb-number grid's training items `ud_fit`): per run, the
checkpoint whose probe is highest on the attractor items among those
examples only, the fewest tokens on a tie, so that the choice never looks
at the items a transfer is then scored on (`ud_heldout`); in table.md and
curve.json ("chosen").

The crossing: per run, a line through the attractor items' accuracy against
log10 tokens (least squares over its checkpoints past the first
--fit_from tokens), and where it reaches 50 %; its uncertainty from
resampling the probe's items (a bootstrap: the same resampled items at
every checkpoint, the line refitted; the 5th and 95th percentiles). It is
an extrapolation along a line wherever no checkpoint reached 50 %, and it
covers the test items' noise, not another pretraining seed's. Hours on one
H200 for the paper's model: tokens ÷ --h200_tokens_per_s (655,605 tokens/s,
benchmarks/RESULTS.md: bfloat16, batch 1,024).
"""
from __future__ import annotations

import json
import os

from absl import flags

from experiments import cli

_RUNS = flags.DEFINE_list("runs", None, "Language-model run workdirs.")
_EXAMPLES = flags.DEFINE_string("examples", None, "Verb-number JSON lines (the probe's items).")
_OUT = flags.DEFINE_string("out", None, "Directory of table.md, curve.json, curve.png.")
_EVAL_BATCHES = flags.DEFINE_integer("eval_batches", 100, "Held-out batches of the "
                                     "next-token loss (0: all).")
_FIT_FROM = flags.DEFINE_float("fit_from", 4e6, "Fit the line from this many tokens on.")
_BOOTSTRAP = flags.DEFINE_integer("bootstrap", 2000, "Resamples of the probe's items.")
_H200 = flags.DEFINE_float("h200_tokens_per_s", 655_605.0, "The paper model's tokens/s on "
                           "one H200 (benchmarks/RESULTS.md).")
_CHOOSE_ON = flags.DEFINE_string("choose_on", None, "Verb-number JSON lines, a subset of "
                                 "--examples: choose each run's checkpoint on their attractor items.")
flags.mark_flags_as_required(["runs", "examples", "out"])

ATTRACTED = "attractors_1+"


def checkpoint_figures(workdir: str, step: int, examples: list[dict], eval_batches: int,
                       data: dict) -> dict:
  """The probe and the held-out loss of one checkpoint (cached in
  <workdir>/probe/<step>.json); 'correct': per item, 1 when right. data:
  the run's held-out windows, read at the first call ({} before)."""
  import jax  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415

  from experiments.lstm_control import heldout_next_token_loss, restore_language_model  # noqa: PLC0415
  from glomo_jax.pretraining import text_data  # noqa: PLC0415
  from glomo_jax.classification.lm_agreement import (agreement_scores, correct_items,  # noqa: PLC0415
                                                     verb_form_log_probs)
  from glomo_jax.classification.verb_number import SCORE_GROUPS  # noqa: PLC0415
  from glomo_jax.io import write_json  # noqa: PLC0415
  path = os.path.join(workdir, "probe", f"{step}.json")
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  config, model, variables, tokenizer, _ = restore_language_model(workdir, step)
  if "windows" not in data:
    data["windows"] = text_data(config, workdir)[1]
  log_probs = verb_form_log_probs(model, variables, tokenizer, examples)
  params = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(variables["params"]))
  figures = {"step": step, "tokens": step * config.batch_size * config.bptt,
             "model": type(model).__name__, "parameters": params,
             "probe": agreement_scores(examples, log_probs, SCORE_GROUPS),
             "heldout": heldout_next_token_loss(config, model, variables, workdir,
                                                eval_batches, data["windows"])["loss"],
             "correct": correct_items(examples, log_probs).astype(int).tolist()}
  write_json(path, figures)
  return figures


def crossing(tokens, correct, attracted, fit_from: float, resamples: int, seed: int = 0):
  """(tokens where the line reaches 50 %, 5th and 95th percentiles, slope a
  decade) of the attractor items' accuracy against log10 tokens; None where
  fewer than 2 checkpoints are fitted or the line does not rise."""
  import numpy as np  # noqa: PLC0415
  if len(tokens) < 2:
    return None
  tokens, correct = np.asarray(tokens, float), np.asarray(correct)[:, attracted]   # [C, A]
  keep = tokens >= fit_from
  if keep.sum() < 2:
    return None
  x = np.log10(tokens[keep])

  def cross(rows):
    slope, intercept = np.polyfit(x, rows.mean(1), 1)
    decades = (0.5 - intercept) / slope if slope > 0 else np.inf
    return (10 ** decades if decades < 300 else np.inf), slope
  point, slope = cross(correct[keep])
  rng = np.random.default_rng(seed)
  draws = [cross(correct[keep][:, rng.integers(0, correct.shape[1], correct.shape[1])])[0]
           for _ in range(resamples)]
  low, high = np.percentile(np.nan_to_num(draws, posinf=np.finfo(float).max), [5, 95])
  return {"tokens": float(point), "low": float(low), "high": float(high),
          "slope_per_decade": float(slope), "checkpoints": int(keep.sum())}


def item_key(example: dict) -> tuple:
  """An item's identity across verb-number files: (words, verb)."""
  return tuple(example["words"]), example["verb"]


def choose(tokens, correct, among) -> dict:
  """The checkpoint whose accuracy on the items `among` (bool [A]) is highest,
  the fewest tokens on a tie: {'index', 'tokens', 'accuracy', 'items'}.
  tokens: [C]; correct: [C, A] of 0/1."""
  import numpy as np  # noqa: PLC0415
  tokens, correct = np.asarray(tokens, float), np.asarray(correct)[:, among]
  accuracy = correct.mean(1)
  best = max(range(len(tokens)), key=lambda c: (accuracy[c], -tokens[c]))
  return {"index": int(best), "tokens": float(tokens[best]), "accuracy": float(accuracy[best]),
          "items": int(correct.shape[1])}


def main(argv):
  del argv
  import numpy as np  # noqa: PLC0415

  from glomo_jax.classification.lm_agreement import read_probe_examples  # noqa: PLC0415
  from glomo_jax.io import write_json  # noqa: PLC0415
  examples = read_probe_examples(_EXAMPLES.value)
  attracted = np.asarray([e.get("attractors", 0) >= 1 for e in examples])
  chooser = None
  if _CHOOSE_ON.value:
    subset = {item_key(e) for e in read_probe_examples(_CHOOSE_ON.value)}
    chooser = attracted & np.asarray([item_key(e) in subset for e in examples])
  os.makedirs(_OUT.value, exist_ok=True)
  rows, curves = [], {}
  for workdir in _RUNS.value:
    steps = sorted(int(s) for s in os.listdir(os.path.join(workdir, "checkpoints"))
                   if s.isdigit())
    if not steps:
      print(f"{workdir}: no kept checkpoint yet, left out")
      continue
    data = {}
    figures = [checkpoint_figures(workdir, step, examples, _EVAL_BATCHES.value, data)
               for step in steps]
    name = os.path.basename(os.path.normpath(workdir))
    fit = crossing([f["tokens"] for f in figures], [f["correct"] for f in figures],
                   attracted, _FIT_FROM.value, _BOOTSTRAP.value)
    curves[name] = {"points": [{k: f[k] for k in ("step", "tokens", "heldout")}
                               | {"attracted": f["probe"][f"accuracy/{ATTRACTED}"],
                                  "plain": f["probe"]["accuracy/attractors_0"]}
                               for f in figures], "crossing": fit}
    if chooser is not None:
      chosen = choose([f["tokens"] for f in figures], [f["correct"] for f in figures], chooser)
      curves[name]["chosen"] = chosen | {"step": figures[chosen["index"]]["step"]}
    for f in figures:
      rows.append((name, f["model"], f["parameters"], f["tokens"],
                   f["probe"][f"accuracy/{ATTRACTED}"], f["probe"]["accuracy/attractors_0"],
                   f["heldout"]))
  write_json(os.path.join(_OUT.value, "curve.json"), curves, indent=1)
  lines = ["| run | model | parameters | tokens | attractor items (%d) | without (%d) | held-out "
           "next-token loss |" % (attracted.sum(), (~attracted).sum()),
           "|---|---|---|---|---|---|---|"]
  for name, model, params, tokens, a, p, loss in rows:
    lines.append(f"| {name} | {model} | {params:,} | {tokens / 1e6:.0f}M | {100 * a:.1f} | "
                 f"{100 * p:.1f} | {loss:.3f} |")
  for name, curve in curves.items():
    if "chosen" in curve:
      c = curve["chosen"]
      lines.append(f"\n{name}: chosen on {os.path.basename(_CHOOSE_ON.value)}'s {c['items']} "
                   f"attractor items: step {c['step']} ({c['tokens'] / 1e6:.0f}M tokens), "
                   f"{100 * c['accuracy']:.1f} %")
    fit = curve["crossing"]
    if fit:
      hours = lambda t: t / _H200.value / 3600  # noqa: E731
      slope = (f"{fit['slope_per_decade'] * 100:+.1f} points a decade of tokens over "
               f"{fit['checkpoints']} checkpoints")
      if not np.isfinite(fit["tokens"]):
        lines.append(f"\n{name}: the line does not rise ({slope}): no crossing of 50 %")
        continue
      bound = lambda t: f"{t:.3g}" if t < 1e300 else "never"  # noqa: E731
      lines.append(f"\n{name}: 50 % on attractor items at {fit['tokens']:.3g} tokens (90 %: "
                   f"{bound(fit['low'])}–{bound(fit['high'])}; {slope}): "
                   f"{hours(fit['tokens']):.3g} H200 hours for the paper's model")
  table = "\n".join(lines) + "\n"
  with open(os.path.join(_OUT.value, "table.md"), "w") as f:
    f.write(table)
  print(table)
  _plot(curves, os.path.join(_OUT.value, "curve.png"))


def _plot(curves: dict, path: str) -> None:
  import matplotlib  # noqa: PLC0415
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415
  fig, ax = plt.subplots(figsize=(6, 4))
  for name, curve in curves.items():
    points = curve["points"]
    ax.plot([p["tokens"] for p in points], [100 * p["attracted"] for p in points], "o-",
            label=name)
  ax.axhline(50, color="grey", lw=0.8, ls="--")
  ax.set_xscale("log")
  ax.set_xlabel("tokens")
  ax.set_ylabel("agreeing form preferred, attractor items (%)")
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


if __name__ == "__main__":
  cli.run(main)
