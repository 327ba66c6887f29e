r"""How fast word graphs of a dataset are computed (the graph cache's build),
phase by phase: encoding (host), predictor, alignment, fetch, float16 store.

  python benchmarks/graph_cache_speed.py --data=../shared/data/imdb/imdb_train.jsonl.gz \
      (--export=runs/wiki_cpu/export | --model=paper --tokenizer=T.model) \
      [--num=512 --max_words=128 --batch=32 --pad_multiple=0]

The texts are read as the cache reads them (raw text, pieces to words by
characters), sorted by words as the cache sorts them, in batches of `batch`,
padded as the cache pads them on this backend (`--pad_multiple` 0; or pieces
to that multiple).
`--model` times an untrained predictor of that size (speed does not depend
on the weights). Two passes: cold (each distinct (P, W) shape compiles the
predictor and the alignment once) and warm (nothing compiles). Prints one
JSON line with, per pass: examples/s, graphs/s (examples × 2L·K), the
shapes and the seconds of each phase. `--top_k=8,16,32:uint8` adds the bytes
of the dense cache and of top-k caches of those texts (float16 weights, or
uint8 levels after a colon), and the weight top-k keeps.
`--baseline_repo=DIR` then times the alignment against DIR's
(`glomo_jax/graphs/align.py` of another checkout, e.g. a `git worktree` of
an older commit): warm passes alternating between the two, `--rounds` each,
and the ratio of the medians of their alignment seconds (DIR's ÷ this one's).
`--build_rounds=N` with `--baseline_repo` instead times the whole build
(`cached_word_graphs`, dense float16) of each checkout in fresh processes,
alternating, N each: a process builds once to compile, then once timed.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np


def load(args):
  from glomo_jax import ModelConfig  # noqa: PLC0415
  from glomo_jax.data import Tokenizer  # noqa: PLC0415
  from glomo_jax.export import load_graph_predictor  # noqa: PLC0415
  from glomo_jax.export.predictor import ExportedGraphPredictor  # noqa: PLC0415
  if args.export:
    return load_graph_predictor(args.export)
  tokenizer = Tokenizer.load(args.tokenizer)
  config = {"paper": ModelConfig.paper}[args.model](vocab_size=tokenizer.vocab_size,
                                                    dtype=args.dtype)
  return ExportedGraphPredictor.untrained(config, tokenizer)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--data", required=True)
  parser.add_argument("--field", default="text")
  parser.add_argument("--export")
  parser.add_argument("--model", choices=["paper"])
  parser.add_argument("--tokenizer")
  parser.add_argument("--dtype", default="bfloat16")
  parser.add_argument("--num", type=int, default=512)
  parser.add_argument("--max_words", type=int, default=128)
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--pad_multiple", type=int, default=0,
                      help="Pieces padded to this multiple; 0: the backend's, as the cache "
                           "(glomo_jax.graphs.shapes.piece_multiple)")
  parser.add_argument("--top_k", default="",
                      help="Comma-separated k or k:dtype (dtype float16, float32 or uint8): also "
                           "build the dense cache and a top-k cache of each, and report "
                           "their bytes and the weight kept.")
  parser.add_argument("--baseline_repo", metavar="DIR",
                      help="Also time DIR's alignment against this checkout's.")
  parser.add_argument("--rounds", type=int, default=3,
                      help="Warm passes of each alignment with --baseline_repo.")
  parser.add_argument("--build_rounds", type=int, default=0,
                      help="With --baseline_repo: time whole builds instead, N a checkout.")
  parser.add_argument("--build_worker", metavar="DIR", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.build_worker:
    return build_worker(args)
  if args.build_rounds:
    return print(json.dumps(compare_builds(args)))
  from glomo_jax.graphs.shapes import piece_multiple  # noqa: PLC0415

  predictor = load(args)
  texts, words, spans = read_texts(args)
  lengths = np.array([min(len(s), args.max_words) for s in spans])
  order = np.argsort(lengths, kind="stable")
  config = predictor.config
  per = 2 * config.num_graph_layers * config.num_heads
  result = {"device": str(jax.devices()[0].device_kind), "model_dim": config.dim,
            "graphs_per_text": per, "examples": len(order),
            "pad_multiple": args.pad_multiple or piece_multiple(), "max_words": args.max_words}
  for name in ("cold", "warm"):      # cold: every shape compiles; warm: none does
    seconds, phases, shapes = one_pass(args, predictor, texts, spans, lengths, order)
    result[name] = {"seconds": round(seconds, 2),
                    "examples_per_s": round(len(order) / seconds, 1),
                    "graphs_per_s": round(per * len(order) / seconds, 1), "shapes": shapes,
                    "phases_s": {k: round(v, 2) for k, v in phases.items()}}
  if args.baseline_repo:
    result["alignment_against_baseline"] = compare_alignment(
        args, predictor, texts, spans, lengths, order)
  if args.top_k:
    result["caches"] = cache_sizes(args, predictor, texts, words, spans)
  print(json.dumps(result))


def read_texts(args):
  """(texts, words, word spans) of the first --num records, as the tasks read them."""
  from glomo_jax.text.readers import read_jsonl  # noqa: PLC0415
  from glomo_jax.text.words import plain_text, tokenize_with_offsets  # noqa: PLC0415
  records = [r for _, r in zip(range(args.num), read_jsonl(args.data))]
  texts = [plain_text(str(r[args.field])) for r in records]
  tokenized = [tokenize_with_offsets(t) for t in texts]
  return (texts, [w for w, _ in tokenized],
          [np.asarray(s).reshape(-1, 2) for _, s in tokenized])


def build_worker(args) -> None:
  """In a fresh process, with the package of checkout --build_worker: one
  build to compile, one timed; prints its seconds and the sha256 of the
  cache's files (graphs, offsets, lengths)."""
  import sys  # noqa: PLC0415
  import tempfile  # noqa: PLC0415
  sys.path.insert(0, os.path.abspath(args.build_worker))
  import glomo_jax  # noqa: PLC0415
  from glomo_jax.graphs.cache import cached_word_graphs  # noqa: PLC0415
  predictor = load(args)
  texts, words, spans = read_texts(args)
  seconds = None
  with tempfile.TemporaryDirectory() as root:
    for name in ("compile", "timed"):
      began = time.perf_counter()
      cache = cached_word_graphs(os.path.join(root, name), predictor, words, args.max_words,
                                 texts=texts, word_spans=spans, batch_size=args.batch)
      seconds = time.perf_counter() - began
    digest = hashlib.sha256()
    for name in ("graphs.npy", "offsets.npy", "lengths.npy"):
      with open(os.path.join(cache.path, name), "rb") as f:
        digest.update(f.read())
  print(json.dumps({"seconds": round(seconds, 3), "sha256": digest.hexdigest(),
                    "package": os.path.dirname(os.path.abspath(glomo_jax.__file__))}))


