#!/usr/bin/env python3
"""Prints the XLA_FLAGS setting that gpu_run.sh's stage xlaflags found best.

  pick_xla_flags.py RESULTS_ROOT FLAGS_0 FLAGS_1 ...

Reads RESULTS_ROOT/xlaflags<i>/pretrain_step.jsonl (one glomo_jax step record
per setting) and prints the setting with the shortest compile among those
whose median step is within 10% of the fastest; prints nothing when no run
succeeded. A line per setting goes to stderr.
"""
import json
import sys


def main(root: str, settings: list[str]) -> None:
  runs = []
  for i, flags in enumerate(settings):
    try:
      with open(f"{root}/xlaflags{i}/pretrain_step.jsonl") as f:
        rec = json.loads(f.readline())
      runs.append((rec["compile_s"], rec["median_step_s"], flags))
    except (OSError, KeyError, ValueError):
      print(f"no result for XLA_FLAGS='{flags}'", file=sys.stderr)
  for compile_s, step_s, flags in runs:
    print(f"compile {compile_s:.1f} s, step {step_s:.4f} s: XLA_FLAGS='{flags}'",
          file=sys.stderr)
  if runs:
    best_step = min(r[1] for r in runs)
    print(min(r for r in runs if r[1] <= 1.1 * best_step)[2])


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2:])
