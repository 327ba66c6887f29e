#!/usr/bin/env python3
"""Pretraining-step benchmark of glomo_jax, optionally against the PyTorch peer.

Times full training steps of glomo_jax (`glomo_jax.train.step.train_step`,
jitted with the state donated: forward, backward, global-norm clip 0.25, SGD
lr 8 momentum 0.2) at the peer's named configs (`small`, `paper`; the same d,
V, bsz, bptt, layers, heads, samples as ``CONFIGS`` in
``shared/peers/glomo_torch_reference.py``). Each step draws a random
``[bsz, bptt]`` token batch on the host, transfers it and blocks on the loss,
as the peer does.

Modes (every measurement runs in a fresh subprocess of this script, called
with ``--worker JOB``, which prints one JSON line):

* default: ``--rounds`` runs of glomo_jax, then this machine's float32 matmul
  peak; prints compile time, median step, tokens/s, peak RSS (and device
  memory on GPU), model FLOPs (`model_flops`) against XLA's
  ``cost_analysis()`` and achieved FLOP/s as a share of the matmul peak.
* ``--peer PATH``: glomo_jax and the peer alternate (A B A B …) for
  ``--rounds`` rounds with the same config; a table of median step, tokens/s,
  peak RSS and the ratio of tokens/s.
* ``--sweep T`` / ``--sweep B``: step time and peak RSS against window length
  (100, 200, 400, 800) or batch size at a fixed model, glomo_jax and (with
  ``--peer``) the peer; a markdown table and a PNG plot.
* ``--pipeline``: throughput of glomo_jax's input pipeline on one core
  (synthetic corpus and ``--wiki_dir`` if it exists): one-time read +
  tokenize, steady-state window + batch, next to what a step consumes.
* ``--loss_curve K``: K steps in float32 and in bfloat16 from one init on
  one fixed stream of random batches; both curves and their largest
  relative difference.
* ``--every_position_ratio``: the step that decodes every position against
  the sampled step (the config's 20 positions), both compiled in one process
  and alternated on the same batches (noise on a shared machine hits both
  alike); per ``--rounds`` process, the medians, the median of the paired
  ratios and the FLOP ratio.

Benchmark-only switches (glomo_jax itself is never changed):
``--malloc_tune 1`` (default) starts the glomo_jax workers with
`glomo_jax.host_memory.MALLOC_TUNABLES` in GLIBC_TUNABLES (what the
experiments' entry points use; see benchmarks/README.md).

Results are appended as JSON lines to ``<results_dir>/pretrain_step.jsonl``
and written as markdown (and PNG for sweeps) next to it
(default ``benchmarks/results/``, git-ignored). See benchmarks/README.md.

  python benchmarks/pretrain_step.py --config small
  python benchmarks/pretrain_step.py --config small \\
      --peer ../shared/peers/glomo_torch_reference.py --rounds 2
"""
from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
  sys.path.insert(0, REPO)

# The peer's named configs (shared/peers/glomo_torch_reference.py, CONFIGS),
# in its own flag names. Both configs also use heads 8, head_dim d/2, kernel
# 3, 2 decoder layers, dropout 0, GRU composition, scale_grad_by_freq, SGD
# lr 8, momentum 0.2, clip 0.25.
CONFIGS = {
    "small": dict(d=256, ntokens=10000, bsz=16, bptt=100, dec_len=3, nlayers=3,
                  nlayers_key=4, nlayers_query=4, sample_len=20),
    "paper": dict(d=512, ntokens=100000, bsz=32, bptt=200, dec_len=3, nlayers=3,
                  nlayers_key=4, nlayers_query=4, sample_len=20),
}
HEADS, KERNEL, DEC_LAYERS = 8, 3, 2
LR, MOMENTUM, CLIP = 8.0, 0.2, 0.25
DEFAULT_PEER = os.path.join(REPO, "..", "shared", "peers", "glomo_torch_reference.py")
DEFAULT_WIKI = os.path.join(REPO, "..", "shared", "data", "wiki_text")
DEFAULT_RESULTS = os.path.join(REPO, "benchmarks", "results")
SWEEP_DEFAULTS = {"T": "100,200,400,800", "B": "4,8,16,32"}
PEER_ON_DEVICE = os.path.join(REPO, "benchmarks", "peer_on_device.py")
# --float32_matmul: jax_default_matmul_precision of the glomo_jax workers,
# and the peer's TensorFloat-32 switch (peer_on_device.py --tf32).
FLOAT32_MATMUL = {"highest": ("highest", 0), "tf32": ("tensorfloat32", 1)}
MALLOC_TUNED = False


