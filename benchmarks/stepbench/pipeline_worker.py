"""The input-pipeline job: glomo_jax's corpus, tokenizer and window batches
timed on one core (``pretrain_step.py --worker pipeline``)."""
from __future__ import annotations

import glob
import os
import tempfile
import time

from stepbench.machine import jax_info, rss_mb


def worker_pipeline(args) -> dict:
  """Input pipeline throughput on one core (synthetic corpus, wiki_text)."""
  core = min(os.sched_getaffinity(0))
  os.sched_setaffinity(0, {core})
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
