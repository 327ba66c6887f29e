#!/usr/bin/env python3
"""Prints the `ModelConfig.kernels` value measured fastest on this device,
from gpu_run.sh's stages `kernels` and `fused32` (the choice for a training
run on the same device right after them).

  pick_kernels.py RESULTS_DIR [MARGIN]

RESULTS_DIR/fused32/pretrain_step.jsonl's summary gives the whole step with
every fused kernel against the reference step (paired median ratio);
RESULTS_DIR/kernel_speed.jsonl gives each kernel alone against its
reference op (the loss kernel at the blocks a training run gets, the
record's "default_program").
The choice:

* 'fused' when the whole fused step is faster by more than MARGIN (default
  0.03, within the run-to-run noise of a step otherwise);
* else, when exactly one kernel alone is faster by more than MARGIN, that
  kernel alone ('fused_loss' or 'fused_graph'; the step with it alone was
  not timed);
* else 'reference' (also when a record is missing or a kernel failed).

The reasons go to stderr.
"""
import json
import os
import sys


def _records(path):
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def choose(results_dir: str, margin: float = 0.03) -> tuple[str, list[str]]:
  """(kernels value, reasons)."""
  why = []
  steps = [r for r in _records(os.path.join(results_dir, "fused32", "pretrain_step.jsonl"))
           if r.get("impl") == "summary" and r.get("kernels") == "fused"
           and "paired_ratio_median" in r]
  if steps:
    ratio = steps[-1]["paired_ratio_median"]
    why.append(f"whole step fused ÷ reference {ratio:.3f}")
    if ratio < 1 - margin:
      return "fused", why
  faster = []
  latest = {r.get("case"): r for r in _records(os.path.join(results_dir, "kernel_speed.jsonl"))}
  for rec in latest.values():
    ratios = rec.get("paired_ratio_over_reference") or {}
    if rec.get("case") == "loss":
      ratio, kernel = ratios.get(rec.get("default_program", "fused 64x64")), "fused_loss"
    elif rec.get("case") == "graph_all":
      ratio, kernel = ratios.get("fused"), "fused_graph"
    else:
      continue
    if ratio is None:
      why.append(f"{kernel}: no timing ({rec.get('errors')})")
      continue
    why.append(f"{kernel} alone ÷ its reference {ratio:.3f}")
    if ratio < 1 - margin:
      faster.append(kernel)
  if len(faster) == 1:
    return faster[0], why
  return "reference", why


def main(argv):
  if len(argv) not in (2, 3):
    raise SystemExit(__doc__)
  kernels, why = choose(argv[1], *(float(a) for a in argv[2:]))
  print("; ".join(why) or "no kernel records", file=sys.stderr)
  print(kernels)


if __name__ == "__main__":
  main(sys.argv)
