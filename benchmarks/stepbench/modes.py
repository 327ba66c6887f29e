"""The modes of pretrain_step.py: which workers (and peer runs) each one
starts, in what order, and what it reports."""
from __future__ import annotations

import os
import statistics

from stepbench.configs import SWEEP_DEFAULTS, check_peer_configs
from stepbench.driver import (baseline_argv, peer_argv, pooled, run_glomo, run_json,
                              worker_argv, worker_environment)
from stepbench.report import (JSONL, Results, fmt, md_header, plot_sweep, pooled_table,
                              step_summary)


def get_peak(args, results: Results) -> dict | None:
  """The matmul peak worker's record (None when skipped or failed)."""
  if not args.peak_sizes.strip():
    return None
  peak = run_json(worker_argv(args, "peak"), "matmul peak", args.timeout)
  results.add(peak)
  if "error" not in peak:
    print(f"{peak['dtype']} matmul: " + ", ".join(
        f"{n}: best {v['best_gflops']:.1f} / median {v['median_gflops']:.1f} GFLOP/s"
        for n, v in peak["sizes"].items()), flush=True)
    return peak
  return None


def _print_run(name: str, rec: dict) -> None:
  if "error" not in rec:
    print(f"    {name}: median {rec['median_step_s']:.4f} s, {rec['tokens_per_s']:.1f} "
          f"tokens/s, peak RSS {rec['peak_rss_mb']:.0f} MiB", flush=True)


def step(args) -> None:
  """glomo_jax alone, or alternating with the peer and / or a baseline
  checkout (A B C A B C ...)."""
  results = Results(args, "peer" if args.peer else "step")
  if args.peer:
    check_peer_configs(args.peer)
  recs = {"glomo_jax": [], "baseline": [], "peer": []}
  for r in range(1, args.rounds + 1):
    rec = {**run_glomo(args, "step", f"round {r} glomo_jax"), "round": r}
    results.add(rec)
    recs["glomo_jax"].append(rec)
    _print_run("glomo_jax", rec)
    if args.baseline_repo:
      brec = {**run_json(baseline_argv(args), f"round {r} baseline", args.timeout,
                         worker_environment(bool(args.cpu_tuning))),
              "round": r, "variant": "baseline", "baseline_repo": args.baseline_repo}
      results.add(brec)
      recs["baseline"].append(brec)
      _print_run("baseline", brec)
    if args.peer:
      prec = {**run_json(peer_argv(args), f"round {r} peer", args.timeout), "round": r}
      results.add(prec)
      recs["peer"].append(prec)
      _print_run("peer", prec)
  peak = get_peak(args, results)
  md = md_header(args, "glomo_jax pretraining step" + (" vs the PyTorch peer" if args.peer else ""))
  good = [r for r in recs["glomo_jax"] if "error" not in r]
  if good:
    best = min(good, key=lambda r: r["median_step_s"])
    md += ["## glomo_jax (the run with the lowest median)", ""]
    md += ["- " + line for line in step_summary(best, peak)] + [""]
  if args.baseline_repo:
    a = pooled(recs["glomo_jax"], args.bsz, args.bptt)
    c = pooled(recs["baseline"], args.bsz, args.bptt)
    md += ["## glomo_jax against the baseline checkout (median over all timed steps)", ""]
    md += pooled_table([("glomo_jax", a), (f"baseline {args.baseline_repo}", c)])
    if a["runs"] and c["runs"]:
      ratio = a["tokens_per_s"] / c["tokens_per_s"]
      md += ["", f"**tokens/s glomo_jax ÷ baseline: {ratio:.3f}**", ""]
      results.add({"impl": "summary", "glomo_jax": a, "baseline": c,
                   "ratio_tokens_per_s_over_baseline": ratio})
  if args.peer:
    a = pooled(recs["glomo_jax"], args.bsz, args.bptt)
    b = pooled(recs["peer"], args.bsz, args.bptt)
    md += ["## Alternating runs (median over all timed steps of all runs)", ""]
    md += pooled_table([("glomo_jax", a), ("peer", b)])
    if recs["baseline"]:
      c = pooled(recs["baseline"], args.bsz, args.bptt)
      if c["runs"] and b["runs"]:
        md += ["", f"tokens/s baseline ÷ peer: {c['tokens_per_s'] / b['tokens_per_s']:.3f}"]
    if a["runs"] and b["runs"]:
      ratio = a["tokens_per_s"] / b["tokens_per_s"]
      md += ["", f"**tokens/s glomo_jax ÷ peer: {ratio:.3f}**"]
      peer0 = next(r for r in recs["peer"] if "error" not in r)
      md += ["", f"peer: torch {peer0.get('torch')}, device {peer0.get('device', 'cpu')} "
             f"{peer0.get('device_name', '')}, tf32 {peer0.get('tf32', False)}, "
             f"{peer0.get('threads')} threads, fast "
             f"{peer0.get('fast')}, conv {peer0.get('conv')}, malloc tuned "
             f"{peer0.get('malloc_tuned')}; glomo_jax CPU tuning {bool(args.cpu_tuning)}, "
             f"float32 matmul {args.float32_matmul or 'the framework default'}."]
      results.add({"impl": "summary", "glomo_jax": a, "peer": b, "ratio_tokens_per_s": ratio})
  path = results.markdown(md)
  print("\n".join(md))
  print(f"\nwrote {path} and {os.path.join(results.dir, JSONL)}")