def compare_builds(args) -> dict:
  """Whole-build seconds, this checkout's and --baseline_repo's, in fresh
  processes alternating (baseline first), --build_rounds each."""
  import subprocess  # noqa: PLC0415
  import sys  # noqa: PLC0415
  if not args.baseline_repo:
    raise SystemExit("--build_rounds needs --baseline_repo")
  here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  argv = [a for a in sys.argv[1:] if not a.startswith(("--build_rounds", "--baseline_repo"))]
  seconds, digests = {"baseline": [], "this": []}, set()
  for _ in range(args.build_rounds):
    for name, repo in (("baseline", args.baseline_repo), ("this", here)):
      out = subprocess.run([sys.executable, os.path.abspath(__file__), *argv,
                            f"--build_worker={repo}"], capture_output=True, text=True,
                           check=True).stdout
      result = json.loads(out.strip().splitlines()[-1])
      if result["package"] != os.path.join(os.path.abspath(repo), "glomo_jax"):
        raise SystemExit(f"the {name} process imported {result['package']}, not {repo}'s")
      seconds[name].append(result["seconds"])
      digests.add(result["sha256"])
  return {"build_s": seconds, "same_files": len(digests) == 1, "examples": args.num,
          "baseline_over_this": round(
              float(np.median(seconds["baseline"]) / np.median(seconds["this"])), 3)}


