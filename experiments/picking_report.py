"""The picking grid's table and figures (`experiments.picking_grid`; no flags
here): the runs' overrides, ROOT/table.md beside the slides' numbers, and the
slides' Figure 3 and one sequence's gates drawn from a run's profile.json;
`experiments.picking_spans`' tables (`spans_table`)."""
from __future__ import annotations

import json
import os
import statistics

from experiments.grid import finished_results, mean_std, paired

LONG = (400, 800, 1600, 10_000)
TRAINED = 200            # the length the longer tests are trained at
# the slides: Table 2 (trained and tested at n) and Table 4 (trained at 200)
PUBLISHED = {"lstm1": {100: 99.4, 200: 97.0, 400: 92.9, "n400": 55.9, "n800": 39.6,
                  "n1600": 29.5, "n10000": 18.5},
        "lstm2": {100: 99.7, 200: 99.2, 400: 97.5, "n400": 61.4, "n800": 39.7,
                  "n1600": 28.6, "n10000": 14.8},
        "fhe": {100: 99.5, 200: 99.4, 400: 96.9, "n400": 97.6, "n800": 95.6,
                "n1600": 93.3, "n10000": 66.8}}

_GATE_NUMBERS = {"g": "gamma", "b": "beta"}          # option prefix -> config.gate field
# a model row's options (`model_arguments`), as errors and --models' help name them
OPTIONS = "_g<gamma>, _b<beta>, _prefix, _kth, _samples<S>, _detach, _gpos (fhe); _pos (any)"


def model_arguments(model: str) -> list[str]:
  """The config overrides of a model row: <kind>[_<option>...], kind lstm1,
  lstm2 or fhe; options g<γ> (the sparsity target, fhe), b<β> (the sparsity
  cost's weight, fhe), prefix or kth (an oracle gate in training and at
  test, fhe), samples<S> (S gate samples of each example, fhe), detach
  (REINFORCE reaches the gate's weights only: `model.reinforce_encoder`
  false, fhe), gpos (positions to the gate alone: `model.gate_positions`,
  fhe) and pos (`model.positions`)."""
  kind, *options = model.split("_")
  if kind not in ("lstm1", "lstm2", "fhe"):
    raise ValueError(f"unknown model {model!r}: lstm1, lstm2 or fhe, then options {OPTIONS}")
  out = [f"--config.model.kind={kind}"]
  if sum(o in ("prefix", "kth") for o in options) + any(o.startswith("samples")
                                                        for o in options) > 1:
    raise ValueError(f"model {model!r}: one oracle gate, or gate samples, not both")
  if "gpos" in options and any(o in ("prefix", "kth") for o in options):
    raise ValueError(f"model {model!r}: an oracle gate is not learnt; gpos feeds a learnt one")
  for option in options:
    if option == "pos":
      out.append("--config.model.positions=true")
    elif kind == "fhe" and option in ("prefix", "kth"):
      out += [f"--config.model.train_gate={option}", f"--config.model.test_gate={option}"]
    elif kind == "fhe" and option == "gpos":
      out.append("--config.model.gate_positions=true")
    elif kind == "fhe" and option == "detach":
      out.append("--config.model.reinforce_encoder=false")
    elif kind == "fhe" and option.startswith("samples") and option[7:].isdigit():
      out.append(f"--config.gate.samples={int(option[7:])}")
    elif kind == "fhe" and option[:1] in _GATE_NUMBERS:
      field = _GATE_NUMBERS[option[0]]
      try:
        out.append(f"--config.gate.{field}={float(option[1:])}")
      except ValueError:
        raise ValueError(f"model {model!r}: {option[0]}<{field}> needs a number") from None
    else:
      raise ValueError(f"model {model!r}: unknown option {option!r} for {kind} (options: "
                       f"{OPTIONS})")
  return out


def run_arguments(model: str, n: int) -> list[str]:
  """A run's overrides: the model, its training length, its longer tests."""
  tests = LONG if n == TRAINED else ()
  return model_arguments(model) + [f"--config.min_length={n}", f"--config.max_length={n}",
                                   f"--config.test_lengths={tests!r}"]


def _percent(results: list[dict], split: str, key: str = "accuracy") -> str:
  return mean_std([100 * r["scores"][split][key] for r in results if split in r["scores"]])