def tuning_ratio(args) -> None:
  """The default (untuned) path against the tuned one: glomo_jax workers
  with GLOMO_JAX_CPU_TUNING=1 and without, alternating (A B A B ...)."""
  results = Results(args, "tuning_ratio")
  recs = {"tuned": [], "untuned": []}
  for r in range(1, args.rounds + 1):
    for name, on in (("tuned", 1), ("untuned", 0)):
      rec = {**run_glomo(args, "step", f"round {r} glomo_jax {name}", cpu_tuning=on),
             "round": r, "variant": name}
      results.add(rec)
      recs[name].append(rec)
      _print_run(name, rec)
  tuned, untuned = (pooled(recs[k], args.bsz, args.bptt) for k in ("tuned", "untuned"))
  md = md_header(args, "glomo_jax step with and without the CPU tuning")
  md += pooled_table([("tuned (GLOMO_JAX_CPU_TUNING=1)", tuned), ("untuned (default)", untuned)])
  summary = {"impl": "summary", "tuned": tuned, "untuned": untuned}
  if tuned["runs"] and untuned["runs"]:
    summary["ratio_step_untuned_over_tuned"] = untuned["median_step_s"] / tuned["median_step_s"]
    md += ["", f"**median step untuned ÷ tuned: "
           f"{summary['ratio_step_untuned_over_tuned']:.3f}**"]
  results.add(summary)
  results.report(md)


