#!/usr/bin/env python3
"""Pretraining-step benchmark of glomo_jax, optionally against the PyTorch peer.

Times full training steps of glomo_jax (`glomo_jax.train.step.train_step` of
`glomo_jax.pretraining.GLoMoObjective`, jitted with the state donated:
forward, backward, global-norm clip 0.25, SGD lr 8 momentum 0.2) at the
peer's named configs (`small`, `paper`; the same d, V, bsz, bptt, layers,
heads, samples as the peer's ``CONFIGS``; the peer is a PyTorch
implementation of the GLoMo pretraining model, see benchmarks/README.md).
Each step draws a random ``[bsz, bptt]`` token batch on the host, transfers
it and blocks on the loss, as the peer does; with ``--sync_every N`` the loss
is fetched after every N-th step only (the training loop's steady state,
which fetches its metrics when it reports) and a step's time is its block's
mean.

Modes (every measurement runs in a fresh subprocess of this script, called
with ``--worker JOB``, which prints one JSON line):

* default: ``--rounds`` runs of glomo_jax, then this machine's matmul peak;
  prints compile time, median step, tokens/s, peak RSS (and device memory on
  GPU), model FLOPs against XLA's ``cost_analysis()`` and achieved FLOP/s as
  a share of the matmul peak.
* ``--baseline_repo DIR``: glomo_jax and another checkout's step worker (and
  the peer, with ``--peer``) alternate; the table adds the baseline and the
  ratio of this code's tokens/s to it (the previous code, compared in one run).
* ``--peer PATH``: glomo_jax and the peer alternate (A B A B …) for
  ``--rounds`` rounds with the same config; a table of median step,
  tokens/s, peak RSS and the ratio of tokens/s.
* ``--sweep T`` / ``--sweep B``: step time and peak RSS against window
  length (100, 200, 400, 800) or batch size at a fixed model, glomo_jax and
  (with ``--peer``) the peer; a markdown table and a PNG plot.
* ``--pipeline``: throughput of glomo_jax's input pipeline on one core
  (synthetic corpus and ``--wiki_dir`` if it exists): one-time read +
  tokenize, steady-state window + batch, next to what a step consumes.
* ``--loss_curve K``: K steps in float32 and in bfloat16 from one init on
  one fixed stream of random batches; both curves and their largest
  relative difference.
* ``--every_position_ratio``: the step that decodes every position against
  the sampled step, both compiled in one process and alternated on the same
  batches; per ``--rounds`` process, the medians, the median of the paired
  ratios and the FLOP ratio.
* ``--kernel_ratio``: the step with the ``--kernels`` Pallas kernels against
  the reference ops, both compiled in one process and alternated on the same
  batches (with ``--peer``, the peer alternates with that process); the
  medians, the median of the paired ratios, TFLOP/s and the share of the
  matmul peak of each, XLA's memory of each executable.
* ``--xla_flag_sets 'A|B|…'``: glomo_jax under each XLA_FLAGS setting
  (appended to the environment's), alternating fresh processes for
  ``--rounds`` rounds (e.g. XLA command buffers on and off); each setting's
  median step and its ratio to the first.
* ``--tuning_ratio``: glomo_jax with the CPU tuning and without (the
  library's default), alternating fresh processes (A B A B …) for
  ``--rounds`` rounds at the same config; the median step of each and their
  ratio.

The CPU tuning (`glomo_jax.tuning`): with ``--cpu_tuning 1`` (default) the
glomo_jax workers start with GLOMO_JAX_CPU_TUNING=1 and the glibc heap
settings in their environment, as a tuned product run; ``--cpu_tuning 0``
measures the library's defaults. See benchmarks/README.md.

Results are appended as JSON lines to ``<results_dir>/pretrain_step.jsonl``
and written as markdown (and PNG for sweeps) next to it (default
``benchmarks/results/``, git-ignored). The code is in benchmarks/stepbench/.

  python benchmarks/pretrain_step.py --config small
  python benchmarks/pretrain_step.py --config small \\
      --peer path/to/peer.py --rounds 2
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
for path in (HERE, os.path.dirname(HERE)):  # stepbench, and glomo_jax for the workers
  if path not in sys.path:
    sys.path.insert(0, path)

from stepbench import kernel_modes, modes, workers  # noqa: E402
from stepbench.configs import (CONFIGS, DEFAULT_RESULTS, DEFAULT_WIKI,  # noqa: E402
                               FLOAT32_MATMUL, resolve)


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
  p.add_argument("--kernels", choices=["reference", "fused", "fused_loss", "fused_graph"],
                 default="reference", help="ModelConfig.kernels of glomo_jax's model")
  p.add_argument("--sync_every", type=int, default=1,
                 help="fetch the loss after every N-th step only (1: every step, as the peer)")
  p.add_argument("--kernel_ratio", action="store_true",
                 help="the --kernels step against the reference ops, paired in one process")
  p.add_argument("--xla_flag_sets", default=None, metavar="'A|B'",
                 help="alternate glomo_jax processes under each XLA_FLAGS setting")
  p.add_argument("--loss_chunk_size", type=int, default=None,
                 help="rows of the tied softmax per chunk (default: ModelConfig's)")
  p.add_argument("--steps", type=int, default=10, help="timed steps per run")
  p.add_argument("--warmup", type=int, default=3, help="untimed steps first (after compiling)")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--rounds", type=int, default=2, help="runs of each program (alternating)")
  p.add_argument("--peer", default=None,
                 help="file of the PyTorch peer (benchmarks/README.md, 'The peer'); "
                      "glomo_jax and the peer alternate")
  p.add_argument("--peer_python", default=sys.executable,
                 help="python that runs the peer (needs torch)")
  p.add_argument("--peer_args", default="", help="extra flags for the peer, e.g. '--conv onednn'")
  p.add_argument("--baseline_repo", default=None, metavar="DIR",
                 help="another checkout of glomo_jax (e.g. the previous commit) whose own "
                      "step worker alternates with this one's in the default mode")
  p.add_argument("--baseline_args", default="",
                 help="extra flags for the baseline's worker, e.g. '--malloc_tune 1' for "
                      "code older than --cpu_tuning")
  p.add_argument("--peer_device", default="cpu",
                 help="torch device of the peer's model, e.g. cuda (anything but cpu runs "
                      "the peer through benchmarks/peer_on_device.py)")
  p.add_argument("--float32_matmul", choices=sorted(FLOAT32_MATMUL), default=None,
                 help="float32 matmul precision on accelerators, both programs: highest "
                      "(float32) or tf32 (TensorFloat-32); default: each framework's own "
                      "(JAX's may use tf32 on GPU, torch's does not)")
  p.add_argument("--cpu_tuning", type=int, choices=(0, 1), default=1,
                 help="1: glomo_jax workers run with GLOMO_JAX_CPU_TUNING=1 and the glibc "
                      "heap settings (glomo_jax.tuning); 0: the library's defaults")
  p.add_argument("--tuning_ratio", action="store_true",
                 help="glomo_jax with the CPU tuning against without, alternating processes")
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
  p.add_argument("--worker", choices=sorted(workers.WORKERS), default=None,
                 help=argparse.SUPPRESS)
  return p


def main(argv=None) -> None:
  args = resolve(build_parser().parse_args(argv))
  if args.worker:
    workers.run(args)
    return
  if args.peer and not os.path.exists(args.peer):
    raise SystemExit(f"no peer at {args.peer}")
  if args.loss_curve:
    modes.loss_curve(args)
  elif args.pipeline:
    modes.pipeline(args)
  elif args.sweep:
    modes.sweep(args)
  elif args.every_position_ratio:
    modes.position_ratio(args)
  elif args.tuning_ratio:
    modes.tuning_ratio(args)
  elif args.kernel_ratio:
    kernel_modes.kernel_ratio(args)
  elif args.xla_flag_sets is not None:
    kernel_modes.flags_ratio(args)
  else:
    modes.step(args)


if __name__ == "__main__":
  main()
