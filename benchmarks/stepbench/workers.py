"""The jobs a fresh worker subprocess runs (``pretrain_step.py --worker JOB``).

Each job takes the parsed command line and returns one JSON-able record,
which `run` prints as the process's last line. JAX is imported inside the
jobs, after `run` has applied the CPU tuning's process settings.
"""
from __future__ import annotations

import json
import resource
import statistics
import time

from stepbench import hlo
from stepbench.configs import CLIP, CONFIGS, LR, MOMENTUM, model_config
from stepbench.flops import model_flops
from stepbench.machine import current_rss_mb, device_memory, jax_info, rss_mb
from stepbench.pipeline_worker import worker_pipeline
from stepbench.step import (compiled_step, init_state, objective, set_float32_matmul,
                            timed_block, timed_step)


def worker_step(args) -> dict:
  """Compiles and times train_step: compile, init, per-step times, memory,
  page faults, CPU time, FLOPs and what the HLO holds."""
  import jax
  import numpy as np

  from glomo_jax import tuning
  from glomo_jax.ops.chunked_cross_entropy import balanced_chunk
  mc = model_config(args)
  phases = {}
  state, compiled, init_s, compile_s = compiled_step(args, mc, phases)
  rss_after_compile = rss_mb()
  n_params = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(state.params))
  tuning.release_free_memory()  # set-up done, as the training loop
  one_step = timed_step(args, mc, compiled)

  times, losses = [], []
  first_s = None
  block = max(1, args.sync_every)     # steps per loss fetch; a time per block
  warm_blocks = -(-args.warmup // block)
  for i in range(warm_blocks + -(-args.steps // block)):
    if i == warm_blocks:
      ru0, c0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    state, dt, loss = timed_block(one_step, state, block)
    if i == 0:
      first_s = dt
    if i >= warm_blocks:
      times.append(dt)
      losses.append(loss)
  ru1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - c0
  steps = max(len(times), 1)
  med = statistics.median(times)
  flops = model_flops(mc, args.bsz, args.bptt)
  xla = hlo.cost_analysis(compiled)
  n = mc.sample_positions or args.bptt - mc.context_length
  loss_rows = 2 * args.bsz * n * mc.context_length  # both directions' decoder outputs
  loss_chunks = -(-loss_rows // balanced_chunk(loss_rows, mc.loss_chunk_size))
  hlo_text = compiled.as_text()
  return {
      "impl": "glomo_jax",
      "config_name": args.config,
      "config": {"d": mc.dim, "ntokens": mc.vocab_size, "bsz": args.bsz, "bptt": args.bptt,
                 "dec_len": mc.context_length, "nlayers": mc.num_graph_layers,
                 "nlayers_key": mc.key_layers, "nlayers_query": mc.query_layers,
                 "sample_len": mc.sample_positions, "heads": mc.num_heads,
                 "head_dim": mc.head_dim, "kernel_size": mc.kernel_size,
                 "dec_layers": mc.decoder_layers, "dtype": mc.dtype,
                 "loss_chunk_size": mc.loss_chunk_size, "lr": LR, "momentum": MOMENTUM,
                 "clip": CLIP},
      "median_step_s": med,
      "tokens_per_s": args.bsz * args.bptt / med,
      "step_s": [round(t, 4) for t in times],
      "init_s": round(init_s, 3),
      "compile_s": round(compile_s, 3),
      "first_step_s": round(compile_s + first_s, 3),
      "first_exec_s": round(first_s, 3),
      "steps": args.steps,
      "warmup": args.warmup,
      "sync_every": block,
      "kernels": mc.kernels,
      "peak_rss_mb": round(rss_mb(), 1),
      "rss_after_compile_mb": round(rss_after_compile, 1),
      "rss_phases_mb": phases,
      "rss_end_mb": round(current_rss_mb(), 1),
      "minflt_per_step": round((ru1.ru_minflt - ru0.ru_minflt) / steps, 1),
      "user_s_per_step": round((ru1.ru_utime - ru0.ru_utime) / steps, 4),
      "sys_s_per_step": round((ru1.ru_stime - ru0.ru_stime) / steps, 4),
      "cpu_util": round((ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime)
                        / max(wall, 1e-9), 2),
      "cpu_tuning": tuning.enabled(),
      "malloc_tuned": tuning.malloc_tuned(),
      "split_batch_scores": tuning.split_batch_scores(jax.devices()),
      "device_memory": device_memory(),
      "xla_memory": hlo.memory_analysis(compiled),
      "n_params": n_params,
      "loss_first_last": [losses[0], losses[-1]] if losses else None,
      "model_flops": flops["train"],
      "model_flops_every_row": model_flops(mc, args.bsz, args.bptt, every_row=True)["train"],
      "model_flops_forward": flops["forward"],
      "xla_cost": xla,
      "flops_ratio_xla_over_model": (xla["flops"] / flops["train"]) if "flops" in xla else None,
      "loss_rows": loss_rows,
      "loss_chunks": loss_chunks,
      "achieved_flops_per_s": flops["train"] / med,
      "hlo_vocab_arrays": hlo.vocab_arrays(hlo_text, mc.vocab_size, mc.dim),
      "hlo_convolutions": hlo.convolutions(hlo_text),
      **jax_info(),
  }


def worker_peak(args) -> dict:
  """Matmul peak in the run's compute dtype: a jitted jnp.dot of square
  matrices, repeated (bfloat16: bfloat16 operands, float32 accumulation and
  output, as the model's GEMMs). Each timed repeat dispatches
  ``--peak_inner`` products back to back and waits for the last (more than
  1 on a GPU, where one product is short)."""
  import jax
  import jax.numpy as jnp
  sizes = [int(s) for s in args.peak_sizes.split(",") if s.strip()]
  dtype = jnp.dtype(args.dtype)
  dot = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32))
  out = {"impl": "matmul_peak", "dtype": args.dtype, "sizes": {}}
  for n in sizes:
    ka, kb = jax.random.split(jax.random.PRNGKey(n))
    a = jax.random.normal(ka, (n, n), jnp.float32).astype(dtype)
    b = jax.random.normal(kb, (n, n), jnp.float32).astype(dtype)
    dot(a, b).block_until_ready()  # compile + warm
    rates = []
    for _ in range(args.peak_repeats):
      t0 = time.perf_counter()
      for _ in range(args.peak_inner):
        c = dot(a, b)
      c.block_until_ready()
      rates.append(2 * n**3 * args.peak_inner / (time.perf_counter() - t0))
    out["sizes"][str(n)] = {"best_gflops": max(rates) / 1e9,
                            "median_gflops": statistics.median(rates) / 1e9}
  out["peak_flops_per_s"] = max((v["best_gflops"] for v in out["sizes"].values()),
                                default=0.0) * 1e9
  out.update(jax_info())
  return out


def worker_loss_curve(args) -> dict:
  """K steps in float32 and bfloat16 from one init on one batch stream."""
  import functools

  import jax
  import jax.numpy as jnp
  import numpy as np

  from glomo_jax.train.step import train_step
  k = args.loss_curve
  host = np.random.default_rng(args.seed + 1)
  base = model_config(args)
  pool = args.loss_curve_pool or k
  drawn = [host.integers(0, base.vocab_size, (args.bsz, args.bptt), dtype=np.int32)
           for _ in range(min(pool, k))]
  batches = [drawn[i % len(drawn)] for i in range(k)]
  curves, timing, grad_norms = {}, {}, {}
  for dtype in ("float32", "bfloat16"):
    task, tx = objective(args, base.replace(dtype=dtype))
    state = init_state(task, tx, args.seed)
    step = jax.jit(functools.partial(train_step, task, tx), donate_argnums=(0,))
    losses, norms, times = [], [], []
    for tokens in batches:
      t0 = time.perf_counter()
      state, metrics = step(state, {"tokens": jnp.asarray(tokens)})
      losses.append(float(metrics["loss"]))
      times.append(time.perf_counter() - t0)
      norms.append(float(metrics["grad_norm"]))
    curves[dtype], grad_norms[dtype] = losses, norms
    timing[dtype] = statistics.median(times[1:]) if len(times) > 1 else times[0]
  f32, bf16 = np.array(curves["float32"]), np.array(curves["bfloat16"])
  rel = np.abs(bf16 - f32) / np.maximum(np.abs(f32), 1e-12)
  g32, g16 = np.array(grad_norms["float32"]), np.array(grad_norms["bfloat16"])
  grel = np.abs(g16 - g32) / np.maximum(np.abs(g32), 1e-12)
  return {"impl": "glomo_jax", "job": "loss_curve", "config_name": args.config,
          "bsz": args.bsz, "bptt": args.bptt, "steps": k, "pool": len(drawn),
          "log_vocab": float(np.log(base.vocab_size)), "losses": curves,
          "grad_norms": grad_norms, "rel_diff": [float(x) for x in rel],
          "max_rel_diff": float(rel.max()), "rel_diff_first": float(rel[0]),
          "rel_diff_last": float(rel[-1]), "max_abs_diff": float(np.abs(bf16 - f32).max()),
          "grad_norm_max_rel_diff": float(grel.max()), "median_step_s": timing,
          **jax_info()}


def worker_position_ratio(args) -> dict:
  """The every-position step against the sampled one, alternated in one
  process on the same batches."""
  import jax
  import numpy as np
  sampled = args.sample_positions or CONFIGS[args.config]["sample_len"]
  variants = {"sampled": sampled, "every": 0}
  steps, states, flops = {}, {}, {}
  for name, positions in variants.items():
    mc = model_config(args).replace(sample_positions=positions)
    states[name], steps[name], _, _ = compiled_step(args, mc)
    flops[name] = model_flops(mc, args.bsz, args.bptt)["train"]
  host = np.random.default_rng(args.seed + 1)
  times = {name: [] for name in variants}
  for i in range(args.warmup + args.steps):
    tokens = host.integers(0, CONFIGS[args.config]["ntokens"], (args.bsz, args.bptt),
                           dtype=np.int32)
    for name in variants:
      t0 = time.perf_counter()
      states[name], metrics = steps[name](states[name], {"tokens": jax.device_put(tokens)})
      float(metrics["loss"])
      if i >= args.warmup:
        times[name].append(time.perf_counter() - t0)
  ratios = [e / s for e, s in zip(times["every"], times["sampled"])]
  return {"impl": "glomo_jax", "job": "position_ratio", "config_name": args.config,
          "bsz": args.bsz, "bptt": args.bptt, "sampled_positions": sampled,
          "steps": args.steps, "warmup": args.warmup,
          "step_s": {k: [round(t, 4) for t in v] for k, v in times.items()},
          "median_step_s": {k: statistics.median(v) for k, v in times.items()},
          "min_step_s": {k: min(v) for k, v in times.items()},
          "paired_ratio_median": statistics.median(ratios),
          "ratio_of_medians": statistics.median(times["every"])
                              / statistics.median(times["sampled"]),
          "model_flops": flops, "flops_ratio": flops["every"] / flops["sampled"],
          **jax_info()}


def worker_kernel_ratio(args) -> dict:
  """The step with the --kernels kernels against the reference ops, both
  compiled in one process and alternated in blocks of --sync_every steps
  (the loss fetched after each block) on the same batches."""
  if args.kernels == "reference":
    raise SystemExit("--kernel_ratio compares --kernels (not 'reference') with the reference")
  variants = ("reference", args.kernels)
  states, steps, memory, compile_s = {}, {}, {}, {}
  for name in variants:
    mc = model_config(args).replace(kernels=name)
    states[name], compiled, _, compile_s[name] = compiled_step(args, mc)
    steps[name] = timed_step(args, mc, compiled)   # the same seed: the same batches
    memory[name] = hlo.memory_analysis(compiled)
  block = max(1, args.sync_every)
  times, losses = {name: [] for name in variants}, {}
  for i in range(-(-args.warmup // block) + -(-args.steps // block)):
    for name in variants:
      states[name], dt, losses[name] = timed_block(steps[name], states[name], block)
      if i >= -(-args.warmup // block):
        times[name].append(dt)
  ref, fused = (times[name] for name in variants)
  flops = model_flops(model_config(args), args.bsz, args.bptt)["train"]
  return {"impl": "glomo_jax", "job": "kernel_ratio", "config_name": args.config,
          "bsz": args.bsz, "bptt": args.bptt, "dtype": args.dtype, "kernels": args.kernels,
          "steps": args.steps, "warmup": args.warmup, "sync_every": block,
          "step_s": {k: [round(t, 5) for t in v] for k, v in times.items()},
          "median_step_s": {k: statistics.median(v) for k, v in times.items()},
          "paired_ratio_median": statistics.median(f / r for f, r in zip(fused, ref)),
          "model_flops": flops,
          "achieved_flops_per_s": {k: flops / statistics.median(v) for k, v in times.items()},
          "last_loss": losses,
          "last_loss_rel_diff": abs(losses[variants[1]] - losses["reference"])
                                / max(abs(losses["reference"]), 1e-12),
          "compile_s": compile_s, "xla_memory": memory, "device_memory": device_memory(),
          **jax_info()}


WORKERS = {"kernel_ratio": worker_kernel_ratio, "step": worker_step, "peak": worker_peak, "pipeline": worker_pipeline,
           "loss_curve": worker_loss_curve, "position_ratio": worker_position_ratio}


def run(args) -> None:
  """A worker process's main: the CPU tuning's process settings (when
  GLOMO_JAX_CPU_TUNING=1, as the entry points), --float32_matmul, then the
  job; prints its record as one JSON line."""
  from glomo_jax import tuning
  tuning.start_process()
  set_float32_matmul(args)
  print(json.dumps(WORKERS[args.worker](args)), flush=True)
