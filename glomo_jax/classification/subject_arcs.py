"""From the row before a verb, how much forward graph weight falls on the
verb's gold subject (a treebank's verb-number instances,
`glomo_jax.classification.verb_number_sources.gold_example`).

Under GLoMo's objective the features of the word before a verb must predict
the verb, so that row needs the subject (and its number). For each instance
whose subject is d ≥ 2 words back (at d = 1 the row is the subject itself,
and a forward row reads only earlier words), the predictor reads the words
before the verb as written (what the verb-number task gives it), and every
forward (layer, head) is scored at row r = verb − 1:

* weight: G[r, subject]; top-1: the subject gets the row's largest weight;
  'noun weight' and 'noun top-1': the same for the nearest noun before the
  verb where it is not the subject (on attractor items the noun that lures
  a reader; 0 where it is the subject; rates over all the group's
  instances);
* 'mean of heads': the same for the mean of every forward layer and head
  (what an equal mixture hands a task model);
* controls: chance (a uniform row: 1 / r), every fixed offset k ≥ 2 (the
  word k before the verb: top-1 when it is the subject; the best k
  reported), and the nearest noun before the verb (NOUN or PROPN: how often
  it is the subject, the guess attractors exploit).

Groups: 'distance 2+' (every scored instance), and its 'attractors 0' and
'attractors 1+' parts; 'distance 1' counts the instances not scored.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from glomo_jax.classification.verb_number_sources import NOUNS, gold_example
from glomo_jax.eval.conllu import Sentence
from glomo_jax.graphs.encode import encode_texts
from glomo_jax.graphs.shapes import unit_width
from glomo_jax.graphs.unit_graphs import unit_graphs

GROUPS = ("distance 2+", "attractors 0", "attractors 1+")


def instances(sentences: Sequence[Sentence], max_words: int = 128) -> list[dict]:
  """Gold instances with the nearest noun before the verb ('noun', −1: none),
  of verbs at most `max_words` words into their sentence (`forward_rows`'
  width)."""
  out = []
  for sentence in sentences:
    for verb in range(min(len(sentence), max_words + 1)):
      example = gold_example(sentence, verb)
      if example is not None:
        nouns = [w for w in range(verb) if sentence.upos[w] in NOUNS]
        example["noun"] = nouns[-1] if nouns else -1
        out.append(example)
  return out


def _prefix(example: dict) -> tuple[str, np.ndarray]:
  words = example["words"][:example["verb"]]
  ends = np.cumsum([len(w) + 1 for w in words]) - 1
  return " ".join(words), np.stack([ends - [len(w) for w in words], ends], 1)


def forward_rows(predictor, examples: Sequence[dict], batch_size: int = 32,
                 max_words: int = 128) -> list[np.ndarray]:
  """Per example, the forward graphs' row before the verb: [L, K, verb]
  (sources 0 … verb − 1 of the prefix). Verbs past `max_words` are refused
  (`instances` leaves them out); a row whose pieces the predictor's length
  cut is empty (scored as a miss)."""
  tokenizer = predictor.tokenizer
  layers = predictor.config.num_graph_layers
  if any(ex["verb"] > max_words for ex in examples):
    raise ValueError(f"a verb past word {max_words}: leave such instances out (`instances`)")
  rows = []
  for start in range(0, len(examples), batch_size):
    batch = examples[start:start + batch_size]
    width = unit_width(max(ex["verb"] for ex in batch), max_words, 16)
    texts, spans = zip(*map(_prefix, batch))
    graphs = unit_graphs(predictor, encode_texts(tokenizer, list(texts), list(spans), width),
                         width)[0]
    for b, ex in enumerate(batch):
      v = ex["verb"]
      rows.append(graphs[b, :layers, :, v - 1, :v])
  return rows


def _group_of(example: dict) -> list[str]:
  if example["verb"] - example["subject"] < 2:
    return []
  return ["distance 2+", "attractors 0" if example["attractors"] == 0 else "attractors 1+"]


def score_subject_arcs(examples: Sequence[dict], rows: Mapping[str, Sequence[np.ndarray]],
                       select: Mapping[str, str] | None = None, max_offset: int = 8) -> dict:
  """The table (module docstring) of `examples` (`instances`).

  rows: {predictor name: `forward_rows` of the examples}. select: {name:
  the head to report as the best one ('fw 2 h1')}; None: the head with the
  highest top-1 rate on these examples (optimistic: pick it on other data).

  Returns {group: {'examples', 'chance', 'nearest noun', 'best offset':
  {'offset', 'top1'}, name: {'heads': {head: {'weight', 'top1'}}, 'best head':
  {...}, 'mean of heads': {'weight', 'top1'}}}, 'distance 1': count}.
  """
  result = {"distance 1": sum(ex["verb"] - ex["subject"] < 2 for ex in examples)}
  for group in GROUPS:
    picked = [i for i, ex in enumerate(examples) if group in _group_of(ex)]
    if not picked:
      continue
    exs = [examples[i] for i in picked]
    offsets = {k: float(np.mean([ex["verb"] - ex["subject"] == k for ex in exs]))
               for k in range(2, max_offset + 1)}
    best_k = max(offsets, key=offsets.get)
    entry = {"examples": len(exs), "chance": float(np.mean([1 / (ex["verb"] - 1) for ex in exs])),
             "nearest noun": float(np.mean([ex["noun"] == ex["subject"] for ex in exs])),
             "best offset": {"offset": best_k, "top1": offsets[best_k]}}
    for name, all_rows in rows.items():
      entry[name] = _head_scores([all_rows[i] for i in picked], exs,
                                 (select or {}).get(name))
    result[group] = entry
  return result


def _head_scores(rows: Sequence[np.ndarray], examples: Sequence[dict], best: str | None
                 ) -> dict:
  layers, heads = rows[0].shape[:2]
  sums = {k: np.zeros((layers, heads)) for k in ("weight", "top1", "noun weight", "noun top1")}
  mean_sums = dict.fromkeys(sums, 0.0)
  for row, ex in zip(rows, examples):
    s, noun = ex["subject"], ex["noun"]
    other = noun >= 0 and noun != s          # the nearest noun, when not the subject
    live = row.max(-1) > 0
    sums["weight"] += row[:, :, s]
    sums["top1"] += (row.argmax(-1) == s) & live
    mean = row.mean(axis=(0, 1))
    mean_sums["weight"] += float(mean[s])
    mean_sums["top1"] += float(mean.argmax() == s and mean.max() > 0)
    if other:
      sums["noun weight"] += row[:, :, noun]
      sums["noun top1"] += (row.argmax(-1) == noun) & live
      mean_sums["noun weight"] += float(mean[noun])
      mean_sums["noun top1"] += float(mean.argmax() == noun and mean.max() > 0)
  n = len(rows)
  per_head = {f"fw {l + 1} h{h}": {k: float(v[l, h]) / n for k, v in sums.items()}
              for l in range(layers) for h in range(heads)}
  best = best or max(per_head, key=lambda k: per_head[k]["top1"])
  return {"heads": per_head, "best head": {"head": best, **per_head[best]},
          "mean of heads": {k: v / n for k, v in mean_sums.items()}}
