"""What the driver writes: JSON lines and markdown under the results
directory, the step summary, the tables of pooled runs and the sweep plot."""
from __future__ import annotations

import datetime
import json
import os
import sys

from stepbench.machine import machine_info

JSONL = "pretrain_step.jsonl"


def fmt(x, spec=".3f", missing="—"):
  return missing if x is None else format(x, spec)


class Results:
  """JSON lines (appended to <results_dir>/pretrain_step.jsonl) and
  markdown (<mode>_<config>_<time>.md) under the results directory."""

  def __init__(self, args, mode: str):
    self.dir = args.results_dir
    os.makedirs(self.dir, exist_ok=True)
    self.run_id = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    self.mode = mode
    self.stem = f"{mode}_{args.config}_{self.run_id}"
    self.common = {"run_id": self.run_id, "mode": mode, "argv": sys.argv[1:],
                   "machine": machine_info()}

  def add(self, rec: dict) -> None:
    with open(os.path.join(self.dir, JSONL), "a") as f:
      f.write(json.dumps({**self.common, **rec}) + "\n")

  def markdown(self, lines: list[str]) -> str:
    path = os.path.join(self.dir, self.stem + ".md")
    with open(path, "w") as f:
      f.write("\n".join(lines) + "\n")
    return path

  def report(self, lines: list[str]) -> None:
    """Writes the markdown report and prints it with its path."""
    path = self.markdown(lines)
    print("\n".join(lines))
    print(f"\nwrote {path}")


def md_header(args, title: str) -> list[str]:
  """The report's title and a line each for the run's settings and machine."""
  m = machine_info()
  bsz = "swept" if args.sweep == "B" else args.bsz
  bptt = "swept" if args.sweep == "T" else args.bptt
  tuned = "on and off, alternating" if args.tuning_ratio else args.cpu_tuning
  return [f"# {title}", "",
          f"- config `{args.config}`: bsz {bsz}, bptt {bptt}, sample_positions "
          f"{args.sample_positions}, dtype {args.dtype}, loss_chunk_size "
          f"{args.loss_chunk_size or 'default'}, kernels {args.kernels}, loss fetched every "
          f"{args.sync_every} step(s); {args.steps} timed steps after "
          f"{args.warmup} warm-up; {args.rounds} round(s); glomo_jax cpu_tuning {tuned}",
          f"- machine: {m['cpu']}, {m['cores']} cores (affinity {m['affinity']}), load "
          f"average at the start {m['loadavg']}; command `{' '.join(sys.argv)}`", ""]


def pooled_table(programs: list[tuple[str, dict]]) -> list[str]:
  """Markdown rows of `driver.pooled` summaries, one per (name, summary)."""
  lines = ["| program | runs | median step (s) | tokens/s | run medians (s) | first step (s) "
           "| peak RSS (MiB) | peak device memory (MiB) |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
  for name, p in programs:
    if p["runs"]:
      lines.append(f"| {name} | {p['runs']} | {p['median_step_s']:.4f} "
                   f"| {p['tokens_per_s']:.1f} | {p['run_medians']} | {p['first_step_s']:.2f} "
                   f"| {p['peak_rss_mb']:.0f} | {fmt(p['device_peak_mb'], '.0f')} |")
    else:
      lines.append(f"| {name} | 0 (failed: {p['errors']}) | | | | | | |")
  return lines


def step_summary(rec: dict, peak: dict | None) -> list[str]:
  """Human-readable lines for one glomo_jax step record."""
  if "error" in rec:
    return [f"glomo_jax run failed: {rec['error']}"]
  lines = [
      f"backend {rec['backend']} ({rec['device_kind']}), jax {rec['jax']}, "
      f"{rec['n_params']:,} parameters; {rec['hlo_convolutions']} convolution ops in the HLO; "
      f"CPU tuning {rec.get('cpu_tuning')} (glibc heap settings {rec['malloc_tuned']}, "
      f"split-batch scores {rec.get('split_batch_scores')})",
      f"compile {rec['compile_s']:.2f} s (lower+compile), first step {rec['first_step_s']:.2f} s, "
      f"init {rec['init_s']:.2f} s",
      f"median step {rec['median_step_s']:.4f} s over {rec['steps']} steps "
      f"(after {rec['warmup']} warm-up): {rec['tokens_per_s']:.1f} tokens/s",
      f"peak RSS {rec['peak_rss_mb']:.0f} MiB (after compile {rec['rss_after_compile_mb']:.0f}, "
      f"at the end {rec['rss_end_mb']:.0f}); XLA buffers {rec['xla_memory']}",
      "resident set by phase (MiB): " + ", ".join(
          f"{k.replace('_', ' ')} {v:.0f}" for k, v in rec.get("rss_phases_mb", {}).items()),
      f"per step: {rec['minflt_per_step']:.0f} minor page faults, user "
      f"{rec['user_s_per_step']:.3f} s, sys {rec['sys_s_per_step']:.3f} s "
      f"(CPU utilisation {rec['cpu_util']:.2f} cores)",
  ]
  if rec.get("device_memory"):
    lines.append(f"device memory: {rec['device_memory']}")
  xla = rec["xla_cost"].get("flops")
  note = ""
  if rec.get("loss_chunks", 1) > 1:
    note = (f" (the tied softmax runs as a scan of {rec['loss_chunks']} chunks; XLA's cost "
            "analysis counts a loop body once, so it undercounts the output layer)")
  lines.append(f"model FLOPs/step {rec['model_flops'] / 1e9:.2f} G; XLA cost_analysis "
               f"{fmt(xla and xla / 1e9, '.2f')} G; ratio XLA/model "
               f"{fmt(rec['flops_ratio_xla_over_model'], '.3f')}{note}")
  fw = rec["model_flops_forward"]
  total = sum(fw.values())
  lines.append("forward FLOPs by part: " + ", ".join(
      f"{k} {100 * v / total:.1f}%" for k, v in sorted(fw.items(), key=lambda kv: -kv[1])))
  frac = ""
  if peak and peak.get("peak_flops_per_s"):
    frac = f" = {100 * rec['achieved_flops_per_s'] / peak['peak_flops_per_s']:.1f}% of the " \
           f"{peak.get('dtype', 'float32')} matmul peak {peak['peak_flops_per_s'] / 1e9:.1f} GFLOP/s"
  lines.append(f"achieved {rec['achieved_flops_per_s'] / 1e9:.2f} GFLOP/s{frac}")
  mat = rec["hlo_vocab_arrays"]["materialised"]
  inside = rec["hlo_vocab_arrays"]["inside_fusions"]
  lines.append(f"HLO arrays with a V={rec['config']['ntokens']} dimension: materialised "
               f"{mat or 'none'}; inside fusions {inside or 'none'}")
  return lines


def plot_sweep(table, values, key, label, path, title) -> None:
  """Median step and peak RSS against the swept value, log-log, one line per
  program, saved as a PNG at `path`."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 2, figsize=(10, 4))
  for p, rows in table.items():
    xs = [v for v in values if rows[v]["runs"]]
    axes[0].plot(xs, [rows[v]["median_step_s"] for v in xs], "o-", label=p)
    axes[1].plot(xs, [rows[v]["peak_rss_mb"] / 1024 for v in xs], "o-", label=p)
  for ax, ylabel in zip(axes, ("median step (s)", "peak RSS (GiB)")):
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(values)
    ax.set_xticklabels([str(v) for v in values])
    ax.set_xlabel(label)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
  fig.suptitle(f"GLoMo training step vs {label} ({title})")
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