# ---- command line -------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
      description="glomo_jax pretraining-step benchmark (optionally against the PyTorch peer)",
      formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
  p.add_argument("--config", choices=sorted(CONFIGS), default="small")
  p.add_argument("--bsz", type=int, default=None, help="batch size (default: the config's)")
  p.add_argument("--bptt", type=int, default=None, help="window length T (default: the config's)")
  p.add_argument("--sample_positions", type=int, default=None,
                 help="decoder start positions per direction; 0 = every position "
                      "(the peer's --sample_len; default: the config's 20)")
  p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                 help="compute dtype (params stay float32 in glomo_jax; the peer casts "
                      "its whole model)")
  p.add_argument("--loss_chunk_size", type=int, default=None,
                 help="rows of the tied softmax per chunk (default: ModelConfig's)")
  p.add_argument("--steps", type=int, default=10, help="timed steps per run")
  p.add_argument("--warmup", type=int, default=3, help="untimed steps first (after compiling)")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--rounds", type=int, default=2, help="runs of each program (alternating)")
  p.add_argument("--peer", default=None,
                 help=f"path of glomo_torch_reference.py (e.g. {os.path.relpath(DEFAULT_PEER)})")
  p.add_argument("--peer_python", default=sys.executable,
                 help="python that runs the peer (needs torch)")
  p.add_argument("--peer_args", default="", help="extra flags for the peer, e.g. '--conv onednn'")
  p.add_argument("--peer_device", default="cpu",
                 help="torch device of the peer's model, e.g. cuda (anything but cpu runs "
                      "the peer through benchmarks/peer_on_device.py)")
  p.add_argument("--float32_matmul", choices=sorted(FLOAT32_MATMUL), default=None,
                 help="float32 matmul precision on accelerators, both programs: highest "
                      "(float32) or tf32 (TensorFloat-32); default: each framework's own "
                      "(JAX's may use tf32 on GPU, torch's does not)")
  p.add_argument("--malloc_tune", type=int, choices=(0, 1), default=1,
                 help="1: glomo_jax workers start with glomo_jax.host_memory.MALLOC_TUNABLES "
                      "in GLIBC_TUNABLES (as the peer's own --malloc_tune 1 default)")
  p.add_argument("--sweep", choices=["T", "B"], default=None,
                 help="scaling sweep over window length or batch size")
  p.add_argument("--sweep_values", default=None,
                 help="comma-separated values (default T: 100,200,400,800; B: 4,8,16,32)")
  p.add_argument("--pipeline", action="store_true", help="input pipeline throughput mode")
  p.add_argument("--wiki_dir", default=DEFAULT_WIKI,
                 help="directory of the wiki_text *.jsonl.xz files (skipped if missing)")
  p.add_argument("--pipeline_docs", type=int, default=400,
                 help="wiki articles to read and tokenize (0: all); synthetic: 10x as many")
  p.add_argument("--pipeline_batches", type=int, default=200,
                 help="batches drawn for the steady-state throughput")
  p.add_argument("--pipeline_vocab", type=int, default=8000,
                 help="SentencePiece vocabulary trained for the wiki corpus")
  p.add_argument("--pipeline_tokenizer_chars", type=int, default=2_000_000,
                 help="characters of the wiki sample the tokenizer is trained on")
  p.add_argument("--loss_curve", type=int, default=0, metavar="K",
                 help="train K steps in float32 and bfloat16 from one init; compare losses")
  p.add_argument("--loss_curve_pool", type=int, default=0, metavar="P",
                 help="0: a new random batch every step; P > 0: cycle through P random "
                      "batches (the model can fit them, so the loss moves)")
  p.add_argument("--every_position_ratio", action="store_true",
                 help="every-position step against the sampled step, paired in one process")
  p.add_argument("--peak_sizes", default="2048,4096",
                 help="square matmul sizes for the float32 peak ('' to skip)")
  p.add_argument("--peak_repeats", type=int, default=5)
  p.add_argument("--peak_inner", type=int, default=1,
                 help="products dispatched back to back per timed repeat")
  p.add_argument("--results_dir", default=DEFAULT_RESULTS)
  p.add_argument("--timeout", type=float, default=None, help="seconds per subprocess")
  p.add_argument("--worker", choices=sorted(WORKERS), default=None,
                 help=argparse.SUPPRESS)
  return p


def resolve(args: argparse.Namespace) -> argparse.Namespace:
  """Fills bsz, bptt, sample_positions from the named config."""
  base = CONFIGS[args.config]
  if args.bsz is None:
    args.bsz = base["bsz"]
  if args.bptt is None:
    args.bptt = base["bptt"]
  if args.sample_positions is None:
    args.sample_positions = base["sample_len"]
  return args


def model_config(args):
  """The glomo_jax ModelConfig of a named config with the overrides."""
  from glomo_jax import ModelConfig
  base = CONFIGS[args.config]
  changes = dict(vocab_size=base["ntokens"], dim=base["d"], num_heads=HEADS,
                 head_dim=base["d"] // 2, num_graph_layers=base["nlayers"],
                 key_layers=base["nlayers_key"], query_layers=base["nlayers_query"],
                 kernel_size=KERNEL, context_length=base["dec_len"],
                 decoder_layers=DEC_LAYERS, sample_positions=args.sample_positions,
                 composition="gru", dropout=0.0, embed_grad_scale_by_freq=True,
                 dtype=args.dtype)
  if args.loss_chunk_size:
    changes["loss_chunk_size"] = args.loss_chunk_size
  return ModelConfig.paper(**changes)


