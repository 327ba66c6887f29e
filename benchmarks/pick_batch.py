#!/usr/bin/env python3
"""Prints the largest batch expected to fit, from a kernel_ratio run at a
smaller batch (gpu_run.sh stage `maxbatch`).

  pick_batch.py RESULTS_DIR [FRACTION] [MULTIPLE] [CAP]

Reads the last `kernel_ratio` record of RESULTS_DIR/pretrain_step.jsonl: per
variant, XLA's memory of the compiled step (arguments = the state, which
does not grow with the batch; temporaries and outputs, which grow about
linearly with it) and the device's bytes_limit. Prints the largest multiple
of MULTIPLE (default 32), at most CAP (default 1024), whose larger
variant's estimate stays within FRACTION (default 0.8) of the limit;
nothing when the record lacks the numbers. The estimate is linear: the
stage runs the batch it prints, and halves it if that fails.
"""
import json
import sys


def main(path: str, fraction: float = 0.8, multiple: int = 32, cap: int = 1024) -> None:
  rec = None
  with open(f"{path}/pretrain_step.jsonl") as f:
    for line in f:
      r = json.loads(line)
      if r.get("job") == "kernel_ratio" and "error" not in r:
        rec = r
  if rec is None or not (rec.get("device_memory") or {}).get("bytes_limit"):
    print("no kernel_ratio record with device memory", file=sys.stderr)
    return
  limit = rec["device_memory"]["bytes_limit"] * fraction         # MiB
  best = cap
  for name, mem in rec["xla_memory"].items():
    if not mem:
      return
    fixed = mem.get("argument_size_mb", 0.0)
    growing = mem.get("temp_size_mb", 0.0) + mem.get("output_size_mb", 0.0) - mem.get(
        "alias_size_mb", 0.0)
    per_row = max(growing, 1e-6) / rec["bsz"]
    fits = int((limit - fixed) / per_row)
    print(f"{name}: state {fixed:.0f} MiB + {per_row:.2f} MiB a batch row; "
          f"{fits} rows in {limit:.0f} MiB", file=sys.stderr)
    best = min(best, fits)
  print(max(multiple, best // multiple * multiple))


if __name__ == "__main__":
  main(sys.argv[1], *(float(a) if i == 0 else int(a) for i, a in enumerate(sys.argv[2:])))
