"""Answering questions with a finished SQuAD run: `Answerer(workdir)`.

Reads the run's config.json, vocabularies and best variables (<workdir>/best
at the step results.json names; a run still training answers with its
newest best so far), and for
the graph variants its predictor export, whose graphs of the passage and the
question are computed on the fly.
"""
from __future__ import annotations

import json
import logging
import os
from typing import NamedTuple

import jax
import numpy as np

from glomo_jax.downstream.best import abstract_variables, restore_best
from glomo_jax.downstream.run import load_predictor
from glomo_jax.focused.model import evaluation_rng
from glomo_jax.squad.batching import make_squad_batch
from glomo_jax.squad.config import SquadConfig
from glomo_jax.squad.data import Paragraph, Question, SquadSplit
from glomo_jax.squad.run import CHARS_FILE, VOCAB_FILE, build_reader, squad_graphs
from glomo_jax.squad.spans import best_span
from glomo_jax.text.words import Vocabulary, tokenize_with_offsets
from glomo_jax.train.run_config import CONFIG_FILE


class Answer(NamedTuple):
  text: str             # the passage text of the span
  start: int            # its first and last character + 1 in the passage
  end: int
  probability: float    # P(start) · P(end) under the reader


class Answerer:
  """The best variables of a SQuAD run, ready to answer.

  Raises:
    FileNotFoundError: `workdir` holds no SQuAD run, or no best variables yet.
  """

  def __init__(self, workdir: str):
    missing = [f for f in (CONFIG_FILE, VOCAB_FILE, CHARS_FILE)
               if not os.path.isfile(os.path.join(workdir, f))]
    if missing:
      raise FileNotFoundError(f"{workdir} is not a SQuAD run (no {', '.join(missing)}): "
                              "pass the --workdir of experiments.squad")
    with open(os.path.join(workdir, CONFIG_FILE), encoding="utf-8") as f:
      self.config = SquadConfig.from_dict(json.load(f))
    self.vocab = Vocabulary.load(os.path.join(workdir, VOCAB_FILE))
    self.chars = Vocabulary.load(os.path.join(workdir, CHARS_FILE))
    self.predictor = None
    layers = None
    if self.config.reads_graphs:
      self.predictor = load_predictor(self.config.predictor_export)
      layers = self.predictor.config.num_graph_layers
    self.model = build_reader(self.config, len(self.vocab), len(self.chars),
                              predictor_layers=layers)
    self.variables = self._restore(workdir)
    self._apply = jax.jit(self.model.apply, static_argnames="train")

  def _restore(self, workdir: str) -> dict:
    batch = self._batch("a b", "a")
    inputs = {k: v for k, v in batch.items() if k not in ("start", "end", "weight")}
    return restore_best(workdir, abstract_variables(self.model, **inputs), "the reader")

  def _batch(self, passage: str, question: str) -> dict:
    paragraph = Paragraph.from_text("", passage)
    q = Question.from_text("q", question, 0, [""], None)
    split = SquadSplit([paragraph], [q])
    self._paragraph = paragraph
    batch = make_squad_batch(split, [0], self.vocab, self.chars,
                             max_word_chars=self.config.max_word_chars,
                             max_context_words=self.config.max_context_words,
                             max_question_words=self.config.max_question_words,
                             length_multiple=self.config.length_multiple)
    del batch["index"], batch["paragraph"]
    if self.predictor is not None:
      graphs = squad_graphs("", self.predictor, {"": split},
                            self.config.replace(graphs_on_the_fly=True))
      for field in ("context", "question"):
        length = batch[field].shape[1]
        batch[field + "_graphs"] = graphs.batch(
            "", field, np.zeros(1, np.int64), batch[field + "_mask"].sum(1), length)
    return batch

  def answer(self, passage: str, question: str) -> Answer:
    """The reader's best span (at most `max_span` words) of `passage`. The
    run's `max_context_words` (if any) applies: a longer passage is read up
    to it (logged)."""
    if not tokenize_with_offsets(passage)[0] or not tokenize_with_offsets(question)[0]:
      raise ValueError("both the passage and the question need some words")
    batch = self._batch(passage, question)
    cap = self.config.max_context_words
    if cap is not None and len(self._paragraph.words) > cap:
      logging.warning("the passage has %d words; the run reads the first %d "
                      "(max_context_words)", len(self._paragraph.words), cap)
    inputs = {k: v for k, v in batch.items() if k not in ("start", "end", "weight")}
    rngs = None
    focused = self.config.model.focused
    if self.config.model.is_focused and focused.test_gate == "sample":
      rngs = {"gate": evaluation_rng(self.config.seed, 0)}   # the same answer every time
    start, end = self._apply(self.variables, **inputs, train=False, rngs=rngs)
    first, last, score = best_span(jax.nn.log_softmax(start), jax.nn.log_softmax(end),
                                   batch["context_mask"], self.config.max_span)
    first, last = int(first[0]), int(last[0])
    p = self._paragraph
    return Answer(p.text_of(first, last), int(p.spans[first, 0]), int(p.spans[last, 1]),
                  float(np.exp(score[0])))