# ---- FLOPs --------------------------------------------------------------------
def model_flops(config, bsz: int, bptt: int, every_row: bool = False) -> dict:
  """Matmul/conv FLOPs of one training step, counted from the shapes.

  A multiply-add is 2 FLOPs. Per direction (both are counted), with B = bsz,
  T = bptt, d, V, K heads of size H, L graph layers, k kernel, D =
  context_length, n decoder start positions (sample_positions, or T − D when
  0), N = B·n decoder rows, and R = the target rows of the top graph layer
  (n: glomo_jax computes the top layer only where the decoder starts,
  `GraphPredictor.split_graphs`; T with ``every_row``, as the peer and the
  authors do):

  * conv: (key_layers + query_layers) · 2·B·T'·k·d·d, T' = T + k − 1 with
    batch norm (the authors' both-sided padding computes T + k − 1 outputs),
    else T;
  * key_query_proj: keys 2·B·T·d·L·K·H, queries 2·B·(T·(L−1) + R)·d·K·H;
  * threshold (query threshold): 2·B·K·H·(T·(L−1) + R);
  * scores: 2·B·K·H·T·(T·(L−1) + R) (dense rows × T, masked afterwards);
  * graph_mixing (graph × values, K heads of d/K): 2·B·d·T·(T·(L−1) + R);
  * composition: GRU: 2·B·(T·(L−1) + R)·(2d·3d + d·3d) (input and hidden
    gates); residual: L · 2·B·T·d·d (value maps, at every source);
  * decoder: hidden gates decoder_layers · 2·N·D·d·3d; input gates
    (decoder_layers − 1) · 2·N·D·d·3d + 2·M·d·3d, where the first layer's
    M = min(N·(D − 1), B·T) rows are what `ContextDecoder.decode_windows`
    computes (step 0's input is zero; overlapping windows share a
    position's gates); M = N·D with ``every_row``, as the peer does;
  * output_layer (tied softmax over V): 2·N·D·d·V.

  Not counted: element-wise work (BatchNorm, ReLU, gates' sigmoid/tanh,
  graph normalisation, softmax, loss), gathers/scatters (embedding lookup
  and its gradient), the gradient clip and the SGD update. Training =
  3 × forward (backward = 2 × forward: input and weight gradients of every
  matmul; the first conv's input gradient is needed for the embedding).

  Args:
    config: a glomo_jax ModelConfig (context objective).
    bsz, bptt: batch size and window length.
    every_row: count the peer's work: the top layer at every position, the
      decoder's first-layer input gates at every step of every window.

  Returns:
    {'forward': {part: FLOPs, both directions}, 'forward_total', 'train'}.
  """
  c = config
  B, T = bsz, bptt
  d, V, K, H, L = c.dim, c.vocab_size, c.num_heads, c.head_dim, c.num_graph_layers
  k, D = c.kernel_size, c.context_length
  n = c.sample_positions if c.sample_positions > 0 else T - D
  N = B * n
  R = T if (every_row or not c.decoupled) else n
  rows = T * (L - 1) + R                       # target rows over all layers
  part = {}
  if c.decoupled:
    t_conv = T + k - 1 if c.norm == "batch" else T
    part["conv"] = (c.key_layers + c.query_layers) * 2 * B * t_conv * k * d * d
  part["key_query_proj"] = 2 * B * T * d * L * K * H + 2 * B * rows * d * K * H
  if c.sparsity == "squared_relu" and c.threshold == "query":
    part["threshold"] = 2 * B * K * H * rows
  part["scores"] = 2 * B * K * H * T * rows
  part["graph_mixing"] = 2 * B * d * T * rows
  if c.composition == "gru":
    part["composition"] = 2 * B * rows * (2 * d * 3 * d + d * 3 * d)
  else:
    part["composition"] = L * 2 * B * T * d * d
  first_rows = N * D if every_row else min(N * (D - 1), B * T)
  part["decoder"] = (c.decoder_layers * 2 * N * D * d * 3 * d
                     + (c.decoder_layers - 1) * 2 * N * D * d * 3 * d
                     + 2 * first_rows * d * 3 * d)
  part["output_layer"] = 2 * N * D * d * V
  forward = {name: 2 * value for name, value in part.items()}  # two directions
  total = sum(forward.values())
  return {"forward": forward, "forward_total": total, "train": 3 * total}


# ---- small helpers --------------------------------------------------------------
def rss_mb() -> float:
  """Peak resident set size of this process so far (ru_maxrss), MiB."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def current_rss_mb() -> float:
  try:
    with open("/proc/self/statm") as f:
      return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
  except OSError:
    return float("nan")


def machine_info() -> dict:
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          cpu = line.split(":", 1)[1].strip()
          break
  except OSError:
    pass
  try:
    load = [round(x, 2) for x in os.getloadavg()]
  except OSError:
    load = None
  return {"host": platform.node(), "cpu": cpu, "cores": os.cpu_count(),
          "affinity": len(os.sched_getaffinity(0)), "loadavg": load,
          "python": platform.python_version()}


def jax_info() -> dict:
  import jax
  dev = jax.devices()[0]
  return {"jax": jax.__version__, "backend": jax.default_backend(),
          "device_kind": getattr(dev, "device_kind", str(dev)),
          "devices": jax.device_count(), "xla_flags": os.environ.get("XLA_FLAGS", "")}


def device_memory() -> dict | None:
  """memory_stats() of the first device (GPU/TPU); None where unavailable (CPU)."""
  import jax
  try:
    stats = jax.devices()[0].memory_stats()
  except Exception:  # noqa: BLE001 - backends without the API
    return None
  if not stats:
    return None
  keep = ("peak_bytes_in_use", "bytes_in_use", "bytes_limit", "largest_alloc_size")
  return {k: round(stats[k] / 2**20, 1) for k in keep if k in stats} | {"unit": "MiB"}


def cost_analysis(compiled) -> dict:
  """XLA's cost analysis of a compiled executable (flops, bytes accessed, ...)."""
  try:
    cost = compiled.cost_analysis()
  except Exception as e:  # noqa: BLE001
    return {"error": repr(e)[:200]}
  if isinstance(cost, (list, tuple)):
    cost = cost[0] if cost else {}
  keep = ("flops", "transcendentals", "bytes accessed", "optimal_seconds")
  return {k: float(cost[k]) for k in keep if k in (cost or {})}


