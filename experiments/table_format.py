"""The tables of `experiments.predictor_table`, from its rows' records
(record.json: one per row and seed). No flags, so tests import it."""
from __future__ import annotations

import statistics

from experiments.grid import mean_std


def losses_comparable(model, base_model) -> bool:
  """Whether a row's held-out loss measures what the base config's does: the
  same objective over the same context length."""
  return (model.objective == base_model.objective
          and model.context_length == base_model.context_length)


def _fmt(values: list, digits: int = 3) -> str:
  """One cell: the value, or mean ± std over seeds; '–' without values."""
  values = [v for v in values if v is not None]
  if not values:
    return "–"
  if len(values) == 1:
    return f"{values[0]:.{digits}f}"
  return f"{statistics.fmean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def _pair(records, a: str, b: str, digits: int = 3) -> str:
  return f"{_fmt([r.get(a) for r in records], digits)} / {_fmt([r.get(b) for r in records], digits)}"


def _syntax(records, which: str) -> str:
  cells = [r["syntax"][which] for r in records if r.get("syntax")]
  if not cells:
    return "–"
  return (f"{_fmt([c['head'] for c in cells])} / {_fmt([c['uuas'] for c in cells])}"
          + (f" ({cells[0]['name']})" if which == "best_head" and len(cells) == 1 else ""))


def _arcs(records, which: str) -> str:
  cells = [r["arcs"][which] for r in records if which in r.get("arcs", {})]
  if not cells:
    return "–"
  return f"{_fmt([c['best'] for c in cells])} / {_fmt([c['top1'] for c in cells])}"


def arc_table(groups: dict[str, list[dict]]) -> str:
  """On the built-in corpus: the weight the predicting row of each planted
  arc's target puts on its source (`glomo_jax.eval.arcs`), best head."""
  rows = {name: rs for name, rs in groups.items() if any(r.get("arcs") for r in rs)}
  if not rows:
    return ""
  lines = ["| row | planted arcs: best head's weight / top-1 | untrained | chance |",
           "|---|---|---|---|"]
  for name, records in rows.items():
    chance = _fmt([r["arcs"]["final"]["chance"] for r in records if "final" in r["arcs"]])
    lines.append(f"| {name} | {_arcs(records, 'final')} | {_arcs(records, 'untrained')} | "
                 f"{chance} |")
  return "\n".join(lines) + (
      "\n\nThe row before each planted arc's target (whose features predict the "
      "target) and the weight it puts on the arc's source, in the best layer and head; "
      "top-1: the share of those rows whose largest weight is on the source. Chance: a "
      "uniform row's weight.\n")


def quality_table(groups: dict[str, list[dict]]) -> str:
  """The main table: one line per row (mean ± std over its seeds)."""
  lines = ["| row | seeds | held-out loss | dead heads: running / batch stats | "
           "empty rows: running / batch stats | previous / next unit (uniform) | "
           "mean distance (uniform) | UD all heads: head / UUAS | UD best head: head / UUAS | "
           "UD untrained: head / UUAS | steps/s | tokens |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for name, records in groups.items():
    heads = records[0]["heads"]
    loss = _fmt([r["heldout_loss"] for r in records])
    if not records[0]["comparable"]:
      loss = f"({loss}, not comparable)"
    dead = f"{_pair(records, 'dead_heads', 'dead_heads_batch_stats', 1)} of {heads}"
    near = (f"{_pair(records, 'near_fw', 'near_bw')} "
            f"({_pair(records, 'near_uniform_fw', 'near_uniform_bw')})")
    distance = f"{_fmt([r['distance'] for r in records], 2)} " \
               f"({_fmt([r['distance_uniform'] for r in records], 2)})"
    cells = [name, ",".join(str(r["seed"]) for r in records), loss, dead,
             _pair(records, "empty_rows", "empty_rows_batch_stats"), near, distance,
             _syntax(records, "mean"), _syntax(records, "best_head"),
             _syntax(records, "untrained_mean"),
             _fmt([r["steps_per_s"] for r in records], 2),
             f"{records[0]['tokens_seen'] / 1e6:.1f}M"]
    lines.append("| " + " | ".join(cells) + " |")
  with_syntax = [r for rs in groups.values() for r in rs if r.get("syntax")]
  note = ""
  if with_syntax:
    s = with_syntax[0]["syntax"]
    o = s["best_offset"]
    note = (f"\nUD: {s['sentences']} sentences; best fixed offset ({o['name']}): head "
            f"{o['head']:.3f}, UUAS {o['uuas']:.3f}; best head picked on {s['picked_on']}.")
  return "\n".join(lines) + (
      "\n\nHeld-out loss: nats per predicted token. Dead heads: of all layers and "
      "directions, on the held-out windows, with BatchNorm's running statistics and "
      "with the batch's. Previous / next unit: mean weight of the forward layers on "
      "the previous unit and of the backward layers on the next one, beside a uniform "
      "graph's over the same rows; mean distance in units, all layers. Steps/s: the "
      "run's wall time in the loop, evaluations included." + note + "\n")


def health_table(groups: dict[str, list[dict]]) -> str:
  """Dead heads (running / batch statistics) at every evaluation, seed by seed."""
  records = [r for rs in groups.values() for r in rs]
  steps = sorted({h["step"] for r in records for h in r.get("health_by_step", [])})
  lines = ["| row | seed | " + " | ".join(f"step {s}" for s in steps) + " |",
           "|---|---|" + "---|" * len(steps)]
  for r in records:
    if r["graph_source"] != "predicted":
      continue
    at = {h["step"]: h for h in r.get("health_by_step", [])}

    def cell(s):
      if s not in at or at[s]["dead_heads"] is None:
        return "–"
      batch = at[s]["batch_stats"]["dead_heads"]
      return f"{at[s]['dead_heads']:.0f} / {'–' if batch is None else f'{batch:.0f}'}"
    lines.append(f"| {r['row']} | {r['seed']} | " + " | ".join(cell(s) for s in steps) + " |")
  return "\n".join(lines) + ("\n\nDead heads (of all directions and layers) with running / "
                             "batch statistics, at each held-out evaluation.\n")


def transfer_table(transfer: dict[str, list[float]]) -> str:
  lines = ["| row | transfer accuracy (%) |", "|---|---|"]
  lines += [f"| {name} | {mean_std(values)} |" for name, values in transfer.items()]
  return "\n".join(lines) + "\n\nValidation accuracy, mean ± sample std over seeds.\n"
