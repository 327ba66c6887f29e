#!/usr/bin/env python3
"""Where a pretraining step spends its time, from a JAX profiler trace.

Compiles the same training step as ``pretrain_step.py`` (same configs and
flags: ``--config``, ``--bsz``, ``--bptt``, ``--dtype``,
``--float32_matmul`` …), runs ``--warmup`` steps, then traces ``--steps``
steps with ``jax.profiler.trace`` and reads the trace back
(``jax.profiler.ProfileData``). Every traced event whose name is an HLO
instruction of the compiled step is attributed to that instruction, to its
kind (cuBLAS/Triton GEMM, fusion, copy …) and to the JAX op_name of its
metadata (the Flax module path, cut at ``--depth`` parts). Prints, per step:
the summed time of those events, the wall time, and the three tables.

On a GPU the events are the kernels on the device's stream lines (named
after their fusion; library GEMMs, which carry no HLO name, are listed by
kernel name with their summed time); on the CPU they are the thunks on the
host threads (summed over threads, so greater than the wall time when they
run in parallel). On the CPU it also reports how many of XLA's worker
threads were busy, and which instructions ran while the others were idle
(the serial stretches of the step). Run from the command line, it runs with
the CPU tuning of the benchmark's workers (GLOMO_JAX_CPU_TUNING=1, restarting
itself once with the glibc heap settings; `glomo_jax.tuning`) unless
``--cpu_tuning 0``; a caller that passes argv keeps its own process and its
environment's setting.

  python benchmarks/profile_step.py --config paper --float32_matmul highest
"""
from __future__ import annotations

import collections
import contextlib
import glob
import os
import re
import statistics
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pretrain_step  # noqa: E402
from stepbench.configs import model_config, resolve  # noqa: E402
from stepbench.flops import model_flops  # noqa: E402
from stepbench.step import compiled_step, set_float32_matmul, timed_step  # noqa: E402

