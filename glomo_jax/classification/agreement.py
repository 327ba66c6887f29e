"""Agreement judgements on the built-in synthetic language: a downstream task
that needs no download (the demo's transfer run, and tests of graph transfer).

One example is one sentence of the synthetic language
(`glomo_jax.data.synthetic`), label 1 ("agrees") as generated, or label 0
("violates") after one of its verbs, drawn at random, was put in the other
number ("the dogs near the old cat *sees* ..."). A verb's subject can be up to
`max_span` words back with attractor nouns of either number in between, so a
classifier has to find each verb's subject: exactly the arcs a pretrained
graph predictor may have learned.

Sentences come from documents the pretraining corpus never contained:
documents `first_document`, `first_document + 1`, … of the same synthetic
configuration (by default right after its `num_documents`). Labels are
balanced by construction (each sentence is violated with probability ½,
seeded).
"""
from __future__ import annotations

import random

import numpy as np

from glomo_jax.data.synthetic import ARC_AGREEMENT, VERBS, SyntheticConfig, generate_document
from glomo_jax.text.splits import Split, TaskData

AGREEMENT_LABELS = ("violates", "agrees")
_OTHER_NUMBER = {**{s: p for s, p in VERBS}, **{p: s for s, p in VERBS}}


def sentences_with_verbs(document) -> list[tuple[list[str], list[int], np.ndarray]]:
  """(words, verb positions, arcs) of each sentence of a synthetic document
  that has at least one subject–verb agreement arc; arcs: int32 [n, 2] of
  every planted arc inside the sentence, (target, source) positions within it."""
  verbs_at = {int(t) for (t, _), k in zip(document.arcs, document.kinds)
              if k == ARC_AGREEMENT}
  arcs = np.asarray(document.arcs).reshape(-1, 2)
  out, start = [], 0
  for i, word in enumerate(document.words):
    if word == ".":
      verbs = [t - start for t in range(start, i) if t in verbs_at]
      if verbs:
        inside = (arcs[:, 1] >= start) & (arcs[:, 0] <= i)
        out.append((list(document.words[start:i + 1]), verbs,
                    (arcs[inside] - start).astype(np.int32)))
      start = i + 1
  return out


def agreement_split(synthetic: SyntheticConfig, first_document: int, size: int,
                    seed: int) -> tuple[Split, int]:
  """`size` labelled sentences from documents first_document, … (in order).

  Returns (split, the first document not used).
  """
  if size < 1:
    raise ValueError(f"an agreement split needs at least 1 example, got {size}")
  rng = random.Random(f"glomo-agreement:{seed}:{first_document}")
  texts: list[list[str]] = []
  labels: list[int] = []
  arcs: list[np.ndarray] = []
  doc = first_document
  while len(texts) < size:
    for words, verbs, sentence_arcs in sentences_with_verbs(generate_document(synthetic, doc)):
      if len(texts) == size:
        break
      agrees = rng.random() < 0.5
      if not agrees:
        at = rng.choice(verbs)
        words[at] = _OTHER_NUMBER[words[at]]
      texts.append(words)
      labels.append(int(agrees))
      arcs.append(sentence_arcs)
    doc += 1
  return Split({"text": texts}, np.asarray(labels, np.int32), {"text": arcs}), doc


def load_agreement_task(num_train: int = 2000, num_validation: int = 500,
                        num_test: int = 1000, *,
                        synthetic: SyntheticConfig = SyntheticConfig(),
                        first_document: int | None = None, seed: int = 0) -> TaskData:
  """The agreement task: splits train, validation and test (disjoint
  documents, in that order, from `first_document` on; default: the first
  document after the pretraining corpus `synthetic`)."""
  doc = synthetic.num_documents if first_document is None else first_document
  splits = {}
  for name, size in (("train", num_train), ("validation", num_validation),
                     ("test", num_test)):
    splits[name], doc = agreement_split(synthetic, doc, size, seed)
  return TaskData("agreement", splits, ("text",), AGREEMENT_LABELS, ("test",))

