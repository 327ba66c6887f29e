r"""Transfer step speed for IMDB and MNLI: training and prediction examples/s
of the baseline and the graph variants, on real batches, alternating; the
word-graph cache's build rate and bytes, dense and top-k.

  python benchmarks/transfer_speed.py --task=imdb \
      --train=../shared/data/imdb/imdb_train.jsonl.gz \
      --glove=../shared/data/glove/glove.6B.100d.top2604.txt.gz \
      --predictor_export=runs/wiki_cpu/export --rounds=3
  python benchmarks/transfer_speed.py --task=mnli \
      --train=../shared/data/mnli/mnli_train_subset_9k.jsonl.xz ...

The task settings are those of the CPU-scale grids of
experiments/results/text_tasks.md (the task config with max_words 128 for
IMDB and 64 for MNLI); `--examples` training examples are read (the grids
read 8,000). A variant is 'baseline', 'uniform', 'embeddings', 'rnn', or a
graph variant reading a top-k cache,
'embeddings:8', with uint8 weights 'embeddings:32:uint8' (its host batch
densifies the kept sources of each row); a graph
variant may name how its graphs reach the features, 'embeddings@candidates'
or 'embeddings@mixtures' (`--config.model.transfer.apply_as`; default 'auto').

What is timed per batch is what the training loop does (`task_timing`):
build the batch on the host (`ClassificationTask.device_batch`, with the
word graphs gathered from the memory-mapped cache) and dispatch the jitted
step (`train.step.train_step`: forward, backward, Adam), overlapped as in
the loop, the last loss fetched; and the jitted prediction (`eval_step`),
each result fetched. The batches are a fixed list drawn as
the loop draws them (shuffled) from the training subset; every shape is
compiled before timing; the variants alternate within each round; a figure
is the median over rounds. The graph caches are built once, timed (on the
training subset: the predictor's forward pass and the alignment to words;
the first cache built includes the compiles), in a temporary directory
removed at the end. `--profile` then traces each variant's training steps
(the batches of the commonest shape) and prints their host-thread time
by part of the model: which module's forward or backward the time went to.
Records go to benchmarks/results/transfer_speed.jsonl.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402

from benchmarks.task_timing import TimedTask, alternate, print_profiles, rate  # noqa: E402
from experiments.configs import imdb as imdb_configs  # noqa: E402
from experiments.configs import mnli as mnli_configs  # noqa: E402
from glomo_jax.classification import ClassificationConfig  # noqa: E402
from glomo_jax.train.batches import batch_order  # noqa: E402
from glomo_jax.classification.task import ClassificationTask  # noqa: E402
from glomo_jax.text.glove import embedding_matrix  # noqa: E402
from glomo_jax.classification.run import build_model, load_task_data  # noqa: E402
from glomo_jax.graphs.task_graphs import task_graphs  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                       "transfer_speed.jsonl")
CONFIGS = {"imdb": (imdb_configs, 128), "mnli": (mnli_configs, 64)}   # the CPU grids' max_words


def parse() -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--task", choices=sorted(CONFIGS), required=True)
  p.add_argument("--train", required=True, help="the task's training JSON-lines file")
  p.add_argument("--glove", help="GloVe text file (else random word vectors)")
  p.add_argument("--predictor_export", help="export for the graph variants")
  p.add_argument("--variants", default="baseline,uniform,embeddings,embeddings:8")
  p.add_argument("--examples", type=int, default=2000, help="training examples read")
  p.add_argument("--batches", type=int, default=24, help="training batches timed per round")
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--profile", action="store_true",
                 help="after the timing, trace each variant's training steps and print "
                      "their thread time by part of the model (TimedTask.profile)")
  return p.parse_args()


def base_config(args) -> ClassificationConfig:
  module, max_words = CONFIGS[args.task]
  raw = module.get_config()
  raw.files.train, raw.glove_path = args.train, args.glove
  raw.max_train_examples, raw.max_words = args.examples, max_words
  raw.predictor_export = args.predictor_export
  return ClassificationConfig.from_dict(raw.to_dict())


def split_variant(spec: str) -> tuple[str, str, str]:
  """'embeddings:32:uint8@mixtures' -> ('embeddings', '32:uint8', 'mixtures');
  'baseline' -> ('baseline', '', 'auto')."""
  spec, _, graph_apply = spec.partition("@")
  name, _, cache = spec.partition(":")
  return name, cache, graph_apply or "auto"


def variant_config(base: ClassificationConfig, spec: str) -> tuple[ClassificationConfig, str]:
  """The run config of a variant spec (its graph cache's top-k and dtype
  included), and the cache's part of the spec ('' dense, '8', '32:uint8')."""
  name, cache, graph_apply = split_variant(spec)
  k, _, dtype = cache.partition(":")
  return base.replace(variant=name, graph_cache_topk=int(k) if k else None,
                      graph_cache_dtype=dtype or base.graph_cache_dtype,
                      model=dataclasses.replace(base.model, transfer=dataclasses.replace(
                          base.model.transfer, apply_as=graph_apply))), cache