_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.+?)\s+([\w\-]+)\(")


def hlo_instructions(text: str) -> dict[str, dict]:
  """{instruction name: {'op', 'shape', 'op_name', 'target'}} of HLO text."""
  info = {}
  for line in text.splitlines():
    m = _INSTRUCTION.match(line)
    if not m:
      continue
    name, shape, op = m.groups()
    meta = re.search(r'op_name="([^"]*)"', line)
    target = re.search(r'custom_call_target="([^"]*)"', line)
    kind = re.search(r'kind=(\w+)', line)
    info[name] = {"op": op, "shape": shape[:60], "op_name": meta.group(1) if meta else "",
                  "target": target.group(1) if target else (kind.group(1) if kind else "")}
  return info


def kind_of(name: str, rec: dict) -> str:
  if rec["op"] == "custom-call":
    return f"custom-call {rec['target']}"
  if "gemm" in name or "dot" in name or rec["op"] in ("dot", "convolution"):
    return f"gemm/dot ({rec['op']})"
  if rec["op"] == "fusion":
    return f"fusion {rec['target'] or ''}".strip()
  return rec["op"]


def module_path(op_name: str, depth: int) -> str:
  parts = [p for p in op_name.split("/") if p and not p.startswith("jit(")]
  return "/".join(parts[:depth]) or "(no op_name)"


def model_part(op_name: str, modules: set, depth: int = 2) -> str:
  """The part of a model an instruction belongs to, from its JAX op_name:
  the longest path of Flax modules with parameters (`modules`: the prefixes
  of the parameter tree's paths, as tuples) that the op_name names right
  after the model (at most `depth` modules), and whether it is the forward
  pass or the backward (under ``transpose(``). 'transfer/mixture_fw
  (forward)'; ops of the model outside any such module (a top-level dropout,
  say) are its '(top level)'; ops outside the model (optimiser, metrics) are
  'outside the model'."""
  parts = [p for p in op_name.split("/") if p and not p.startswith("jit(")]
  model = next((i for i, p in enumerate(parts) if p.startswith(("jvp(", "transpose("))), None)
  if model is None:
    return "outside the model"
  path = []
  for part in parts[model + 1:]:
    if len(path) == depth or tuple(path + [part]) not in modules:
      break
    path.append(part)
  way = "backward" if parts[model].startswith("transpose(") else "forward"
  return f"{'/'.join(path) or '(top level)'} ({way})"


def hlo_name(event, aliases: dict[str, str]) -> str | None:
  """The HLO instruction of a trace event: its hlo_op stat or its name (GPU
  kernels are named after their fusion with '.' and '-' as '_')."""
  names = [str(v) for k, v in event.stats if k in ("hlo_op", "long_name")]
  names.append(event.name.lstrip("%").split(" ")[0])
  for name in names:
    name = name.lstrip("%").split(" ")[0]
    if name in aliases:
      return aliases[name]
  return None


def attribute(data, info: dict, backend: str):
  """({HLO instruction: [durations, ns]}, {device line: summed ns},
  {(unattributed kernel, the HLO instruction of the kernel before it on its
  stream): ns}) of the events of a trace (`jax.profiler.ProfileData`). On a
  device, the "XLA Ops" line if it names HLO instructions, else the kernels
  on its stream lines; on the CPU, the host threads."""
  aliases = {}
  for name in info:
    aliases[name] = name
    aliases.setdefault(re.sub(r"[.\-]", "_", name), name)
  by_line = collections.defaultdict(lambda: collections.defaultdict(list))
  streams, other = collections.Counter(), collections.Counter()
  for plane in data.planes:
    on_device = plane.name.startswith("/device:") and backend != "cpu"
    on_host = plane.name.startswith("/host:CPU") and backend == "cpu"
    if not (on_device or on_host):
      continue
    for line in plane.lines:
      is_stream = on_device and line.name.startswith("Stream")
      previous = "(start)"  # the last HLO-named kernel before this one on the stream
      for event in sorted(line.events, key=lambda e: e.start_ns):
        if is_stream:
          streams[line.name] += event.duration_ns
        name = hlo_name(event, aliases)
        if name is not None:
          by_line["ops" if line.name == "XLA Ops" else "other"][name].append(event.duration_ns)
          previous = name
        elif is_stream:
          other[(event.name[:60], previous)] += event.duration_ns
  found = by_line["ops"] or by_line["other"]
  return found, streams, other


PARALLEL_TASK = "(parallel task)"


def host_thread_spans(data) -> list[list[tuple[int, int, str]]]:
  """Per XLA:CPU worker thread ("tf_XLAEigen/…" lines), its busy spans
  (start ns, end ns, name): the HLO thunks it ran, and the spans between
  ThreadpoolListener::StartRegion and StopRegion, in which it worked on a
  task of an op that another thread runs in parallel (YNNPACK's GEMMs).
  The executor's own events ("…::…", "end: …") and while loops (which wrap
  their bodies) are left out."""
  threads = []
  for plane in data.planes:
    if not plane.name.startswith("/host:CPU"):
      continue
    for line in plane.lines:
      if not line.name.startswith("tf_XLAEigen"):
        continue
      spans, start = [], None
      for e in sorted(line.events, key=lambda e: e.start_ns):
        name = e.name.split(" ")[0]
        if name == "ThreadpoolListener::StartRegion":
          start = e.start_ns
        elif name == "ThreadpoolListener::StopRegion" and start is not None:
          spans.append((start, e.start_ns, PARALLEL_TASK))
          start = None
        elif ("::" not in name and not name.startswith(("end:", "while"))
              and e.duration_ns > 0):
          spans.append((e.start_ns, e.start_ns + e.duration_ns, name))
      if spans:
        threads.append(spans)
  return threads


def occupancy(threads: list[list[tuple[int, int, str]]]):
  """(Counter {number of busy threads: ns}, Counter {name: ns it ran while
  every other thread was idle}) over the span from the first event to the
  last. Time alone is split evenly among what the busy thread was running
  (its own thunks before a task it ran for another thread)."""
  points = []
  for tid, spans in enumerate(threads):
    for start, end, name in spans:
      points += [(start, 1, tid, name), (end, -1, tid, name)]
  points.sort(key=lambda p: (p[0], p[1]))
  active = [collections.Counter() for _ in threads]
  by_count, alone = collections.Counter(), collections.Counter()
  last = points[0][0] if points else 0
  for t, delta, tid, name in points:
    if t > last:
      busy = [a for a in active if a]
      by_count[len(busy)] += t - last
      if len(busy) == 1:
        names = [n for n in busy[0] if n != PARALLEL_TASK] or [PARALLEL_TASK]
        for n in names:
          alone[n] += (t - last) / len(names)
    last = t
    active[tid][name] += delta
    if active[tid][name] <= 0:
      del active[tid][name]
  return by_count, alone


def main(argv=None) -> None:
  warnings.filterwarnings("ignore", message="builtin type event_stats")
  p = pretrain_step.build_parser()
  p.description = __doc__.split("\n")[0]
  p.add_argument("--depth", type=int, default=4, help="op_name parts per module group")
  p.add_argument("--top", type=int, default=30, help="rows of the instruction table")
  p.add_argument("--trace_dir", default=None, help="keep the trace here (default: a temp dir)")
  args = resolve(p.parse_args(argv))
  from glomo_jax import tuning
  if argv is None:
    # From the command line: the tuning as the benchmark's workers run with it
    # (start_process restarts the program once under the glibc settings). A
    # caller that passes argv keeps its own process.
    if args.cpu_tuning:
      os.environ[tuning.ENV_VAR] = "1"
    else:
      os.environ.pop(tuning.ENV_VAR, None)
    tuning.start_process()
  import jax
  set_float32_matmul(args)
  args.steps = args.steps or 3
  mc = model_config(args)
  state, compiled, _, compile_s = compiled_step(args, mc)
  info = hlo_instructions(compiled.as_text())
  step = timed_step(args, mc, compiled)
  for _ in range(args.warmup):
    state, _ = step(state)
  walls = []
  with contextlib.ExitStack() as stack:
    trace_dir = args.trace_dir or stack.enter_context(
        tempfile.TemporaryDirectory(prefix="glomo_trace_"))
    with jax.profiler.trace(trace_dir):
      for _ in range(args.steps):
        t0 = time.perf_counter()
        state, _ = step(state)
        walls.append(time.perf_counter() - t0)
    paths = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)
    if not paths:
      raise SystemExit(f"no *.xplane.pb under {trace_dir}")
    data = jax.profiler.ProfileData.from_file(max(paths, key=os.path.getmtime))
    found, streams, other = attribute(data, info, jax.default_backend())
    threads = host_thread_spans(data) if jax.default_backend() == "cpu" else []
  n = args.steps
  per = {k: sum(v) / n / 1e6 for k, v in found.items()}  # ms per step
  total = sum(per.values())
  dev = jax.devices()[0]
  print(f"{args.config} {args.dtype} bsz {args.bsz} bptt {args.bptt} on "
        f"{getattr(dev, 'device_kind', dev)} (jax {jax.__version__}, XLA_FLAGS "
        f"'{os.environ.get('XLA_FLAGS', '')}', float32 matmul {args.float32_matmul}, "
        f"CPU tuning {tuning.enabled()}, glibc heap settings {tuning.malloc_tuned()}); "
        f"compile {compile_s:.1f} s")
  print(f"traced {n} steps: wall {1e3 * statistics.median(walls):.2f} ms/step (median), "
        f"attributed events {total:.2f} ms/step in {sum(len(v) for v in found.values()) // n} "
        f"events/step")
  for line, ns in streams.most_common():
    print(f"kernels on {line}: {ns / n / 1e6:.2f} ms/step")
  if other:
    print(f"\n-- kernels not matched to an HLO instruction (library GEMMs: cuBLAS, CUTLASS): "
          f"{sum(other.values()) / n / 1e6:.2f} ms/step; the largest, with the fused kernel "
          f"that ran before each on its stream:")
    for (kernel, before), ns in other.most_common(args.top):
      where = info[before]["op_name"][-90:] if before in info else before
      print(f"{ns / n / 1e6:9.3f} ms  {kernel}\n             after {before}: {where}")
  model = model_flops(mc, args.bsz, args.bptt)["train"]
  print(f"model FLOPs {model / 1e9:.1f} G/step: {model / statistics.median(walls) / 1e12:.2f} "
        f"TFLOP/s at the wall time")
  tables = [("kind", lambda k: kind_of(k, info[k])),
            (f"op_name (depth {args.depth})",
             lambda k: module_path(info[k]["op_name"], args.depth))]
  for title, key in tables:
    groups = collections.defaultdict(float)
    for k, ms in per.items():
      groups[key(k)] += ms
    print(f"\n-- by {title}")
    for g, ms in sorted(groups.items(), key=lambda kv: -kv[1])[:40]:
      print(f"{ms:9.3f} ms {100 * ms / total:5.1f}%  {g}")
  print("\n-- instructions")
  for k, ms in sorted(per.items(), key=lambda kv: -kv[1])[:args.top]:
    rec = info[k]
    print(f"{ms:9.3f} ms {len(found[k]) // n:3d}x {k[:34]:34s} {rec['shape'][:34]:34s} "
          f"{rec['op_name'][-80:]}")
  if threads:
    by_count, alone = occupancy(threads)
    print(f"\n-- XLA:CPU worker threads ({len(threads)}), ms/step with k of them busy: "
          + ", ".join(f"{k}: {by_count[k] / n / 1e6:.1f}" for k in sorted(by_count)))
    print("instructions running while every other thread was idle:")
    for k, ns in alone.most_common(args.top):
      where = info[k]["op_name"][-80:] if k in info else ""
      print(f"{ns / n / 1e6:9.3f} ms  {k[:34]:34s} {where}")


if __name__ == "__main__":
  main()