def gate_slope(profile: list[dict]) -> float | None:
  """How the gate follows the question: the least-squares slope, against k,
  of the mean position of its openings (Σ_t t G_k(t) / Σ_t G_k(t), G_k:
  profile.json's openness at each position when asked k), over a profile's
  questions. 0 for a gate blind to k (and the baselines), 1/2 for the
  'prefix' oracle, 1 for 'kth'. None with fewer than two questions opening
  anything."""
  ks, centres = [], []
  for entry in profile:
    gates = entry["gate_at"]
    if sum(gates) > 0:
      ks.append(entry["k"])
      centres.append(sum(t * g for t, g in enumerate(gates, 1)) / sum(gates))
  if len(set(ks)) < 2:
    return None
  mk, mc = statistics.fmean(ks), statistics.fmean(centres)
  return (sum((k - mk) * (c - mc) for k, c in zip(ks, centres))
          / sum((k - mk) ** 2 for k in ks))


def _slope(root: str, name: str, results: list[dict]) -> str:
  values = []
  for r in results:
    path = os.path.join(root, f"{name}_s{r['seed']}", "profile.json")
    if os.path.exists(path):
      with open(path, encoding="utf-8") as f:
        slope = gate_slope(json.load(f)["profile"])
      if slope is not None:
        values.append(slope)
  return mean_std(values)


def _paired_lines(runs: dict, models, lengths) -> list[str]:
  """Table rows 'M − B (paired)': each model M but the baselines against each
  baseline B (lstm1, lstm2) among `models`, paired by seed (`grid.paired`);
  runs[(model, n)]: the finished runs' results."""
  baselines = [b for b in ("lstm1", "lstm2") if b in models]
  lines = []
  for n in lengths:
    for model in models:
      for base in baselines if model not in baselines else ():
        rows = {name: runs[name, n] for name in (model, base)}
        seeds = sorted({r["seed"] for r in rows[model]} & {r["seed"] for r in rows[base]})
        if len(seeds) < 2:
          continue
        longer = [paired(rows, model, base, ("scores", f"n{m}")) if n == TRAINED else ""
                  for m in LONG]
        lines.append("| " + " | ".join(
            [f"{model} − {base} (paired)", str(n), ",".join(map(str, seeds)),
             paired(rows, model, base, ("scores", "test")), "", ""]
            + longer + [paired(rows, model, base, ("scores", "malicious")), ""]) + " |")
  return lines


