"""The accelerator pipeline's report (`experiments.accelerator_pipeline`):
pretraining progress and held-out loss by chunk, the analysis stage's
tables and the transfer grids, in OUT/report.md beside OUT/graphs.png."""
from __future__ import annotations

import json
import os
import shutil


def _num(value) -> str:
  return "–" if value is None else f"{value:.4f}"


def report(pipeline, out: str) -> str:
  """Writes OUT/report.md (and copies graphs.png) of a
  `experiments.accelerator_pipeline.Pipeline`; returns the report."""
  os.makedirs(out, exist_ok=True)
  state = pipeline.state
  lines = ["# Accelerator pipeline", "", f"Stages done: {', '.join(state['done']) or 'none'}; "
           f"pretraining wall time {state['pretrain_seconds'] / 60:.1f} min.", ""]
  tokens = None
  config_path = os.path.join(pipeline.pretrain_dir, "config.json")
  if os.path.exists(config_path):
    with open(config_path, encoding="utf-8") as f:
      config = json.load(f)
    tokens = config["batch_size"] * config["bptt"]
    lines += [f"Pretraining: batch {config['batch_size']} × {config['bptt']} tokens, "
              f"model d {config['model']['dim']}, {config['model']['dtype']} compute.", ""]
  if state["pretrain_chunks"]:
    lines += ["| chunk | wall (s) | step | window tokens | train loss | last held-out loss "
              "| dead heads fw / bw | empty rows fw / bw |", "|---|---|---|---|---|---|---|---|"]
    for i, c in enumerate(state["pretrain_chunks"]):
      ev = c.get("eval") or {}
      dead = [sum(v for k, v in ev.items() if k.startswith(f"dead_heads_{d}"))
              for d in ("fw", "bw")]
      empty = [[v for k, v in ev.items() if k.startswith(f"empty_rows_{d}")] for d in ("fw", "bw")]
      empty = [sum(e) / len(e) if e else float("nan") for e in empty]
      lines.append(f"| {i} | {c['wall_s']} | {c['step']} | "
                   f"{c['step'] * tokens if tokens else 0:,} | {_num(c.get('train_loss'))} | "
                   f"{_num(ev.get('loss'))} | {dead[0]:g} / {dead[1]:g} | "
                   f"{empty[0]:.3f} / {empty[1]:.3f} |")
    lines += ["", "Last progress lines:", "", "```"] + state["pretrain_chunks"][-1].get(
        "progress", []) + ["```", ""]
  analysis = os.path.join(pipeline.workdir, "analysis")
  for name in ("graph_stats", "syntax_alignment", "subject_arcs", "lm_agreement"):
    path = os.path.join(analysis, f"{name}.md")
    if os.path.exists(path):
      with open(path, encoding="utf-8") as f:
        lines += [f"## {name}", "", f.read().strip(), ""]
  for task in ("imdb", "mnli"):
    path = os.path.join(pipeline.workdir, "grid", task, "table.md")
    if os.path.exists(path):
      with open(path, encoding="utf-8") as f:
        lines += [f"## {task}", "", f.read().strip(), ""]
  text = "\n".join(lines)
  with open(os.path.join(out, "report.md"), "w", encoding="utf-8") as f:
    f.write(text + "\n")
  png = os.path.join(analysis, "graphs.png")
  if os.path.exists(png):
    shutil.copy(png, os.path.join(out, "graphs.png"))
  return text
