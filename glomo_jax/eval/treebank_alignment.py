"""A graph predictor's graphs against a treebank's trees, beside baselines.

`score_treebank` runs predictors (a trained one, its untrained twin) on
each sentence's raw text, pools their piece graphs to the treebank's words by
characters (`glomo_jax.graphs.encode_texts`, once per batch for all the
predictors, then `unit_graphs`; without self-loops: a word reading itself
says nothing about syntax), and scores with
`glomo_jax.eval.syntax.SyntaxScores`:

* every (direction, layer, head): 'fw 1 h0' … 'bw L h{K−1}' (layers from 1);
* equal-weight mixtures: 'fw 1 mean' (a layer's heads), 'fw mean' (all the
  direction's layers and heads), 'fw+bw mean' (both directions: a word's
  sources on either side);
* baselines: 'left neighbour', 'right neighbour', 'left+right',
  'uniform fw', 'uniform bw', 'uniform fw+bw', and 'offset k' for every
  fixed offset 0 < |k| ≤ `offsets`.

A predictor's names carry its prefix ('untrained fw mean').
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from glomo_jax.eval.conllu import Sentence
from glomo_jax.eval.syntax import SyntaxScores, offset_graph, uniform_graph
from glomo_jax.export.predictor import ExportedGraphPredictor
from glomo_jax.graphs.encode import encode_texts
from glomo_jax.graphs.shapes import unit_width
from glomo_jax.graphs.unit_graphs import unit_graphs

DIRECTIONS = ("fw", "bw")


def mixture_graphs(graphs: np.ndarray, prefix: str = "") -> dict[str, np.ndarray]:
  """Named graphs of one sentence's predictor output.

  Args:
    graphs: [2L, K, n, n]: L forward layers, then L backward ones.
    prefix: put before every name (with a space), e.g. 'untrained'.

  Returns:
    {name: [n, n]}: every head, each layer's head mean, each direction's
    mean, and the mean of both directions (names: module docstring).
  """
  two_l, heads = graphs.shape[:2]
  layers = two_l // 2
  lead = f"{prefix} " if prefix else ""
  out = {}
  for d, direction in enumerate(DIRECTIONS):
    for layer in range(layers):
      for head in range(heads):
        out[f"{lead}{direction} {layer + 1} h{head}"] = graphs[d * layers + layer, head]
  for d, direction in enumerate(DIRECTIONS):
    for layer in range(layers):
      out[f"{lead}{direction} {layer + 1} mean"] = graphs[d * layers + layer].mean(axis=0)
  for d, direction in enumerate(DIRECTIONS):
    out[f"{lead}{direction} mean"] = graphs[d * layers:(d + 1) * layers].mean(axis=(0, 1))
  out[f"{lead}fw+bw mean"] = graphs.mean(axis=(0, 1))
  return out


def baseline_graphs(n: int, offsets: int) -> dict[str, np.ndarray]:
  """{name: [n, n]} of the baselines (module docstring) for n words."""
  left, right = offset_graph(n, -1), offset_graph(n, 1)
  forward, backward = uniform_graph(n, "forward"), uniform_graph(n, "backward")
  out = {"left neighbour": left, "right neighbour": right,
         "left+right": (left + right) / 2, "uniform fw": forward,
         "uniform bw": backward, "uniform fw+bw": (forward + backward) / 2}
  for k in range(1, offsets + 1):
    out[f"offset -{k}"] = offset_graph(n, -k)
    out[f"offset +{k}"] = offset_graph(n, k)
  return out


def untrained_twin(predictor: ExportedGraphPredictor, seed: int = 0
                   ) -> ExportedGraphPredictor:
  """The same predictor with freshly initialised parameters (seed `seed`)."""
  return ExportedGraphPredictor.untrained(predictor.config, predictor.tokenizer, seed,
                                          manifest=predictor.manifest)


def score_treebank(sentences: Sequence[Sentence],
                   predictors: Mapping[str, ExportedGraphPredictor], *,
                   batch_size: int = 32, max_words: int = 128, offsets: int = 8,
                   rows: str = "mean") -> dict:
  """Scores every predictor and baseline on the sentences.

  Args:
    sentences: treebank sentences (`glomo_jax.eval.conllu.read_conllu`).
    predictors: {prefix: predictor}; '' for the trained one.
    batch_size: sentences per predictor call (sorted by length).
    max_words: longer sentences are skipped (counted).
    offsets: the fixed-offset baselines go to ±offsets.
    rows: how a word's row is formed from its pieces' rows
      (`glomo_jax.graphs.align_graphs`).

  Returns:
    `SyntaxScores.result()` plus 'skipped_long' (sentences over max_words)
    and 'skipped_unseen' (sentences with a word that has no piece of its
    own, e.g. only characters the tokenizer drops).
  """
  tokenizers = {p.tokenizer for p in predictors.values()}
  if len(tokenizers) != 1 or None in tokenizers:
    raise ValueError("the predictors must share one tokenizer")
  (tokenizer,) = tokenizers
  scores = SyntaxScores()
  kept = [s for s in sentences if len(s) <= max_words]
  skipped_unseen = 0
  kept.sort(key=len)
  for start in range(0, len(kept), batch_size):
    batch = kept[start:start + batch_size]
    width = unit_width(max(len(s) for s in batch), max_words, 16)
    encoded = encode_texts(tokenizer, [s.text for s in batch], [s.spans for s in batch],
                           width)
    outputs = {prefix: unit_graphs(p, encoded, width, rows=rows)[0]
               for prefix, p in predictors.items()}
    seen = _words_with_pieces(encoded[2], width)
    for b, sentence in enumerate(batch):
      n = len(sentence)
      if not seen[b, :n].all():
        skipped_unseen += 1
        continue
      graphs = baseline_graphs(n, offsets)
      for prefix, out in outputs.items():
        graphs.update(mixture_graphs(out[b, :, :, :n, :n], prefix))
      scores.add(sentence.heads, sentence.deprels, graphs)
  result = scores.result()
  result.update(skipped_long=len(sentences) - len(kept), skipped_unseen=skipped_unseen)
  return result


def _words_with_pieces(unit: np.ndarray, width: int) -> np.ndarray:
  """bool [B, width]: which words got at least one piece (unit: int [B, P],
  the word of each piece, −1 for none)."""
  seen = np.zeros((len(unit), width + 1), bool)
  rows = np.repeat(np.arange(len(unit)), unit.shape[1])
  seen[rows, unit.reshape(-1)] = True        # unit −1 lands in the last column
  return seen[:, :width]


def single_heads(names: Sequence[str], prefix: str = "") -> list[str]:
  """The names of predictor `prefix`'s single heads (not mixtures)."""
  lead = f"{prefix} " if prefix else ""
  return [name for name in names if name.split(" ")[-1].startswith("h")
          and name[len(lead):].split(" ")[0] in DIRECTIONS and name.startswith(lead)]


def best_by(result: dict, metric: str, names: Sequence[str]) -> str:
  """The one of `names` that scores highest on `metric`."""
  return max(names, key=lambda name: result["graphs"][name][metric])
