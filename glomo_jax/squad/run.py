"""A SQuAD run as one library call, `run_squad(config, workdir)` (questions
to a finished run: `Answerer`, in answer.py).

`run_squad`: reads the data (`load_squad`: train, validation carved from it
by article, dev), builds the word and character vocabularies (saved in the
workdir) and the fixed GloVe table, the paragraph and question graphs for
the 'embeddings' / 'rnn' variants (`squad_graphs`), trains the reader on the
training loop (`SquadTask`: checkpoints, exact resume, best variables by
validation F1) and writes `<workdir>/results.json` (EM / F1 of validation
and dev, speeds, the cuts, the curve) and `predictions.json` (dev).
"""
from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Any

import jax
import numpy as np

from glomo_jax.downstream.run import load_predictor, train_and_report
from glomo_jax.downstream.task import VALIDATION
from glomo_jax.graphs.cache import cached_word_graphs
from glomo_jax.graphs.task_graphs import OnTheFlyGraphs, TaskGraphs
from glomo_jax.squad.config import SquadConfig
from glomo_jax.squad.data import (SquadSplit, carve_validation, paragraph_subset,
                                  read_squad_json, read_squad_tfds)
from glomo_jax.squad.model import SquadReader
from glomo_jax.squad.task import DEV, SquadTask
from glomo_jax.text.fields import word_table
from glomo_jax.text.glove import read_glove
from glomo_jax.text.layers import embedding_initializer
from glomo_jax.text.words import Vocabulary
from glomo_jax.train.workdir import holding_workdir

logger = logging.getLogger("glomo_jax.squad")

VOCAB_FILE, CHARS_FILE = "vocab.json", "chars.json"


def load_squad(config: SquadConfig) -> tuple[dict[str, SquadSplit], dict[str, Any]]:
  """({'train', 'validation', 'dev' (when given)}: SquadSplit, report).

  'train' keeps only questions whose answer lies inside the cut passage;
  report counts the questions left out and those whose passage or question
  is cut (nothing is cut silently)."""
  if config.source == "files":
    read = read_squad_json
    locations = {"train": config.files.train, DEV: config.files.dev}
  else:
    t = config.tfds
    read = lambda split: read_squad_tfds(split, data_dir=t.data_dir,  # noqa: E731
                                         reader=t.reader, download=t.download)
    locations = {"train": "train", DEV: "validation"}
  full = read(locations["train"])
  train, validation = carve_validation(full, config.val_questions, config.data_seed)
  splits = {"train": paragraph_subset(train, config.max_train_questions, config.data_seed),
            VALIDATION: validation}
  if locations[DEV]:
    splits[DEV] = paragraph_subset(read(locations[DEV]), config.max_dev_questions,
                                   config.data_seed)
  report: dict[str, Any] = {"questions": {}, "cut_passages": {},
                            "questions_on_cut_passages": {}, "cut_questions": {}}
  for name, split in splits.items():
    report["questions"][name] = len(split)
    cap = config.max_context_words or np.inf
    report["cut_passages"][name] = sum(len(p.words) > cap for p in split.paragraphs)
    report["questions_on_cut_passages"][name] = int((split.lengths("context") > cap).sum())
    report["cut_questions"][name] = int(
        (split.lengths("question") > (config.max_question_words or np.inf)).sum())
  trainable = splits["train"].trainable(config.max_context_words)
  report["train_left_out"] = len(splits["train"]) - len(trainable)
  splits["train"] = trainable
  for name, split in splits.items():
    logger.info("SQuAD %s: %s", name, split.summary())
  logger.info("left out of training (no answer span inside the passage): %d; cut: "
              "passages %s (of questions %s), questions %s", report["train_left_out"],
              report["cut_passages"], report["questions_on_cut_passages"],
              report["cut_questions"])
  return splits, report


def build_vocabularies(splits: dict[str, SquadSplit], config: SquadConfig
                       ) -> tuple[Vocabulary, Vocabulary, tuple[dict, int] | None]:
  """(words, characters, GloVe vectors read). Words: the training words seen
  `min_count` times, plus every word of any split that the GloVe file has
  (the table is fixed, so those vectors carry over unchanged). Characters:
  those seen `char_min_count` times in the training words as written. The
  GloVe file is read once, for every word of every split (None: no file)."""
  train = splits["train"]
  texts = [p.words for p in train.paragraphs] + [q.words for q in train.questions]
  vocab = Vocabulary.build(texts, min_count=config.min_count)
  vectors = None
  if config.glove_path:
    words = {w for split in splits.values() for p in split.paragraphs for w in p.words}
    words |= {w for split in splits.values() for q in split.questions for w in q.words}
    vectors = read_glove(config.glove_path, words)
    extra = sorted(set(vectors[0]) - set(vocab.words))
    vocab = Vocabulary(vocab.words[2:] + extra, list(vocab.counts[2:]) + [0] * len(extra))
  tokens = [t for p in train.paragraphs for t in p.tokens()]
  tokens += [t for q in train.questions for t in q.tokens]
  chars = Vocabulary.build(([ch for ch in t[:config.max_word_chars]] for t in tokens),
                           min_count=config.char_min_count)
  return vocab, chars, vectors