def cache_sizes(args, predictor, texts, words, spans) -> list[dict]:
  """Builds the dense cache and a top-k cache of each k in a temporary
  directory: bytes, the ratio to dense, build seconds, and for top-k the
  weight its kept sources had (mean and minimum over the nonzero rows)."""
  import tempfile  # noqa: PLC0415
  from glomo_jax.graphs.cache import cached_word_graphs  # noqa: PLC0415
  out = []
  with tempfile.TemporaryDirectory() as root:
    for spec in [""] + args.top_k.split(","):
      k, _, dtype = spec.partition(":")
      k, dtype = (int(k) if k else None), dtype or "float16"
      t = time.perf_counter()
      cache = cached_word_graphs(root, predictor, words, args.max_words, texts=texts,
                                 word_spans=spans, batch_size=args.batch, top_k=k,
                                 dtype=dtype)
      row = {"top_k": k, "dtype": dtype, "bytes": cache.nbytes,
             "build_s": round(time.perf_counter() - t, 2)}
      if k is not None:
        row["of_dense"] = round(cache.nbytes / out[0]["bytes"], 4)
        row["mass_kept"] = {n: round(v, 4) if isinstance(v, float) else v
                            for n, v in cache.meta["mass_kept"].items()}
      out.append(row)
  return out


def compare_alignment(args, predictor, texts, spans, lengths, order) -> dict:
  """Alignment seconds of warm passes, this checkout's and --baseline_repo's
  alternating (the baseline's first pass compiles and is not counted)."""
  from glomo_jax.graphs.align import align_graphs_jit  # noqa: PLC0415
  path = os.path.join(args.baseline_repo, "glomo_jax", "graphs", "align.py")
  if not os.path.exists(path):      # checkouts before issue 61 kept it in transfer/
    path = os.path.join(args.baseline_repo, "glomo_jax", "transfer", "align.py")
  spec = importlib.util.spec_from_file_location("baseline_align", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)     # its own imports resolve to this checkout's package
  # the jitted alignment: align_graphs_jit, or _align_jit in checkouts before issue 46
  aligns = {"this": align_graphs_jit,
            "baseline": getattr(module, "align_graphs_jit", None) or module._align_jit}
  one_pass(args, predictor, texts, spans, lengths, order, aligns["baseline"])
  seconds = {name: [] for name in aligns}
  for _ in range(args.rounds):
    for name, align in aligns.items():
      seconds[name].append(round(one_pass(args, predictor, texts, spans, lengths, order,
                                          align)[1]["align"], 3))
  return {**seconds, "baseline_over_this": round(
      float(np.median(seconds["baseline"]) / np.median(seconds["this"])), 3)}


def one_pass(args, predictor, texts, spans, lengths, order, align=None):
  """One pass over the texts as the cache builds them: (seconds, seconds by
  phase, distinct (P, W) shapes). `align`: the jitted alignment (default
  this checkout's)."""
  from glomo_jax.graphs.align import align_graphs_jit  # noqa: PLC0415
  from glomo_jax.graphs.encode import encode_texts  # noqa: PLC0415
  from glomo_jax.graphs.shapes import batch_width  # noqa: PLC0415
  align = align or align_graphs_jit
  phases = dict(encode=0.0, predict=0.0, align=0.0, fetch=0.0, store=0.0)
  shapes = set()
  began = time.perf_counter()
  for start in range(0, len(order), args.batch):
    rows = order[start:start + args.batch]
    width = batch_width(lengths[rows], args.max_words)
    t = time.perf_counter()
    tokens, mask, unit, _ = encode_texts(predictor.tokenizer, [texts[i] for i in rows],
                                         [spans[i][:width] for i in rows], width,
                                         pad_multiple=args.pad_multiple or None)
    t, phases["encode"] = time.perf_counter(), phases["encode"] + time.perf_counter() - t
    shapes.add((tokens.shape[1], width))
    graphs = predictor.predict(predictor.variables, tokens, mask).block_until_ready()
    t, phases["predict"] = time.perf_counter(), phases["predict"] + time.perf_counter() - t
    units = align(graphs, jnp.asarray(unit), num_units=width,
                  self_loops=False).block_until_ready()
    t, phases["align"] = time.perf_counter(), phases["align"] + time.perf_counter() - t
    values = np.asarray(jax.device_get(units), np.float32)
    t, phases["fetch"] = time.perf_counter(), phases["fetch"] + time.perf_counter() - t
    for row, i in enumerate(rows):
      n = int(lengths[i])
      values[row, ..., :n, :n].astype(np.float16)
    phases["store"] += time.perf_counter() - t
  return time.perf_counter() - began, phases, len(shapes)


if __name__ == "__main__":
  main()
