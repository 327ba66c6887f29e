"""The driver's side of the subprocess protocol: command lines and
environments of the workers and the peer, one JSON line back from each, and
the pooling of a program's runs. Never imports JAX."""
from __future__ import annotations

import functools
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time

from stepbench.configs import FLOAT32_MATMUL, PEER_ON_DEVICE, REPO

ENTRY = os.path.join(REPO, "benchmarks", "pretrain_step.py")


@functools.cache
def tuning():
  """glomo_jax/tuning.py loaded on its own (importing the glomo_jax package
  would import JAX)."""
  spec = importlib.util.spec_from_file_location(
      "glomo_jax_tuning", os.path.join(REPO, "glomo_jax", "tuning.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def worker_environment(cpu_tuning: bool, env: dict | None = None) -> dict:
  """The environment of a glomo_jax worker: a copy of `env` (default
  os.environ) with GLOMO_JAX_CPU_TUNING=1 and the glibc heap settings
  (`tuning.tuned_environment`, read by glibc at start) when `cpu_tuning`,
  else with neither."""
  t = tuning()
  env = dict(os.environ if env is None else env)
  if cpu_tuning:
    env[t.ENV_VAR] = "1"
    return t.tuned_environment(env)
  env.pop(t.ENV_VAR, None)
  rest = env.get("GLIBC_TUNABLES", "").replace(t.MALLOC_TUNABLES, "")
  rest = ":".join(part for part in rest.split(":") if part)
  if rest:
    env["GLIBC_TUNABLES"] = rest
  else:
    env.pop("GLIBC_TUNABLES", None)
  return env


def worker_argv(args, job: str, **over) -> list[str]:
  """Command line of a glomo_jax worker subprocess (the flags `job` reads)."""
  values = dict(config=args.config, bsz=args.bsz, bptt=args.bptt,
                sample_positions=args.sample_positions, dtype=args.dtype,
                loss_chunk_size=args.loss_chunk_size, seed=args.seed,
                float32_matmul=args.float32_matmul, kernels=args.kernels)
  values.update({
      "step": dict(steps=args.steps, warmup=args.warmup, cpu_tuning=args.cpu_tuning,
                   sync_every=args.sync_every),
      "kernel_ratio": dict(steps=args.steps, warmup=args.warmup, cpu_tuning=args.cpu_tuning,
                           sync_every=args.sync_every),
      "peak": dict(peak_sizes=args.peak_sizes, peak_repeats=args.peak_repeats,
                   peak_inner=args.peak_inner),
      "pipeline": dict(wiki_dir=args.wiki_dir, pipeline_docs=args.pipeline_docs,
                       pipeline_batches=args.pipeline_batches,
                       pipeline_vocab=args.pipeline_vocab,
                       pipeline_tokenizer_chars=args.pipeline_tokenizer_chars),
      "loss_curve": dict(loss_curve=args.loss_curve, loss_curve_pool=args.loss_curve_pool,
                         cpu_tuning=args.cpu_tuning),
      "position_ratio": dict(steps=args.steps, warmup=args.warmup,
                             cpu_tuning=args.cpu_tuning),
  }[job])
  values.update(over)
  argv = [sys.executable, ENTRY, "--worker", job]
  for key, value in values.items():
    if value is not None:
      argv += [f"--{key}", str(value)]
  return argv


def baseline_argv(args) -> list[str]:
  """Command line of the step worker of the checkout at --baseline_repo (its
  own code: its script puts its repository first on sys.path)."""
  values = dict(config=args.config, bsz=args.bsz, bptt=args.bptt,
                sample_positions=args.sample_positions, dtype=args.dtype,
                loss_chunk_size=args.loss_chunk_size, seed=args.seed,
                float32_matmul=args.float32_matmul, steps=args.steps, warmup=args.warmup)
  argv = [sys.executable, os.path.join(os.path.abspath(args.baseline_repo), "benchmarks",
                                       "pretrain_step.py"), "--worker", "step"]
  for key, value in values.items():
    if value is not None:
      argv += [f"--{key}", str(value)]
  return argv + args.baseline_args.split()


def peer_argv(args, **over) -> list[str]:
  """Command line of a peer run with the same config."""
  values = dict(config=args.config, bsz=args.bsz, bptt=args.bptt,
                sample_len=args.sample_positions, dtype=args.dtype, steps=args.steps,
                warmup=args.warmup)
  values.update(over)
  argv = [args.peer_python, os.path.abspath(args.peer)]
  if args.peer_device != "cpu":
    tf32 = FLOAT32_MATMUL[args.float32_matmul or "highest"][1]
    argv = [args.peer_python, PEER_ON_DEVICE, "--peer", os.path.abspath(args.peer),
            "--device", args.peer_device, "--tf32", str(tf32)]
  for key, value in values.items():
    argv += [f"--{key}", str(value)]
  return argv + args.peer_args.split()


def parse_json_line(text: str) -> dict | None:
  """The last line of `text` that parses as a JSON object, or None."""
  for line in reversed(text.strip().splitlines()):
    line = line.strip()
    if line.startswith("{") and line.endswith("}"):
      try:
        return json.loads(line)
      except json.JSONDecodeError:
        continue
  return None


def run_json(argv: list[str], label: str, timeout: float | None, env=None) -> dict:
  """Runs one subprocess and returns its JSON line (or an error record)."""
  print(f"[{time.strftime('%H:%M:%S')}] {label}: {' '.join(argv[1:])}", flush=True)
  t0 = time.perf_counter()
  try:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=REPO)
  except subprocess.TimeoutExpired:
    return {"error": f"timed out after {timeout} s", "label": label}
  rec = parse_json_line(proc.stdout)
  if proc.returncode != 0 or rec is None:
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
    print("\n".join("    " + line for line in tail), flush=True)
    return {"error": f"exit {proc.returncode}", "stderr_tail": tail, "label": label}
  rec["wall_s"] = round(time.perf_counter() - t0, 2)
  return rec


def run_glomo(args, job: str, label: str, cpu_tuning: int | None = None, **over) -> dict:
  """Runs a glomo_jax worker for `job` with the CPU tuning on or off
  (default: --cpu_tuning)."""
  cpu_tuning = args.cpu_tuning if cpu_tuning is None else cpu_tuning
  return run_json(worker_argv(args, job, cpu_tuning=cpu_tuning, **over), label, args.timeout,
                  worker_environment(bool(cpu_tuning)))


def device_peak_mb(rec: dict) -> float | None:
  """Peak accelerator memory of a run, MiB: JAX's peak_bytes_in_use or the
  peer's torch.cuda.max_memory_allocated; None on the CPU."""
  if rec.get("device_peak_mb") is not None:
    return rec["device_peak_mb"]
  return (rec.get("device_memory") or {}).get("peak_bytes_in_use")


def pooled(records: list[dict], bsz: int, bptt: int) -> dict:
  """Median over all timed steps of all runs of one program."""
  good = [r for r in records if "error" not in r]
  if not good:
    return {"runs": 0, "errors": [r.get("error") for r in records]}
  steps = [t for r in good for t in r["step_s"]]
  med = statistics.median(steps)
  return {"runs": len(good), "median_step_s": med, "tokens_per_s": bsz * bptt / med,
          "run_medians": [round(r["median_step_s"], 4) for r in good],
          "peak_rss_mb": max(r["peak_rss_mb"] for r in good),
          "first_step_s": statistics.median(r["first_step_s"] for r in good),
          "device_peak_mb": max((device_peak_mb(r) for r in good), default=None,
                                key=lambda x: -1 if x is None else x),
          "errors": len(records) - len(good)}