def sweep(args) -> None:
  """Step time and peak RSS against T or B, glomo_jax and (with --peer) the peer."""
  results = Results(args, f"sweep{args.sweep}")
  if args.peer:
    check_peer_configs(args.peer)
  values = [int(v) for v in (args.sweep_values or SWEEP_DEFAULTS[args.sweep]).split(",")]
  key = "bptt" if args.sweep == "T" else "bsz"
  programs = ["glomo_jax"] + (["peer"] if args.peer else [])
  table = {p: {} for p in programs}
  for v in values:
    runs = {p: [] for p in programs}
    for r in range(1, args.rounds + 1):
      rec = run_glomo(args, "step", f"{key}={v} round {r} glomo_jax", **{key: v})
      results.add({**rec, "sweep": key, "value": v})
      runs["glomo_jax"].append(rec)
      if args.peer:
        prec = run_json(peer_argv(args, **{key: v}), f"{key}={v} round {r} peer", args.timeout)
        results.add({**prec, "sweep": key, "value": v})
        runs["peer"].append(prec)
    bsz = v if key == "bsz" else args.bsz
    bptt = v if key == "bptt" else args.bptt
    for p in programs:
      table[p][v] = pooled(runs[p], bsz, bptt)
      print(f"    {key}={v} {p}: {table[p][v]}", flush=True)
  label = "window length T" if key == "bptt" else "batch size B"
  md = md_header(args, f"Scaling with {label}")
  head = "| " + key + " | " + " | ".join(
      f"{p} step (s) | {p} tokens/s | {p} peak RSS (MiB)" for p in programs)
  if args.peer:
    head += " | tokens/s ratio"
  md += [head + " |", "|" + " --- |" * (1 + 3 * len(programs) + bool(args.peer))]
  for v in values:
    cells = [str(v)]
    for p in programs:
      s = table[p][v]
      cells += ([f"{s['median_step_s']:.4f}", f"{s['tokens_per_s']:.1f}",
                 f"{s['peak_rss_mb']:.0f}"] if s["runs"] else ["failed", "", ""])
    if args.peer:
      a, b = table["glomo_jax"][v], table["peer"][v]
      cells.append(f"{a['tokens_per_s'] / b['tokens_per_s']:.3f}"
                   if a["runs"] and b["runs"] else "")
    md.append("| " + " | ".join(cells) + " |")
  png = os.path.join(results.dir, results.stem + ".png")
  try:
    plot_sweep(table, values, key, label, png, f"{args.config}, {args.dtype}")
    md += ["", f"![sweep]({os.path.basename(png)})"]
  except Exception as e:  # noqa: BLE001 - the table is still useful
    print(f"plot failed: {e!r}")
  results.add({"impl": "summary", "sweep": key, "values": values,
               "table": {p: {str(v): s for v, s in t.items()} for p, t in table.items()}})
  results.report(md)


def pipeline(args) -> None:
  """Input pipeline throughput next to what a training step consumes."""
  results = Results(args, "pipeline")
  pipe = run_json(worker_argv(args, "pipeline"), "input pipeline (one core)", args.timeout)
  results.add(pipe)
  step_rec = run_glomo(args, "step", "glomo_jax step")
  results.add(step_rec)
  md = md_header(args, "glomo_jax input pipeline (one core) vs training step")
  consume = step_rec.get("tokens_per_s")
  md.append(f"A training step consumes {fmt(consume, '.1f')} tokens/s "
            f"(bsz {args.bsz} × bptt {args.bptt} / median step "
            f"{fmt(step_rec.get('median_step_s'), '.4f')} s).")
  md += ["", "| corpus | documents | tokens | tokenizer training (s) | read + tokenize "
         "tokens/s (one-time) | batch tokens/s (steady) | batch + device_put tokens/s "
         "| batches ÷ step need |", "|" + " --- |" * 8]
  for name, c in pipe.get("corpora", {}).items():
    if "skipped" in c:
      md.append(f"| {name} | skipped: {c['skipped']} | | | | | | |")
      continue
    ratio = c["batch_tokens_per_s"] / consume if consume else None
    md.append(f"| {name} | {c['documents']} | {c['tokens']:,} | {c['tokenizer_train_s']:.2f} "
              f"| {c['read_tokenize_tokens_per_s']:,.0f} | {c['batch_tokens_per_s']:,.0f} "
              f"| {c['batch_plus_device_put_tokens_per_s']:,.0f} | {fmt(ratio, ',.0f')}× |")
  wiki = pipe.get("corpora", {}).get("wiki_text", {})
  if "read_s" in wiki:
    md += ["", f"wiki_text split: read (xz + JSON) {wiki['read_chars_per_s'] / 1e6:.1f} M "
           f"chars/s; SentencePiece encode {wiki['tokenize_tokens_per_s']:,.0f} tokens/s "
           f"(1 thread); tokenizer trained on {wiki['tokenizer_sample_chars']:,} chars, "
           f"vocabulary {wiki['tokenizer_vocab']}."]
  if "error" in pipe:
    md += ["", f"pipeline worker failed: {pipe['error']}"]
  results.report(md)


