r"""SQuAD reader speed: training and prediction questions/s of the baseline
and the graph-transfer variants, with either passage encoder, on real SQuAD
batches, alternating.

  python benchmarks/squad_speed.py \
      --train=../shared/data/squad_v1.1/squad_train-v1.1_rebuilt.json.xz \
      --predictor_export=runs/wiki_cpu/export --rounds=3
  python benchmarks/squad_speed.py --train=... --variants=baseline \
      --encoders=bigru,focused          # the focused passage encoder's cost

A row is a variant with a passage encoder (`model.passage_encoder`; named
VARIANT+focused for the focused one).

What is timed is what the training loop does per batch (`task_timing`):
build the batch on the host (`SquadTask.device_batch`: words, characters
and, for the graph variants, the paragraph and question graphs gathered from
the disk cache) and run the loop's jitted step (forward, backward, Adam), or
the jitted prediction (`SquadTask.eval_step`: forward and best span) with
its result fetched. Every batch shape is compiled before
timing. The batches are a fixed list drawn as the loop draws them (shuffled,
length-bucketed) from the `:cpu` config's training subset; every variant
times the same list, the variants alternate within each round, and a figure
is the median over rounds. Building the graph cache (the predictor's forward
pass and the alignment to words, once per paragraph and question) is timed
separately, once. Memory: the XLA buffers (temporaries plus arguments) of
the compiled training step for a batch of 32 questions on the longest
passages of the training subset, from `memory_analysis()`. `--profile`
then traces each variant's training steps (the batches of the commonest
shape) and prints their host-thread time by part of the model. Records go
to benchmarks/results/squad_speed.jsonl.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402

from benchmarks.task_timing import TimedTask, alternate, print_profiles, rate  # noqa: E402
from experiments.configs import squad as squad_configs  # noqa: E402
from glomo_jax.squad import SquadConfig, SquadTask  # noqa: E402
from glomo_jax.squad.run import build_reader, build_vocabularies, load_squad, squad_graphs  # noqa: E402,E501
from glomo_jax.train.batches import batch_order  # noqa: E402
from glomo_jax.text.glove import embedding_matrix  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                       "squad_speed.jsonl")


def parse() -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--train", required=True, help="SQuAD train JSON (official layout)")
  p.add_argument("--predictor_export", help="export for the 'embeddings' / 'rnn' variants")
  p.add_argument("--variants", default="baseline,uniform,embeddings")
  p.add_argument("--encoders", default="bigru",
                 help="passage encoders (model.passage_encoder), each with every variant")
  p.add_argument("--questions", type=int, default=4000, help="training subset read")
  p.add_argument("--batches", type=int, default=12, help="batches timed per round")
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--profile", action="store_true",
                 help="after the timing, trace each variant's training steps and print "
                      "their thread time by part of the model (TimedTask.profile)")
  return p.parse_args()


def main():
  args = parse()
  names = args.variants.split(",")
  encoders = args.encoders.split(",")
  raw = squad_configs.get_config("cpu")
  raw.files.train, raw.max_train_questions, raw.val_questions = args.train, args.questions, 200
  raw.predictor_export = args.predictor_export
  base = SquadConfig.from_dict(raw.to_dict())
  splits, _ = load_squad(base)
  vocab, chars, _ = build_vocabularies(splits, base)
  table, _ = embedding_matrix(vocab, None, dim=base.model.embed_dim)
  graphs, graph_seconds = None, None
  cache_root = tempfile.mkdtemp(prefix="squad_graphs_")     # removed at the end
  if any(base.replace(variant=n).reads_graphs for n in names):
    from glomo_jax.export import load_graph_predictor  # noqa: PLC0415
    predictor = load_graph_predictor(args.predictor_export)
    began = time.perf_counter()
    graphs = squad_graphs(cache_root, predictor, {"train": splits["train"]}, base)
    graph_seconds = time.perf_counter() - began
  train = splits["train"]
  b = base.optim.batch_size
  order = batch_order(train, b, shuffle=True, seed=0, drop_remainder=True,
                      bucket_batches=base.bucket_batches)[:args.batches]
  eval_order = batch_order(train, 2 * b)[:max(1, args.batches // 2)]
  timed = []
  for n in names:
    for encoder in encoders:
      config = base.replace(variant=n, model=dataclasses.replace(base.model,
                                                                 passage_encoder=encoder))
      config.check()
      layers = graphs.graph_prefix[0] // 2 if graphs is not None else None
      model = build_reader(config, len(vocab), len(chars), table, layers)
      task = SquadTask(model, {"train": train}, vocab, chars, config,
                       graphs if config.reads_graphs else None)
      timed.append(TimedTask(n if encoder == "bigru" else f"{n}+{encoder}", task))
  times = alternate(timed, args.rounds,
                    {"train": lambda t: t.train(order, b),
                     "answer": lambda t: t.answer(eval_order, t.task.eval_batch_size)})
  longest = train.lengths("context").argsort()[::-1][:b]
  trained = sum(len(i) for i in order)
  answered = sum(len(i) for i in eval_order)
  rows = {}
  for t in timed:
    n = t.name
    rows[n] = {"train_questions_per_s": rate(trained, times[n]["train"]),
               "answer_questions_per_s": rate(answered, times[n]["answer"]),
               "train_s": times[n]["train"], "answer_s": times[n]["answer"],
               "longest_step_gb": t.step_memory_gb(longest, b)}
  words = int(train.lengths("context")[longest].max())
  print(f"| variant | train questions/s | vs baseline | predict questions/s | vs baseline "
        f"| train step memory at {words} words (GB) |")
  print("|---|---|---|---|---|---|")
  ref = rows.get("baseline", rows[timed[0].name])
  for n, row in rows.items():
    print(f"| {n} | {row['train_questions_per_s']:.1f} | "
          f"{row['train_questions_per_s'] / ref['train_questions_per_s']:.3f}× | "
          f"{row['answer_questions_per_s']:.1f} | "
          f"{row['answer_questions_per_s'] / ref['answer_questions_per_s']:.3f}× | "
          f"{row['longest_step_gb']:.2f} |")
  if args.profile:
    for name, parts in print_profiles(timed, order, b).items():
      rows[name]["profile_ms_per_step"] = parts
  lengths = [int(train.lengths("context")[i].max()) for i in order]
  if graph_seconds is not None:
    n_par, n_q = len(train.paragraphs), len(train)
    print(f"graph cache: {n_par} paragraphs + {n_q} questions in {graph_seconds:.1f} s "
          f"({(n_par + n_q) / graph_seconds:.1f} texts/s)")
  record = {"date": time.strftime("%Y-%m-%d %H:%M"), "devices": str(jax.devices()),
            "batches": len(order), "padded_context_words": lengths, "rounds": args.rounds,
            "graph_cache_s": graph_seconds, "graph_texts": len(train.paragraphs) + len(train),
            "variants": rows, "cpu_tuning": os.environ.get("GLOMO_JAX_CPU_TUNING", "0")}
  os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
  with open(RESULTS, "a", encoding="utf-8") as f:
    f.write(json.dumps(record) + "\n")
  shutil.rmtree(cache_root, ignore_errors=True)


if __name__ == "__main__":
  main()
