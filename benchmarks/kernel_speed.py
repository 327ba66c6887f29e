#!/usr/bin/env python3
"""Each fused Pallas kernel against the reference op it replaces, at the
paper's shapes, in one process on one accelerator.

Cases (value and gradient, as the training step runs them):

* ``loss``: the tied softmax cross-entropy of the decoder outputs, N = 2 ·
  bsz · 20 · 3 rows, V 100k, d 512: `tied_softmax_cross_entropy` (chunks of
  512 rows) against `fused_tied_softmax_cross_entropy` at each block setting
  of ``--loss_blocks`` (rows x vocab; the first is the kernel's default).
* ``graph_all``: one graph layer at every row (T = 200): `normalize_graph`
  (squared ReLU) then `mix_heads` against `fused_graph_mix`; K 8 heads of
  H 256, slices of 64.
* ``graph_top``: the top layer at 20 sampled rows.

For each case both programs are compiled, warmed, then timed alternately
(``--repeats`` pairs, each call waited for): the median of each, the median
of the paired ratios fused ÷ reference, the model FLOP/s (the reference's
FLOPs over each time) as a share of the matmul peak measured in the same
process, XLA's temporary memory of each executable, and the largest
difference between the two programs' outputs (the kernels as lowered on
this device against the reference; the JSON record has it per output: the
value, then each gradient). ``--shapes tiny`` runs the same code at
toy sizes in Pallas interpret mode (a CPU smoke run; its times mean
nothing).

  python benchmarks/kernel_speed.py --dtype bfloat16 --results_dir OUT
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

SHAPES = {
    "paper": dict(bsz=32, T=200, positions=20, D=3, V=100_000, d=512, K=8, H=256),
    "tiny": dict(bsz=2, T=24, positions=4, D=3, V=300, d=16, K=2, H=8),
}


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--shapes", choices=sorted(SHAPES), default="paper")
  p.add_argument("--bsz", type=int, default=None, help="batch (default: the shapes')")
  p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
  p.add_argument("--cases", default="loss,graph_all,graph_top")
  p.add_argument("--loss_blocks", default="64x64,32x128,128x32,64x128",
                 help="fused loss block settings, rows x vocab (tiny: 8x16)")
  p.add_argument("--repeats", type=int, default=20)
  p.add_argument("--warmup", type=int, default=3)
  p.add_argument("--peak_size", type=int, default=8192, help="0: no matmul peak")
  p.add_argument("--results_dir", default=os.path.join(HERE, "results"))
  return p.parse_args(argv)


def timed(fn, args):
  import jax
  t0 = time.perf_counter()
  jax.block_until_ready(fn(*args))
  return time.perf_counter() - t0


def matmul_peak(n: int, dtype) -> float:
  """Best FLOP/s of 10 back-to-back n³ products (float32 accumulation)."""
  import jax
  import jax.numpy as jnp
  if not n:
    return 0.0
  dot = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32))
  a = jnp.ones((n, n), dtype)
  dot(a, a).block_until_ready()
  best = 0.0
  for _ in range(5):
    t0 = time.perf_counter()
    for _ in range(10):
      c = dot(a, a)
    c.block_until_ready()
    best = max(best, 20 * n ** 3 / (time.perf_counter() - t0))
  return best


def loss_case(s, dtype, blocks: str):
  """(FLOPs, {name: (jitted fn, args)}) of the loss case."""
  import jax
  import jax.numpy as jnp

  from glomo_jax.ops.chunked_cross_entropy import tied_softmax_cross_entropy
  from glomo_jax.ops.pallas.tied_softmax import fused_tied_softmax_cross_entropy
  n = 2 * s["bsz"] * s["positions"] * s["D"]
  k = jax.random.split(jax.random.PRNGKey(0), 3)
  hidden = jax.random.normal(k[0], (n, s["d"]), jnp.float32).astype(dtype)
  table = (0.1 * jax.random.normal(k[1], (s["V"], s["d"]), jnp.float32)).astype(dtype)
  targets = jax.random.randint(k[2], (n,), 0, s["V"])
  weights = jnp.full((n,), 1.0 / n, jnp.float32)

  def program(op, **kw):
    return jax.jit(jax.value_and_grad(
        lambda h, t: op(h, t, targets, weights, 512, **kw)[0], argnums=(0, 1)))
  progs = {"reference": (program(tied_softmax_cross_entropy), (hidden, table))}
  for setting in blocks.split(","):
    rows, vocab = (int(x) for x in setting.split("x"))
    progs[f"fused {setting}"] = (program(fused_tied_softmax_cross_entropy, block_rows=rows,
                                         block_vocab=vocab), (hidden, table))
  return 3 * 2 * n * s["V"] * s["d"], progs


def graph_case(s, dtype, top: bool):
  import jax
  import jax.numpy as jnp

  from glomo_jax.models.feature_predictor import mix_heads
  from glomo_jax.ops.pallas.graph_mix import fused_graph_mix
  from glomo_jax.ops.sparse_graph import allowed_sources, normalize_graph
  b, t, heads, h, d = s["bsz"], s["T"], s["K"], s["H"], s["d"]
  rows = (jax.random.randint(jax.random.PRNGKey(5), (s["positions"],), 0, t - s["D"])
          if top else None)
  r = t if rows is None else s["positions"]
  k = jax.random.split(jax.random.PRNGKey(1), 5)
  q = (jax.random.normal(k[0], (b, heads, r, h)) / h ** 0.25).astype(dtype)
  keys = (jax.random.normal(k[1], (b, heads, t, h)) / h ** 0.25).astype(dtype)
  theta = 0.2 * jax.random.normal(k[2], (b, heads, r))
  values = jax.random.normal(k[3], (b, t, d)).astype(dtype)
  mask = jnp.ones((b, t), bool)

  def reference(q, keys, theta, values):
    scores = jnp.einsum("bkjh,bkih->bkji", q, keys, preferred_element_type=jnp.float32)
    allowed = allowed_sources(t, mask, rows)[:, 0][:, None]
    return mix_heads(normalize_graph(scores, theta[..., None], allowed), values)

  def fused(q, keys, theta, values):
    return fused_graph_mix(q, keys, theta, values, rows, mask)

  def program(fn):
    def value_and_grads(*a):
      out, pullback = jax.vjp(fn, *a)
      return (out,) + pullback(jnp.ones_like(out))
    return jax.jit(value_and_grads)
  args = (q, keys, theta, values)
  flops = 6 * b * heads * r * t * (h + d // heads)
  return flops, {"reference": (program(reference), args), "fused": (program(fused), args)}


def run_case(name, flops, progs, args, peak) -> dict:
  import jax
  import numpy as np
  out, compiled = {"case": name, "model_flops": flops}, {}
  for prog, (fn, a) in progs.items():
    t0 = time.perf_counter()
    try:
      lowered = fn.lower(*a).compile()
    except Exception as e:  # a kernel this device's compiler rejects: note it, time the rest
      if prog == "reference":
        raise
      out.setdefault("errors", {})[prog] = f"{type(e).__name__}: {str(e)[:400]}"
      print(f"{name} {prog}: {out['errors'][prog]}", flush=True)
      continue
    compiled[prog] = (lowered, a)
    mem = lowered.memory_analysis()
    out.setdefault("compile_s", {})[prog] = round(time.perf_counter() - t0, 2)
    out.setdefault("xla_temp_mib", {})[prog] = (
        None if mem is None else round(mem.temp_size_in_bytes / 2 ** 20, 1))
  want = jax.device_get(compiled["reference"][0](*compiled["reference"][1]))
  for prog, (fn, a) in list(compiled.items()):
    try:
      got = jax.device_get(fn(*a))
    except Exception as e:  # compiled but failed to run: note it, time the rest
      out.setdefault("errors", {})[prog] = f"{type(e).__name__}: {str(e)[:400]}"
      del compiled[prog]
      continue
    diffs = [float(np.max(np.abs(np.asarray(x, np.float32) - np.asarray(y, np.float32))))
             / max(float(np.max(np.abs(np.asarray(y, np.float32)))), 1e-30)
             for x, y in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want))]
    out.setdefault("max_rel_diff_to_reference", {})[prog] = max(diffs)
    out.setdefault("rel_diff_per_output", {})[prog] = diffs   # value, then each gradient
  times = {prog: [] for prog in compiled}
  for i in range(args.warmup + args.repeats):
    for prog, (fn, a) in compiled.items():
      dt = timed(fn, a)
      if i >= args.warmup:
        times[prog].append(dt)
  out["median_s"] = {p: statistics.median(v) for p, v in times.items()}
  out["paired_ratio_over_reference"] = {
      p: statistics.median(x / y for x, y in zip(v, times["reference"]))
      for p, v in times.items() if p != "reference"}
  out["flops_per_s"] = {p: flops / m for p, m in out["median_s"].items()}
  out["share_of_peak"] = {p: (f / peak if peak else None) for p, f in out["flops_per_s"].items()}
  return out


def main(argv=None) -> None:
  args = parse_args(argv)
  import jax
  import jax.numpy as jnp
  s = dict(SHAPES[args.shapes])
  if args.bsz:
    s["bsz"] = args.bsz
  dtype = jnp.dtype(args.dtype)
  blocks = "8x16,16x32" if args.shapes == "tiny" else args.loss_blocks
  peak = matmul_peak(0 if args.shapes == "tiny" else args.peak_size, dtype)
  records = []
  for case in args.cases.split(","):
    print(f"[{time.strftime('%H:%M:%S')}] {case}", flush=True)
    if case == "loss":
      flops, progs = loss_case(s, dtype, blocks)
    elif case in ("graph_all", "graph_top"):
      flops, progs = graph_case(s, dtype, case == "graph_top")
    else:
      raise SystemExit(f"unknown case {case!r}")
    try:
      records.append(run_case(case, flops, progs, args, peak))
    except Exception as e:  # one case failing on a device leaves the others' figures
      records.append({"case": case, "errors": {"reference": f"{type(e).__name__}: {str(e)[:400]}"}})
    if case == "loss":   # the program a training run gets (the kernel's GPU blocks)
      from glomo_jax.ops.pallas.tied_softmax import DEFAULT_BLOCKS
      records[-1]["default_program"] = "fused {}x{}".format(*DEFAULT_BLOCKS["gpu"])
    print(json.dumps(records[-1]), flush=True)
  dev = jax.devices()[0]
  lines = [f"# Fused kernels against the reference ops ({args.shapes} shapes, {args.dtype})", "",
           f"- device {getattr(dev, 'device_kind', dev)}, jax {jax.__version__}; matmul peak "
           f"{peak / 1e12:.1f} TFLOP/s ({args.peak_size}³, same process); shapes {s}; "
           f"{args.repeats} alternating pairs after {args.warmup}", "",
           "| case | program | median (ms) | ÷ reference (paired) | model TFLOP/s | share of "
           "peak | XLA temp (MiB) | compile (s) | max rel. diff |", "|" + " --- |" * 9]
  for rec in records:
    for prog, err in rec.get("errors", {}).items():
      lines.append(f"| {rec['case']} | {prog} | failed: {err.splitlines()[0][:160]} |"
                   + " |" * 6)
    for prog, med in rec.get("median_s", {}).items():
      share = rec["share_of_peak"][prog]
      lines.append(
          f"| {rec['case']} | {prog} | {1e3 * med:.3f} "
          f"| {rec['paired_ratio_over_reference'].get(prog, 1.0):.3f} "
          f"| {rec['flops_per_s'][prog] / 1e12:.2f} | "
          + ("—" if share is None else f"{100 * share:.1f} %")
          + f" | {rec['xla_temp_mib'][prog]} | {rec['compile_s'][prog]} "
          f"| {rec['max_rel_diff_to_reference'][prog]:.1e} |")
  os.makedirs(args.results_dir, exist_ok=True)
  stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
  with open(os.path.join(args.results_dir, "kernel_speed.jsonl"), "a") as f:
    for rec in records:
      f.write(json.dumps({"run": stamp, "shapes": s, "dtype": args.dtype, "peak": peak,
                          "device": str(getattr(dev, "device_kind", dev)), **rec}) + "\n")
  path = os.path.join(args.results_dir, f"kernel_speed_{args.shapes}_{stamp}.md")
  with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")
  print("\n".join(lines) + f"\n\nwrote {path}")


if __name__ == "__main__":
  main()
