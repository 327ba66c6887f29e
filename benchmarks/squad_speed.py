r"""SQuAD reader speed: training and prediction questions/s of the baseline
and the graph-transfer variants, on real SQuAD batches, alternating.

  python benchmarks/squad_speed.py \
      --train=../shared/data/squad_v1.1/squad_train-v1.1_rebuilt.json.xz \
      --predictor_export=runs/wiki_cpu/export --rounds=3

What is timed is what the training loop does per batch: build the batch on
the host (`SquadTask.device_batch`: words, characters and, for the graph
variants, the paragraph and question graphs gathered from the disk cache),
then the jitted step (forward, backward, Adam: `SquadTask.loss` and
`optimizer`) or the jitted prediction (`SquadTask.eval_step`: forward and
best span), with the result fetched. Every batch shape is compiled before
timing. The batches are a fixed list drawn as the loop draws them (shuffled,
length-bucketed) from the `:cpu` config's training subset; every variant
times the same list, the variants alternate within each round, and a figure
is the median over rounds. Building the graph cache (the predictor's forward
pass and the alignment to words, once per paragraph and question) is timed
separately, once. Memory: the XLA buffers (temporaries plus arguments) of
the compiled training step for a batch of 32 questions on the longest
passages of the training subset, from `memory_analysis()`. Records go to
benchmarks/results/squad_speed.jsonl.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import optax  # noqa: E402

from experiments.configs import squad as squad_configs  # noqa: E402
from glomo_jax.squad import SquadConfig, SquadTask  # noqa: E402
from glomo_jax.squad.run import build_reader, build_vocabularies, load_squad, squad_graphs  # noqa: E402,E501
from glomo_jax.tasks.batching import batch_order  # noqa: E402
from glomo_jax.tasks.glove import embedding_matrix  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                       "squad_speed.jsonl")


def parse() -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--train", required=True, help="SQuAD train JSON (official layout)")
  p.add_argument("--predictor_export", help="export for the 'embeddings' / 'rnn' variants")
  p.add_argument("--variants", default="baseline,uniform,embeddings")
  p.add_argument("--questions", type=int, default=4000, help="training subset read")
  p.add_argument("--batches", type=int, default=12, help="batches timed per round")
  p.add_argument("--rounds", type=int, default=3)
  return p.parse_args()


class Variant:
  """One variant's task, state and compiled programs."""

  def __init__(self, name: str, base: SquadConfig, splits, vocab, chars, table, graphs):
    self.name = name
    self.config = base.replace(variant=name)
    layers = graphs.graph_prefix[0] // 2 if graphs is not None else None
    model = build_reader(self.config, len(vocab), len(chars), table, layers)
    self.task = SquadTask(model, splits, vocab, chars, self.config,
                          graphs if self.config.reads_graphs else None)
    variables = self.task.init_variables(jax.random.key(0))
    self.params, self.tx = variables["params"], self.task.optimizer()
    self.opt_state = self.tx.init(self.params)
    task = self.task

    def train_step(params, opt_state, batch, rng):
      def loss(p):
        return task.loss({"params": p, "batch_stats": {}}, batch, {"dropout": rng})[0]
      value, grads = jax.value_and_grad(loss)(params)
      updates, opt_state = self.tx.update(grads, opt_state, params)
      return optax.apply_updates(params, updates), opt_state, value

    self.train_step = jax.jit(train_step, donate_argnums=(0, 1))
    self.predict = jax.jit(task.eval_step)

  def train(self, indices) -> float:
    """Seconds for the batches (host batch + step + fetch)."""
    began = time.perf_counter()
    for i, idx in enumerate(indices):
      batch = self.task.device_batch("train", idx, self.config.optim.batch_size)
      self.params, self.opt_state, loss = self.train_step(
          self.params, self.opt_state, batch, jax.random.key(i))
      float(loss)
    return time.perf_counter() - began

  def step_memory_gb(self, idx) -> float:
    """XLA's buffers of the compiled training step on the batch `idx`, GB."""
    batch = self.task.device_batch("train", idx, self.config.optim.batch_size)
    compiled = self.train_step.lower(self.params, self.opt_state, batch,
                                     jax.random.key(0)).compile()
    analysis = compiled.memory_analysis()
    return (analysis.temp_size_in_bytes + analysis.argument_size_in_bytes) / 1e9

  def answer(self, indices) -> float:
    began = time.perf_counter()
    for idx in indices:
      batch = self.task.device_batch("train", idx, self.task.eval_batch_size)
      jax.device_get(self.predict({"params": self.params, "batch_stats": {}}, batch))
    return time.perf_counter() - began


def main():
  args = parse()
  names = args.variants.split(",")
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
  variants = [Variant(n, base, {"train": train}, vocab, chars, table, graphs) for n in names]
  for v in variants:                           # compile every shape before timing
    v.train(order), v.answer(eval_order)
  times = {n: {"train": [], "answer": []} for n in names}
  for r in range(args.rounds):
    for v in variants if r % 2 == 0 else variants[::-1]:
      times[v.name]["train"].append(v.train(order))
      times[v.name]["answer"].append(v.answer(eval_order))
  longest = train.lengths("context").argsort()[::-1][:b]
  memory = {v.name: v.step_memory_gb(longest) for v in variants}
  trained = sum(len(i) for i in order)
  answered = sum(len(i) for i in eval_order)
  rows = {}
  for n in names:
    rows[n] = {"train_questions_per_s": trained / statistics.median(times[n]["train"]),
               "answer_questions_per_s": answered / statistics.median(times[n]["answer"]),
               "train_s": times[n]["train"], "answer_s": times[n]["answer"],
               "longest_step_gb": memory[n]}
  words = int(train.lengths("context")[longest].max())
  print(f"| variant | train questions/s | vs baseline | predict questions/s | vs baseline "
        f"| train step memory at {words} words (GB) |")
  print("|---|---|---|---|---|---|")
  ref = rows.get("baseline", rows[names[0]])
  for n, row in rows.items():
    print(f"| {n} | {row['train_questions_per_s']:.1f} | "
          f"{row['train_questions_per_s'] / ref['train_questions_per_s']:.3f}× | "
          f"{row['answer_questions_per_s']:.1f} | "
          f"{row['answer_questions_per_s'] / ref['answer_questions_per_s']:.3f}× | "
          f"{row['longest_step_gb']:.2f} |")
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
