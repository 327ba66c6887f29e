"""The modes of pretrain_step.py that compare programs of glomo_jax itself:
the step with the fused Pallas kernels against the reference ops (one
process), and the step under several XLA_FLAGS settings (alternating
processes), e.g. XLA command buffers (CUDA graphs) on and off."""
from __future__ import annotations

import os
import statistics

from stepbench.configs import check_peer_configs
from stepbench.driver import (peer_argv, pooled, run_glomo, run_json, worker_argv,
                              worker_environment)
from stepbench.modes import get_peak
from stepbench.report import Results, fmt, md_header, pooled_table


def _share(rate, peak):
  if rate is None or not peak:
    return "—"
  return f"{rate / 1e12:.1f} TFLOP/s, {100 * rate / peak['peak_flops_per_s']:.1f} %"


def kernel_ratio(args) -> None:
  """Per round: one process with the --kernels step and the reference step
  alternated on the same batches (then the peer, with --peer); the matmul
  peak once, in the same run."""
  results = Results(args, "kernel_ratio")
  if args.peer:
    check_peer_configs(args.peer)
  recs, peer_recs = [], []
  for r in range(1, args.rounds + 1):
    rec = run_glomo(args, "kernel_ratio", f"round {r} glomo_jax {args.kernels} vs reference")
    results.add({**rec, "round": r})
    recs.append(rec)
    if args.peer:
      prec = {**run_json(peer_argv(args), f"round {r} peer", args.timeout), "round": r}
      results.add(prec)
      peer_recs.append(prec)
  peak = get_peak(args, results)
  md = md_header(args, f"glomo_jax step: kernels {args.kernels} against the reference ops")
  md += ["| round | variant | median step (ms) | tokens/s | model FLOP/s, share of the "
         "matmul peak | XLA temp (MiB) | compile (s) |", "|" + " --- |" * 7]
  good = [rec for rec in recs if "error" not in rec]
  for r, rec in enumerate(recs, 1):
    if "error" in rec:
      md.append(f"| {r} | failed: {rec['error']} | | | | | |")
      continue
    for name, med in rec["median_step_s"].items():
      temp = (rec["xla_memory"].get(name) or {}).get("temp_size_mb")
      md.append(f"| {r} | {name} | {1e3 * med:.2f} | {args.bsz * args.bptt / med:,.0f} "
                f"| {_share(rec['achieved_flops_per_s'][name], peak)} "
                f"| {fmt(temp, '.0f')} | {rec['compile_s'][name]:.1f} |")
  summary = {"impl": "summary", "kernels": args.kernels}
  if good:
    pairs = [f / s for rec in good for f, s in zip(rec["step_s"][args.kernels],
                                                   rec["step_s"]["reference"])]
    summary["paired_ratio_median"] = statistics.median(pairs)
    md += ["", f"median of all {len(pairs)} paired step ratios {args.kernels} ÷ reference: "
           f"**{summary['paired_ratio_median']:.3f}**; last losses' relative difference "
           f"{max(rec['last_loss_rel_diff'] for rec in good):.2e}; device "
           f"{good[0].get('device_kind')}, jax {good[0].get('jax')}."]
  if peer_recs:
    peer = pooled(peer_recs, args.bsz, args.bptt)
    if peer["runs"] and good:
      for name in ("reference", args.kernels):
        med = statistics.median(t for rec in good for t in rec["step_s"][name])
        summary[f"ratio_tokens_per_s_{name}_over_peer"] = peer["median_step_s"] / med
        md.append(f"- {name}: tokens/s ÷ peer's **{peer['median_step_s'] / med:.2f}×**")
      md += [""] + pooled_table([("peer", peer)])
  results.add(summary)
  results.report(md)


def flags_ratio(args) -> None:
  """glomo_jax step processes under each XLA_FLAGS setting of
  --xla_flag_sets ('|'-separated; '' is the environment's own), alternating
  for --rounds rounds."""
  results = Results(args, "flags_ratio")
  sets = args.xla_flag_sets.split("|")
  base = os.environ.get("XLA_FLAGS", "")
  recs = {s: [] for s in sets}
  for r in range(1, args.rounds + 1):
    for flags in sets:
      env = worker_environment(bool(args.cpu_tuning))
      env["XLA_FLAGS"] = f"{base} {flags}".strip()
      rec = run_json(worker_argv(args, "step"), f"round {r} XLA_FLAGS '{flags}'",
                     args.timeout, env)
      results.add({**rec, "round": r, "xla_flag_set": flags})
      recs[flags].append(rec)
  md = md_header(args, "glomo_jax step under several XLA_FLAGS settings")
  pools = [(f"`{s}`" if s else "(the environment's)", pooled(recs[s], args.bsz, args.bptt))
           for s in sets]
  md += pooled_table(pools)
  first = pools[0][1]
  for name, p in pools[1:]:
    if p["runs"] and first["runs"]:
      md.append(f"- {name}: median step ÷ {pools[0][0]}'s "
                f"**{p['median_step_s'] / first['median_step_s']:.3f}**")
  results.add({"impl": "summary", "sets": sets, "pooled": dict(zip(sets, (p for _, p in pools)))})
  results.report(md)
