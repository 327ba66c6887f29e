"""The official SQuAD v1.1 metrics: exact match and F1 over answer tokens.

As in the official evaluate-v1.1.py: both the prediction and each ground
truth are normalised (lower case; punctuation removed, i.e. every character
of `string.punctuation`; the articles a / an / the removed as whole words;
whitespace collapsed), F1 is over their whitespace tokens (bag of tokens,
counting repeats), and a question scores the maximum over its ground truths.
Split-level figures are means over questions, in percent.
"""
from __future__ import annotations

import collections
import re
import string
from typing import Mapping, Sequence

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
  """Lower case, no punctuation, no articles, single spaces (official order)."""
  text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
  return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, truth: str) -> float:
  return float(normalize_answer(prediction) == normalize_answer(truth))


def f1_score(prediction: str, truth: str) -> float:
  """Token F1 of the normalised texts (0 when they share no token)."""
  pred, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
  common = collections.Counter(pred) & collections.Counter(gold)
  same = sum(common.values())
  if same == 0:
    return 0.0
  precision, recall = same / len(pred), same / len(gold)
  return 2 * precision * recall / (precision + recall)


def best_over_truths(metric, prediction: str, truths: Sequence[str]) -> float:
  """max over the ground truths of metric(prediction, truth)."""
  if not truths:
    raise ValueError("a question needs at least one ground-truth answer")
  return max(metric(prediction, truth) for truth in truths)


def squad_scores(predictions: Mapping[str, str], answers: Mapping[str, Sequence[str]]
                 ) -> dict[str, float]:
  """{'exact_match', 'f1'} in percent over every question of `answers`
  ({id: ground truths}); a question without a prediction scores 0 (as in the
  official script), and 'missing' counts them."""
  em = f1 = 0.0
  missing = 0
  for qid, truths in answers.items():
    if qid not in predictions:
      missing += 1
      continue
    em += best_over_truths(exact_match, predictions[qid], truths)
    f1 += best_over_truths(f1_score, predictions[qid], truths)
  n = max(len(answers), 1)
  return {"exact_match": 100.0 * em / n, "f1": 100.0 * f1 / n, "missing": float(missing)}