def main():
  args = parse()
  base = base_config(args)
  data = load_task_data(base)
  vocab = data.build_vocabulary(min_count=base.vocab.min_count, max_size=base.vocab.max_size)
  table, _ = embedding_matrix(vocab, base.glove_path, dim=base.model.embed_dim,
                              oov_scale=base.model.oov_scale, seed=base.data_seed)
  cache_root = tempfile.mkdtemp(prefix="transfer_graphs_")     # removed at the end
  predictor, caches, cache_rows = None, {}, {}
  specs = args.variants.split(",")
  for spec in specs:
    config, cache = variant_config(base, spec)
    if not config.reads_graphs or cache in caches:
      continue
    if predictor is None:
      from glomo_jax.export import load_graph_predictor  # noqa: PLC0415
      predictor = load_graph_predictor(args.predictor_export)
    began = time.perf_counter()
    caches[cache] = task_graphs(config, predictor, data, cache_root, config.max_words,
                                splits=["train"],   # what is timed reads train
                                top_k=config.graph_cache_topk)
    seconds = time.perf_counter() - began
    texts = len(data.splits["train"]) * len(data.text_fields)
    per_text = caches[cache].graph_prefix[0] * caches[cache].graph_prefix[1]
    cache_rows[cache] = {
        "top_k": config.graph_cache_topk, "dtype": config.graph_cache_dtype,
        "build_s": seconds, "texts_per_s": texts / seconds,
        "graphs_per_s": texts * per_text / seconds,
        "bytes": sum(c.nbytes for c in caches[cache].caches["train"].values())}
  timed = []
  for spec in specs:
    config, cache = variant_config(base, spec)
    layers = predictor.config.num_graph_layers if config.reads_graphs else None
    model = build_model(config, data, len(vocab), table, layers)
    graphs = caches[cache] if config.reads_graphs else None
    timed.append(TimedTask(spec, ClassificationTask(model, data, vocab, config, graphs)))
  train, b = data.splits["train"], base.optim.batch_size
  order = batch_order(train, b, shuffle=True, seed=0, drop_remainder=True,
                      bucket_batches=base.bucket_batches)[:args.batches]
  eval_order = batch_order(train, 2 * b)[:max(1, args.batches // 2)]
  times = alternate(timed, args.rounds, {"train": lambda t: t.train(order, b),
                                         "answer": lambda t: t.answer(eval_order, 2 * b)})
  trained, answered = sum(len(i) for i in order), sum(len(i) for i in eval_order)
  rows = {spec: {"train_examples_per_s": rate(trained, times[spec]["train"]),
                 "answer_examples_per_s": rate(answered, times[spec]["answer"]),
                 **{f"{m}_s": s for m, s in times[spec].items()}} for spec in specs}
  report(args, base, rows, cache_rows)
  if args.profile:
    for name, parts in print_profiles(timed, order, b).items():
      rows[name]["profile_ms_per_step"] = parts
  record = {"date": time.strftime("%Y-%m-%d %H:%M"), "task": args.task,
            "devices": str(jax.devices()), "examples": len(train), "batches": len(order),
            "max_words": base.max_words, "rounds": args.rounds, "variants": rows,
            "caches": list(cache_rows.values()), "commit": _commit(),
            "cpu_tuning": os.environ.get("GLOMO_JAX_CPU_TUNING", "0")}
  os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
  with open(RESULTS, "a", encoding="utf-8") as f:
    f.write(json.dumps(record) + "\n")
  shutil.rmtree(cache_root, ignore_errors=True)


def report(args, base: ClassificationConfig, rows: dict, cache_rows: dict) -> None:
  """Markdown tables: step and prediction rates with their ratio to the
  first variant's (the baseline), and the caches."""
  ref = next(iter(rows.values()))
  print(f"{args.task}, max_words {base.max_words}, batch {base.optim.batch_size}")
  print("| variant | train examples/s | step ÷ first's | predict examples/s | ÷ first's |")
  print("|---|---|---|---|---|")
  for spec, row in rows.items():
    print(f"| {spec} | {row['train_examples_per_s']:.1f} | "
          f"{ref['train_examples_per_s'] / row['train_examples_per_s']:.3f}× | "
          f"{row['answer_examples_per_s']:.1f} | "
          f"{ref['answer_examples_per_s'] / row['answer_examples_per_s']:.3f}× |")
  dense = cache_rows.get("", {}).get("bytes")
  if cache_rows:
    print("\n| cache | build s | texts/s | graphs/s | bytes | of dense |")
    print("|---|---|---|---|---|---|")
  for row in cache_rows.values():
    share = f"{row['bytes'] / dense:.3f}" if dense else "–"
    name = "dense" if row["top_k"] is None else f"top-{row['top_k']}"
    print(f"| {name}, {row['dtype']} | "
          f"{row['build_s']:.1f} | {row['texts_per_s']:.1f} | {row['graphs_per_s']:.0f} | "
          f"{row['bytes'] / 1e6:.1f} MB | {share} |")


def _commit() -> str | None:
  head = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the checkout
  try:
    return subprocess.run(["git", "-C", head, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return None


if __name__ == "__main__":
  main()