def memory_analysis(compiled) -> dict | None:
  try:
    m = compiled.memory_analysis()
  except Exception:  # noqa: BLE001
    return None
  if m is None:
    return None
  names = ("temp_size_in_bytes", "argument_size_in_bytes", "output_size_in_bytes",
           "alias_size_in_bytes", "generated_code_size_in_bytes")
  return {n.replace("_in_bytes", "_mb"): round(getattr(m, n) / 2**20, 1)
          for n in names if hasattr(m, n)}


_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(\w+)\[([\d,]*)\]")


def vocab_arrays(hlo_text: str, vocab: int, dim: int) -> dict:
  """Arrays with a dimension of size `vocab` in optimised HLO, apart from
  vectors and [V, dim] tables (the embedding, its gradient, its momentum):
  their shapes and counts, split into buffers that an instruction of a
  non-fused computation produces (materialised) and values that live only
  inside a fusion."""
  found = {"materialised": {}, "inside_fusions": {}}
  fused = False
  for line in hlo_text.splitlines():
    m = _COMPUTATION.match(line)
    if m:
      name = m.group(2)
      fused = "fused" in name or "fusion" in name or name.startswith("wrapped_")
      continue
    m = _INSTRUCTION.match(line)
    if not m or not m.group(3):
      continue
    dims = [int(x) for x in m.group(3).split(",")]
    if vocab not in dims or len(dims) < 2:
      continue
    if dims == [vocab, dim]:
      continue
    shape = f"{m.group(2)}[{m.group(3)}]"
    bucket = found["inside_fusions" if fused else "materialised"]
    bucket[shape] = bucket.get(shape, 0) + 1
  return found


def parse_json_line(text: str) -> dict | None:
  for line in reversed(text.strip().splitlines()):
    line = line.strip()
    if line.startswith("{") and line.endswith("}"):
      try:
        return json.loads(line)
      except json.JSONDecodeError:
        continue
  return None


# ---- workers (each prints one JSON line) -----------------------------------------
def compiled_step(args, mc, phases: dict | None = None):
  """(train state, compiled train_step, init seconds, lower+compile seconds)
  for ModelConfig `mc` at the batch shape of `args`. In the trainer's order:
  the step is compiled from the state's shapes first, the heap's free pages
  go back to the system, and only then is the state built. `phases`, if
  given, gets the resident set (MiB) before compiling, after compiling,
  after the release and with the state built."""
  phases = {} if phases is None else phases
  import functools

  import jax
  import jax.numpy as jnp

  from glomo_jax import GLoMo
  from glomo_jax.train.config import TrainConfig
  from glomo_jax.train.optimizer import make_optimizer
  from glomo_jax.train.step import train_step
  from glomo_jax.train.trainer import create_state, init_state

  model = GLoMo(mc)
  tx = make_optimizer("sgd", LR, MOMENTUM, CLIP)
  tc = TrainConfig(model=mc, batch_size=args.bsz, bptt=args.bptt, learning_rate=LR,
                   momentum=MOMENTUM, clip_norm=CLIP, seed=args.seed)
  init = functools.partial(create_state, model, tx, tc)
  spec = {"tokens": jax.ShapeDtypeStruct((args.bsz, args.bptt), jnp.int32)}
  shapes = jax.eval_shape(init, jax.random.PRNGKey(args.seed))
  phases["before_compile"] = round(current_rss_mb(), 1)
  t0 = time.perf_counter()
  compiled = jax.jit(functools.partial(train_step, model, tx), donate_argnums=(0,)).lower(
      shapes, spec).compile()
  compile_s = time.perf_counter() - t0
  phases["after_compile"] = round(current_rss_mb(), 1)
  _host_memory().release_free_memory()
  phases["after_release"] = round(current_rss_mb(), 1)
  t0 = time.perf_counter()
  state = init_state(init, jax.random.PRNGKey(args.seed))
  jax.block_until_ready(state)
  phases["with_state"] = round(current_rss_mb(), 1)
  return state, compiled, time.perf_counter() - t0, compile_s


def timed_step(args, mc, compiled):
  """The step as this benchmark times it: state -> (state, loss). Draws a
  random [bsz, bptt] batch on the host, sends it to the device, runs the
  compiled step and fetches the loss (which waits for the device)."""
  import jax
  import numpy as np
  host = np.random.default_rng(args.seed + 1)

  def one_step(state):
    tokens = host.integers(0, mc.vocab_size, (args.bsz, args.bptt), dtype=np.int32)
    state, metrics = compiled(state, {"tokens": jax.device_put(tokens)})
    return state, float(metrics["loss"])
  return one_step