def squad_graphs(root: str, predictor, splits: dict[str, SquadSplit], config: SquadConfig
                 ) -> TaskGraphs | OnTheFlyGraphs:
  """The graphs of every split: 'context' per paragraph (shared by its
  questions), 'question' per question; cached on disk under `root`, or
  computed per batch (`graphs_on_the_fly`). With graph_text 'raw' the
  predictor reads the passage and question texts as written."""
  fields = {name: {"context": split.paragraphs, "question": split.questions}
            for name, split in splits.items()}
  words = {name: {f: [u.words for u in units] for f, units in by_field.items()}
           for name, by_field in fields.items()}
  raw = None
  if config.graph_text == "raw":
    raw = {name: {"context": ([p.context for p in by_field["context"]],
                              [p.spans for p in by_field["context"]]),
                  "question": ([q.text for q in by_field["question"]],
                               [q.spans for q in by_field["question"]])}
           for name, by_field in fields.items()}
  if config.graphs_on_the_fly:
    return OnTheFlyGraphs(predictor, words, self_loops=config.graph_self_loops, raw=raw)
  caps = {"context": config.max_context_words, "question": config.max_question_words}
  caches = {}
  for name in splits:
    caches[name] = {}
    for field, cap in caps.items():
      texts = words[name][field]
      longest = max(1, max(map(len, texts), default=1))
      text = {} if raw is None else dict(zip(("texts", "word_spans"), raw[name][field]))
      caches[name][field] = cached_word_graphs(
          root, predictor, texts, min(longest, cap) if cap else longest,
          **config.graph_cache_options(), **text)
  return TaskGraphs(caches)


def build_reader(config: SquadConfig, vocab_size: int, num_chars: int, table=None,
                 predictor_layers: int | None = None) -> SquadReader:
  """The variant's SquadReader; `table` [V, E] initialises the fixed word table."""
  m = config.model
  extra = {} if table is None else {"embedding_init": embedding_initializer(table)}
  return SquadReader(vocab_size=vocab_size, num_chars=num_chars, variant=config.variant,
                     options=dataclasses.replace(
                         m, transfer=m.transfer.for_predictor(predictor_layers)),
                     **extra)


@holding_workdir
def run_squad(config: SquadConfig, workdir: str, *, devices=None,
              compilation_cache_dir: str | None = None) -> dict[str, Any]:
  """One SQuAD run (module docstring); returns (and writes) results.json's
  dict. Rerunning it in the same workdir resumes the run, or, once
  finished, evaluates again without training."""
  config.check()
  start = time.time()
  os.makedirs(workdir, exist_ok=True)
  splits, report = load_squad(config)
  vocab, chars, vectors = build_vocabularies(splits, config)
  table, coverage = word_table(config, vocab, config.model, config.data_seed, vectors)
  logger.info("vocabulary %d words, %d characters; %s", len(vocab), len(chars), coverage)
  if jax.process_index() == 0:
    vocab.save(os.path.join(workdir, VOCAB_FILE))
    chars.save(os.path.join(workdir, CHARS_FILE))

  predictor = graphs = None
  graph_seconds = 0.0
  if config.reads_graphs:
    predictor = load_predictor(config.predictor_export)
    root = config.graph_cache_root(workdir)
    t0 = time.time()
    graphs = squad_graphs(root, predictor, splits, config)
    graph_seconds = time.time() - t0
    if not config.graphs_on_the_fly:
      logger.info("graph cache %s ready (%.1f s)", root, graph_seconds)

  model = build_reader(config, len(vocab), len(chars), table,
                       predictor.config.num_graph_layers if predictor is not None else None)
  task = SquadTask(model, splits, vocab, chars, config, graphs)

  def scores(summary: dict) -> dict:
    trained = summary["step"] * config.optim.batch_size
    return {"validation": summary["results"].get(VALIDATION),
            "dev": summary["results"].get(DEV),
            # with compiles and evaluations; benchmarks/squad_speed.py times the steps alone
            "train_questions_per_s": trained / max(summary["train_seconds"], 1e-9),
            "graph_cache_s": graph_seconds, **report, "vocabulary": len(vocab),
            "characters": len(chars), "glove": str(coverage)}
  return train_and_report(task, workdir, scores, start=start, predictor=predictor,
                          devices=devices, compilation_cache_dir=compilation_cache_dir)