def loss_curve(args) -> None:
  """float32 and bfloat16 loss curves from one init on the same batches."""
  results = Results(args, "loss_curve")
  rec = run_glomo(args, "loss_curve", f"loss curve ({args.loss_curve} steps)")
  results.add(rec)
  md = md_header(args, "float32 vs bfloat16 loss curves (same init, same batches)")
  if "error" in rec:
    md.append(f"failed: {rec['error']}")
  else:
    md += ["| step | float32 loss | bfloat16 loss | rel. diff | grad norm f32 | grad norm bf16 |",
           "| --- | --- | --- | --- | --- | --- |"]
    for i, (a, b, r) in enumerate(zip(rec["losses"]["float32"], rec["losses"]["bfloat16"],
                                      rec["rel_diff"])):
      md.append(f"| {i + 1} | {a:.5f} | {b:.5f} | {r:.2e} | {rec['grad_norms']['float32'][i]:.4f}"
                f" | {rec['grad_norms']['bfloat16'][i]:.4f} |")
    stream = ("a new random batch every step" if rec["pool"] >= rec["steps"]
              else f"a cycle of {rec['pool']} random batches")
    md += ["", f"batches: {stream}; "
           f"ln V = {rec['log_vocab']:.4f} (the loss of a uniform prediction).", "",
           f"max relative difference {rec['max_rel_diff']:.3e} (first step "
           f"{rec['rel_diff_first']:.3e}, last {rec['rel_diff_last']:.3e}; max absolute "
           f"{rec['max_abs_diff']:.3e}); gradient norms (before clipping) differ by up to "
           f"{100 * rec['grad_norm_max_rel_diff']:.2f}%; median step "
           f"float32 {rec['median_step_s']['float32']:.4f} s, bfloat16 "
           f"{rec['median_step_s']['bfloat16']:.4f} s ({rec['backend']})."]
  results.report(md)


def position_ratio(args) -> None:
  """Every position against the sampled step, paired in one process per round."""
  results = Results(args, "position_ratio")
  md = md_header(args, "every position vs sampled step (paired in one process)")
  md += ["| round | sampled step (s) | every-position step (s) | median of paired ratios "
         "| ratio of medians | fastest steps' ratio |", "| --- | --- | --- | --- | --- | --- |"]
  recs = []
  for r in range(1, args.rounds + 1):
    rec = run_glomo(args, "position_ratio", f"position ratio, round {r}")
    results.add({**rec, "round": r})
    if "error" in rec:
      md.append(f"| {r} | failed: {rec['error']} | | | | |")
      continue
    recs.append(rec)
    med, fast = rec["median_step_s"], rec["min_step_s"]
    md.append(f"| {r} | {med['sampled']:.3f} | {med['every']:.3f} "
              f"| {rec['paired_ratio_median']:.3f} | {rec['ratio_of_medians']:.3f} "
              f"| {fast['every'] / fast['sampled']:.3f} |")
  if recs:
    pooled_ratio = statistics.median(
        e / s for rec in recs
        for e, s in zip(rec["step_s"]["every"], rec["step_s"]["sampled"]))
    md += ["", f"median of all {sum(r['steps'] for r in recs)} paired ratios: "
           f"**{pooled_ratio:.3f}** (target ≤ 2); FLOP ratio (`model_flops`) "
           f"{recs[0]['flops_ratio']:.3f}; sampled = {recs[0]['sampled_positions']} "
           f"positions, B {recs[0]['bsz']}, T {recs[0]['bptt']} ({recs[0]['backend']})."]
  results.report(md)