def set_float32_matmul(args) -> None:
  """Applies --float32_matmul (jax_default_matmul_precision) in a worker."""
  if args.float32_matmul:
    import jax
    jax.config.update("jax_default_matmul_precision", FLOAT32_MATMUL[args.float32_matmul][0])


def worker_step(args) -> dict:
  """Compiles and times train_step; see the module docstring."""
  import jax
  import numpy as np

  mc = model_config(args)
  phases = {}
  state, compiled, init_s, compile_s = compiled_step(args, mc, phases)
  rss_after_compile = rss_mb()
  n_params = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(state.params))
  _host_memory().release_free_memory()  # as the trainer does after set-up
  one_step = timed_step(args, mc, compiled)

  times, losses = [], []
  first_s = None
  for i in range(args.warmup + args.steps):
    if i == args.warmup:
      ru0, c0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    t0 = time.perf_counter()
    state, loss = one_step(state)
    dt = time.perf_counter() - t0
    if i == 0:
      first_s = dt
    if i >= args.warmup:
      times.append(dt)
      losses.append(loss)
  ru1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - c0
  steps = max(len(times), 1)
  med = statistics.median(times)
  flops = model_flops(mc, args.bsz, args.bptt)
  xla = cost_analysis(compiled)
  n = mc.sample_positions or args.bptt - mc.context_length
  loss_rows = 2 * args.bsz * n * mc.context_length  # both directions' decoder outputs
  from glomo_jax.ops.chunked_cross_entropy import balanced_chunk
  loss_chunks = -(-loss_rows // balanced_chunk(loss_rows, mc.loss_chunk_size))
  hlo_text = compiled.as_text()
  hlo = vocab_arrays(hlo_text, mc.vocab_size, mc.dim)
  rec = {
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
      "peak_rss_mb": round(rss_mb(), 1),
      "rss_after_compile_mb": round(rss_after_compile, 1),
      "rss_phases_mb": phases,
      "rss_end_mb": round(current_rss_mb(), 1),
      "minflt_per_step": round((ru1.ru_minflt - ru0.ru_minflt) / steps, 1),
      "user_s_per_step": round((ru1.ru_utime - ru0.ru_utime) / steps, 4),
      "sys_s_per_step": round((ru1.ru_stime - ru0.ru_stime) / steps, 4),
      "cpu_util": round((ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime)
                        / max(wall, 1e-9), 2),
      "malloc_tuned": MALLOC_TUNED,
      "device_memory": device_memory(),
      "xla_memory": memory_analysis(compiled),
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
      "hlo_vocab_arrays": hlo,
      "hlo_convolutions": len(re.findall(r"\bconvolution\(", hlo_text)),
      **jax_info(),
  }
  return rec


def worker_peak(args) -> dict:
  """Matmul peak in the run's compute dtype: a jitted jnp.dot of square
  matrices, repeated (bfloat16: bfloat16 operands, float32 accumulation and
  output, as the model's GEMMs). Each timed repeat dispatches
  ``--peak_inner`` products back to back and waits for the last (more than
  1 on a GPU, where one product takes about a millisecond)."""
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

  from glomo_jax import GLoMo
  from glomo_jax.train.config import TrainConfig
  from glomo_jax.train.optimizer import make_optimizer
  from glomo_jax.train.step import train_step
  from glomo_jax.train.trainer import create_state, init_state

  k = args.loss_curve
  host = np.random.default_rng(args.seed + 1)
  base = model_config(args)
  pool = args.loss_curve_pool or k
  drawn = [host.integers(0, base.vocab_size, (args.bsz, args.bptt), dtype=np.int32)
           for _ in range(min(pool, k))]
  batches = [drawn[i % len(drawn)] for i in range(k)]
  curves, timing, grad_norms = {}, {}, {}
  for dtype in ("float32", "bfloat16"):
    mc = base.replace(dtype=dtype)
    model = GLoMo(mc)
    tx = make_optimizer("sgd", LR, MOMENTUM, CLIP)
    tc = TrainConfig(model=mc, batch_size=args.bsz, bptt=args.bptt, seed=args.seed)
    state = init_state(functools.partial(create_state, model, tx, tc),
                       jax.random.PRNGKey(args.seed))
    step = jax.jit(functools.partial(train_step, model, tx), donate_argnums=(0,))
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
  """The every-position step against the sampled one, alternated in one process."""
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


def worker_pipeline(args) -> dict:
  """Input pipeline throughput on one core (synthetic corpus, wiki_text)."""
  core = min(os.sched_getaffinity(0))
  os.sched_setaffinity(0, {core})
  import glob

  import jax

  from glomo_jax.data import (CorpusSpec, SyntheticConfig, WindowIterator, build_stream,
                              iter_documents, tokenize_documents, train_tokenizer,
                              train_word_tokenizer)
  from glomo_jax.data.synthetic import vocabulary

  shift = max(1, args.bptt // 2)  # authors: bptt 200, shift 100

  def batches(stream) -> dict:
    it = WindowIterator(stream, batch_size=args.bsz, bptt=args.bptt, shift=shift,
                        seed=args.seed)
    next(it)
    t0 = time.perf_counter()
    for _ in range(args.pipeline_batches):
      next(it)
    plain = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(args.pipeline_batches):
      jax.device_put(next(it)["tokens"]).block_until_ready()
    put = time.perf_counter() - t0
    tokens = args.pipeline_batches * args.bsz * args.bptt
    return {"windows": it.num_windows, "batch_tokens_per_s": tokens / plain,
            "batch_plus_device_put_tokens_per_s": tokens / put,
            "batch_ms": 1e3 * plain / args.pipeline_batches}

  out = {"impl": "glomo_jax", "job": "pipeline", "core": core, "bsz": args.bsz,
         "bptt": args.bptt, "shift": shift, "corpora": {}}
  with tempfile.TemporaryDirectory() as tmp:
    # synthetic: generate (= read) + tokenize word by word, then windows
    docs = 10 * (args.pipeline_docs or 400)
    t0 = time.perf_counter()
    tok = train_word_tokenizer(vocabulary(), os.path.join(tmp, "syn/"))
    tok_train_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    stream = build_stream(CorpusSpec(source="synthetic",
                                     synthetic=SyntheticConfig(num_documents=docs)), tok)
    build_s = time.perf_counter() - t0
    out["corpora"]["synthetic"] = {
        "documents": docs, "tokens": stream.num_tokens, "tokenizer_train_s": tok_train_s,
        "read_tokenize_s": build_s, "read_tokenize_tokens_per_s": stream.num_tokens / build_s,
        **batches(stream)}
    # wiki_text: read (xz + JSON), train SentencePiece on a sample, tokenize
    files = sorted(glob.glob(os.path.join(args.wiki_dir, "*.jsonl.xz")))
    if files:
      spec = CorpusSpec(source="files", pattern=tuple(files), file_format="jsonl",
                        text_field="text", max_documents=args.pipeline_docs or None)
      t0 = time.perf_counter()
      documents = list(iter_documents(spec))
      read_s = time.perf_counter() - t0
      chars = sum(len(d) for d in documents)
      t0 = time.perf_counter()
      wtok = train_tokenizer(iter(documents), args.pipeline_vocab, os.path.join(tmp, "wiki/"),
                             sample_chars=args.pipeline_tokenizer_chars)
      wtok_s = time.perf_counter() - t0
      t0 = time.perf_counter()
      wstream = tokenize_documents(documents, wtok, num_threads=1)
      tokenize_s = time.perf_counter() - t0
      out["corpora"]["wiki_text"] = {
          "files": [os.path.basename(f) for f in files], "documents": len(documents),
          "characters": chars, "tokens": wstream.num_tokens,
          "read_s": read_s, "read_chars_per_s": chars / read_s,
          "tokenizer_train_s": wtok_s, "tokenizer_vocab": wtok.vocab_size,
          "tokenizer_sample_chars": args.pipeline_tokenizer_chars,
          "tokenize_s": tokenize_s, "tokenize_tokens_per_s": wstream.num_tokens / tokenize_s,
          "read_tokenize_tokens_per_s": wstream.num_tokens / (read_s + tokenize_s),
          **batches(wstream)}
    else:
      out["corpora"]["wiki_text"] = {"skipped": f"no *.jsonl.xz in {args.wiki_dir}"}
  out.update(jax_info())
  out["peak_rss_mb"] = round(rss_mb(), 1)
  return out


WORKERS = {"step": worker_step, "peak": worker_peak, "pipeline": worker_pipeline,
           "loss_curve": worker_loss_curve, "position_ratio": worker_position_ratio}


# ---- driver ----------------------------------------------------------------------
def worker_argv(args, job: str, **over) -> list[str]:
  """Command line of a glomo_jax worker subprocess (the flags `job` reads)."""
  values = dict(config=args.config, bsz=args.bsz, bptt=args.bptt,
                sample_positions=args.sample_positions, dtype=args.dtype,
                loss_chunk_size=args.loss_chunk_size, seed=args.seed,
                float32_matmul=args.float32_matmul)
  values.update({
      "step": dict(steps=args.steps, warmup=args.warmup, malloc_tune=args.malloc_tune),
      "peak": dict(peak_sizes=args.peak_sizes, peak_repeats=args.peak_repeats,
                   peak_inner=args.peak_inner),
      "pipeline": dict(wiki_dir=args.wiki_dir, pipeline_docs=args.pipeline_docs,
                       pipeline_batches=args.pipeline_batches,
                       pipeline_vocab=args.pipeline_vocab,
                       pipeline_tokenizer_chars=args.pipeline_tokenizer_chars),
      "loss_curve": dict(loss_curve=args.loss_curve, loss_curve_pool=args.loss_curve_pool,
                         malloc_tune=args.malloc_tune),
      "position_ratio": dict(steps=args.steps, warmup=args.warmup,
                             malloc_tune=args.malloc_tune),
  }[job])
  values.update(over)
  argv = [sys.executable, os.path.abspath(__file__), "--worker", job]
  for key, value in values.items():
    if value is not None:
      argv += [f"--{key}", str(value)]
  return argv


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


def _host_memory():
  """glomo_jax/host_memory.py loaded on its own (the driver never imports JAX)."""
  import importlib.util  # noqa: PLC0415
  spec = importlib.util.spec_from_file_location(
      "glomo_host_memory", os.path.join(REPO, "glomo_jax", "host_memory.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def jax_env(args):
  env = dict(os.environ)
  if args.malloc_tune:
    env = _host_memory().tuned_environment(env)
  return env


def check_peer_configs(path: str) -> None:
  """Fails if the peer's CONFIGS differ from the ones mirrored here."""
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  for node in tree.body:
    if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "CONFIGS"
                                            for t in node.targets):
      theirs = {}
      for key, call in zip(node.value.keys, node.value.values):
        theirs[ast.literal_eval(key)] = {kw.arg: ast.literal_eval(kw.value)
                                         for kw in call.keywords}
      if theirs != CONFIGS:
        raise SystemExit(f"the peer's CONFIGS {theirs} differ from the mirrored {CONFIGS}")
      return
  print(f"warning: no CONFIGS found in {path}; not checked", flush=True)


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


def device_peak_mb(rec: dict) -> float | None:
  """Peak accelerator memory of a run, MiB: JAX's peak_bytes_in_use or the
  peer's torch.cuda.max_memory_allocated; None on the CPU."""
  if rec.get("device_peak_mb") is not None:
    return rec["device_peak_mb"]
  return (rec.get("device_memory") or {}).get("peak_bytes_in_use")


def fmt(x, spec=".3f", missing="—"):
  return missing if x is None else format(x, spec)


def step_summary(rec: dict, peak: dict | None) -> list[str]:
  """Human-readable lines for one glomo_jax step record."""
  if "error" in rec:
    return [f"glomo_jax run failed: {rec['error']}"]
  lines = [
      f"backend {rec['backend']} ({rec['device_kind']}), jax {rec['jax']}, "
      f"{rec['n_params']:,} parameters; {rec['hlo_convolutions']} convolution ops in the HLO; "
      f"malloc tuned {rec['malloc_tuned']}",
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


class Results:
  """JSON lines + markdown under the results directory."""

  def __init__(self, args, mode: str):
    self.dir = args.results_dir
    os.makedirs(self.dir, exist_ok=True)
    self.run_id = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    self.mode = mode
    self.stem = f"{mode}_{args.config}_{self.run_id}"
    self.common = {"run_id": self.run_id, "mode": mode, "argv": sys.argv[1:],
                   "machine": machine_info()}

  def add(self, rec: dict) -> None:
    with open(os.path.join(self.dir, "pretrain_step.jsonl"), "a") as f:
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
  m = machine_info()
  bsz = "swept" if args.sweep == "B" else args.bsz
  bptt = "swept" if args.sweep == "T" else args.bptt
  return [f"# {title}", "",
          f"- config `{args.config}`: bsz {bsz}, bptt {bptt}, sample_positions "
          f"{args.sample_positions}, dtype {args.dtype}, loss_chunk_size "
          f"{args.loss_chunk_size or 'default'}; {args.steps} timed steps after "
          f"{args.warmup} warm-up; {args.rounds} round(s); glomo_jax malloc_tune "
          f"{args.malloc_tune}",
          f"- machine: {m['cpu']}, {m['cores']} cores (affinity {m['affinity']}), load "
          f"average at the start {m['loadavg']}; command `{' '.join(sys.argv)}`", ""]


def get_peak(args, results: Results) -> dict | None:
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


def mode_step(args) -> None:
  """glomo_jax alone, or alternating with the peer."""
  mode = "peer" if args.peer else "step"
  results = Results(args, mode)
  if args.peer:
    check_peer_configs(args.peer)
  recs = {"glomo_jax": [], "peer": []}
  for r in range(args.rounds):
    rec = run_json(worker_argv(args, "step"), f"round {r + 1} glomo_jax", args.timeout,
                   jax_env(args))
    rec["round"] = r + 1
    results.add(rec)
    recs["glomo_jax"].append(rec)
    if "error" not in rec:
      print(f"    glomo_jax: median {rec['median_step_s']:.4f} s, "
            f"{rec['tokens_per_s']:.1f} tokens/s, peak RSS {rec['peak_rss_mb']:.0f} MiB",
            flush=True)
    if args.peer:
      prec = run_json(peer_argv(args), f"round {r + 1} peer", args.timeout)
      prec["round"] = r + 1
      results.add(prec)
      recs["peer"].append(prec)
      if "error" not in prec:
        print(f"    peer: median {prec['median_step_s']:.4f} s, "
              f"{prec['tokens_per_s']:.1f} tokens/s, peak RSS {prec['peak_rss_mb']:.0f} MiB",
              flush=True)
  peak = get_peak(args, results)
  md = md_header(args, "glomo_jax pretraining step" + (" vs the PyTorch peer" if args.peer else ""))
  good = [r for r in recs["glomo_jax"] if "error" not in r]
  if good:
    best = min(good, key=lambda r: r["median_step_s"])
    md += ["## glomo_jax (the run with the lowest median)", ""]
    md += ["- " + line for line in step_summary(best, peak)] + [""]
  if args.peer:
    a = pooled(recs["glomo_jax"], args.bsz, args.bptt)
    b = pooled(recs["peer"], args.bsz, args.bptt)
    md += ["## Alternating runs (median over all timed steps of all runs)", "",
           "| program | runs | median step (s) | tokens/s | run medians (s) | first step (s) "
           "| peak RSS (MiB) | peak device memory (MiB) |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, p in (("glomo_jax", a), ("peer", b)):
      if p["runs"]:
        md.append(f"| {name} | {p['runs']} | {p['median_step_s']:.4f} | {p['tokens_per_s']:.1f} "
                  f"| {p['run_medians']} | {p['first_step_s']:.2f} | {p['peak_rss_mb']:.0f} "
                  f"| {fmt(p['device_peak_mb'], '.0f')} |")
      else:
        md.append(f"| {name} | 0 (failed: {p['errors']}) | | | | | | |")
    if a["runs"] and b["runs"]:
      ratio = a["tokens_per_s"] / b["tokens_per_s"]
      md += ["", f"**tokens/s glomo_jax ÷ peer: {ratio:.3f}**"]
      peer0 = next(r for r in recs["peer"] if "error" not in r)
      md += ["", f"peer: torch {peer0.get('torch')}, device {peer0.get('device', 'cpu')} "
             f"{peer0.get('device_name', '')}, tf32 {peer0.get('tf32', False)}, "
             f"{peer0.get('threads')} threads, fast "
             f"{peer0.get('fast')}, conv {peer0.get('conv')}, malloc tuned "
             f"{peer0.get('malloc_tuned')}; glomo_jax malloc tuned {bool(args.malloc_tune)}, "
             f"float32 matmul {args.float32_matmul or 'the framework default'}."]
      results.add({"impl": "summary", "glomo_jax": a, "peer": b, "ratio_tokens_per_s": ratio})
  path = results.markdown(md)
  print("\n".join(md))
  print(f"\nwrote {path} and {os.path.join(results.dir, 'pretrain_step.jsonl')}")


def mode_sweep(args) -> None:
  """Step time and peak RSS against T or B, glomo_jax and (with --peer) the peer."""
  results = Results(args, f"sweep{args.sweep}")
  if args.peer:
    check_peer_configs(args.peer)
  values = [int(v) for v in (args.sweep_values or SWEEP_DEFAULTS[args.sweep]).split(",")]
  key = "bptt" if args.sweep == "T" else "bsz"
  programs = ["glomo_jax"] + (["peer"] if args.peer else [])
  table = {p: {} for p in programs}
  for v in values:
    over = {key: v}
    runs = {p: [] for p in programs}
    for r in range(args.rounds):
      rec = run_json(worker_argv(args, "step", **over), f"{key}={v} round {r + 1} glomo_jax",
                     args.timeout, jax_env(args))
      results.add({**rec, "sweep": key, "value": v})
      runs["glomo_jax"].append(rec)
      if args.peer:
        prec = run_json(peer_argv(args, **over), f"{key}={v} round {r + 1} peer", args.timeout)
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


def plot_sweep(table, values, key, label, path, title) -> None:
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


def mode_pipeline(args) -> None:
  """Input pipeline throughput next to what a training step consumes."""
  results = Results(args, "pipeline")
  pipe = run_json(worker_argv(args, "pipeline"), "input pipeline (one core)", args.timeout)
  results.add(pipe)
  step = run_json(worker_argv(args, "step"), "glomo_jax step", args.timeout, jax_env(args))
  results.add(step)
  md = md_header(args, "glomo_jax input pipeline (one core) vs training step")
  consume = step.get("tokens_per_s")
  md.append(f"A training step consumes {fmt(consume, '.1f')} tokens/s "
            f"(bsz {args.bsz} × bptt {args.bptt} / median step "
            f"{fmt(step.get('median_step_s'), '.4f')} s).")
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


def mode_loss_curve(args) -> None:
  results = Results(args, "loss_curve")
  rec = run_json(worker_argv(args, "loss_curve"), f"loss curve ({args.loss_curve} steps)",
                 args.timeout, jax_env(args))
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


def mode_position_ratio(args) -> None:
  results = Results(args, "position_ratio")
  md = md_header(args, "every position vs sampled step (paired in one process)")
  md += ["| round | sampled step (s) | every-position step (s) | median of paired ratios "
         "| ratio of medians | fastest steps' ratio |", "| --- | --- | --- | --- | --- | --- |"]
  recs = []
  for r in range(1, args.rounds + 1):
    rec = run_json(worker_argv(args, "position_ratio"), f"position ratio, round {r}",
                   args.timeout, jax_env(args))
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


def main(argv=None) -> None:
  args = resolve(build_parser().parse_args(argv))
  if args.worker:
    global MALLOC_TUNED
    MALLOC_TUNED = _host_memory().malloc_tuned()
    _host_memory().use_synchronous_cpu_dispatch()  # as the entry points (when tuned)
    set_float32_matmul(args)
    print(json.dumps(WORKERS[args.worker](args)), flush=True)
    return
  if args.peer and not os.path.exists(args.peer):
    raise SystemExit(f"no peer at {args.peer}")
  if args.loss_curve:
    mode_loss_curve(args)
  elif args.pipeline:
    mode_pipeline(args)
  elif args.sweep:
    mode_sweep(args)
  elif args.every_position_ratio:
    mode_position_ratio(args)
  else:
    mode_step(args)


if __name__ == "__main__":
  main()