def picking_table(root: str, models, lengths, config: str, extra: list[str]) -> str:
  """ROOT/table.md's text (module docstring) for runs of `config` with `extra`."""
  head = ["model", "n", "seeds", "test at n", "openness at n", "gate slope"] + [
      f"{n:,}" for n in LONG] + ["malicious", "train min / run"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  runs = {(m, n): finished_results(root, f"{m}_n{n}") for m in models for n in lengths}
  for model in models:
    for n in lengths:
      found = runs[model, n]
      if not found:
        continue
      cells = [model, str(n), ",".join(str(r["seed"]) for r in found),
               _percent(found, "test"), _percent(found, "test", "openness"),
               _slope(root, f"{model}_n{n}", found)]
      cells += [_percent(found, f"n{m}") if n == TRAINED else "" for m in LONG]
      cells += [_percent(found, "malicious"),
                f"{sum(r['train_time_s'] for r in found) / len(found) / 60:.1f}"]
      lines.append("| " + " | ".join(cells) + " |")
      published = PUBLISHED.get(model, {})
      if n in published:
        lines.append("| " + " | ".join(
            [f"{model} (slides)", str(n), "", f"{published[n]}", "", ""]
            + [str(published.get(f"n{m}", "")) if n == TRAINED else "" for m in LONG] + ["", ""])
            + " |")
  lines += _paired_lines(runs, models, lengths)
  command = " ".join(["python -m experiments.picking", f"--config={config}"] + extra)
  return ("\n".join(lines) + "\n\nAccuracy and gate openness (share of real digits "
          "read) in %, mean ± sample std over seeds; k in the trained range at every "
          "length. Gate slope: how far the mean position of the open gates moves per "
          "digit k moves, over profile.json's questions (0: blind to k, as the "
          "baselines; 1/2: the prefix oracle; 1: the kth). Each run: "
          f"`{command} --config.model.kind=M --config.min_length=n --config.max_length=n "
          "--config.seed=S --workdir=DIR`; (slides): the slides' numbers (Tables 2 and 4, "
          "FHE-fixed); A − B (paired): mean ± standard error of the per-seed difference, "
          "over the seeds both have (two at least).\n")


def spans_table(workdir: str, length: int, ks: list[int] | None, examples: int) -> str:
  """`experiments.picking_spans`' markdown table of one run: for each k of
  `ks` (default a tenth, half and nine tenths of the largest k trained),
  the accuracy and each span's gate openness and attention mass on the
  first `examples` sequences of `length` digits of the run's n-stream."""
  from glomo_jax.focused.spans import (SpanReader, load_picking_run,  # noqa: PLC0415
                                       read_picking_config, span_edges)
  from glomo_jax.focused.task import length_set  # noqa: PLC0415
  config = read_picking_config(workdir)
  trained = config.max_length
  ks = ks or sorted({max(config.min_k, round(config.trained_max_k * f)) for f in (0.1, 0.5, 0.9)})
  for ok, what in ((examples >= 1, f"--examples must be >= 1, got {examples}"),
                   (length >= trained, f"--length must be >= the run's training length "
                                       f"{trained}, got {length}"),
                   (all(1 <= k <= trained for k in ks), f"every --k must be in 1..{trained} "
                                                        f"(the training length), got {ks}")):
    if not ok:
      raise ValueError(f"{workdir}: {what}")
  config, variables = load_picking_run(workdir)
  reader = SpanReader(config, variables)
  sequences = length_set(config.replace(test_examples=max(examples, config.test_examples)),
                         length)
  sequences = sequences.rows(range(examples))
  later = span_edges(trained, trained, length)          # [0, n, 2n, 4n, ..., length]
  head = ["k", "accuracy", "1..k", f"k+1..{trained:,}"] + [
      f"{a + 1:,}..{b:,}" for a, b in zip(later[1:], later[2:])]
  lines = [f"{workdir} ({config.model.kind}, trained at {trained:,} digits): {examples} "
           f"sequences of {length:,} digits, test gate {config.model.test_gate!r}; in each "
           "span, gate open % / attention mass %",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for k in ks:
    read = reader.read(sequences.with_k(k), span_edges(k, trained, length))
    cells = [f"{100 * s['openness']:.2f} / {100 * s['attention']:.1f}" for s in read["spans"]]
    if k == trained:
      cells.insert(1, "–")                   # no digit between k and the trained length
    lines.append("| " + " | ".join([str(k), f"{100 * read['accuracy']:.1f}"] + cells) + " |")
  return "\n".join(lines)


def questions(values: list[str] | None) -> list[int] | None:
  """`experiments.picking_spans`' --k values as integers (None: the default)."""
  try:
    return [int(k) for k in values] if values else None
  except ValueError:
    raise ValueError(f"--k takes whole numbers separated by commas, got {','.join(values)}"
                     ) from None


def draw_figures(workdir: str, root: str) -> list[str]:
  """ROOT/gates_by_position.png and ROOT/open_gates.png from a run's
  profile.json; returns their paths."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
  from matplotlib.figure import Figure  # noqa: PLC0415
  with open(os.path.join(workdir, "profile.json"), encoding="utf-8") as f:
    data = json.load(f)
  profile, sequence = data["profile"], data["sequence"]
  figure = Figure(figsize=(3.2 * len(profile), 3.0), dpi=120)
  for i, entry in enumerate(profile):
    ax = figure.add_subplot(1, len(profile), i + 1)
    t = range(1, len(entry["gate_at"]) + 1)
    ax.plot(t, entry["gate_at"], label="gate openness G", color="tab:red")
    ax.plot(t, entry["focus_at"], label="focus F", color="tab:blue")
    ax.axvline(entry["k"], color="gray", linestyle=":")
    ax.set_title(f"P = {entry['k']}: acc {100 * entry['accuracy']:.1f}, "
                 f"G {100 * entry['openness']:.1f} %", fontsize=8)
    ax.set_xlabel("position t")
    ax.set_ylim(0, 1.02)
  figure.axes[0].legend(fontsize=7)
  figure.tight_layout()
  by_position = os.path.join(root, "gates_by_position.png")
  FigureCanvasAgg(figure).print_png(by_position)
  digits = [int(d) for d in sequence["digits"]]
  opened = sequence["gate_at"]                   # how often each gate opened (1 / 0: threshold)
  figure = Figure(figsize=(max(6.0, len(digits) / 20), 2.6), dpi=120)
  ax = figure.add_subplot(1, 1, 1)
  ax.scatter(range(1, len(digits) + 1), digits, s=8, c=opened, cmap="Reds", vmin=0, vmax=1,
             edgecolors="lightgray", linewidths=0.3)
  ax.axvline(sequence["k"], color="gray", linestyle=":")
  ax.set_yticks(range(10))
  ax.set_xlabel("position t (red: how often the gate opened)")
  ax.set_ylabel("digit")
  ax.set_title(f"k = {sequence['k']}, answer {sequence['target']}, right in "
               f"{100 * sequence['correct']:.0f} % of the samples; {sum(opened):.1f} of "
               f"{len(digits)} gates open", fontsize=9)
  figure.tight_layout()
  gates = os.path.join(root, "open_gates.png")
  FigureCanvasAgg(figure).print_png(gates)
  return [by_position, gates]
