"""How well word graphs agree with dependency trees (the paper's Fig. 3, counted).

A word graph G [n, n] (row: target word t, column: source word s, rows sum
to 1 or 0) is scored against a sentence's basic dependency tree three ways:

* head: the share of words with a head (every word but the root) whose
  highest-weight source is that head;
* neighbour: the share of words (in sentences of 2 words or more) whose
  highest-weight source is a tree neighbour: the head or a dependent;
* UUAS (undirected unlabelled attachment score): the maximum spanning tree of
  the symmetrised graph G + Gᵀ is compared with the gold tree as undirected
  edges; the share of gold edges it contains (n − 1 per sentence).

Ties: a row whose highest weight is shared by m sources counts 1/m for each
(the expected score when the tie is broken at random), so a uniform row
scores by chance, not by which index comes first; an all-zero row scores 0.
The spanning tree breaks ties by the lowest index (deterministic).

Per relation (the universal part of DEPREL, "obl:tmod" → "obl"): head
share and UUAS over the words of that relation (the gold edge word–head).

Baseline graphs of the same shape come from `offset_graph` (left neighbour
k = −1, right neighbour k = +1, any fixed offset) and `uniform_graph`.
"""
from __future__ import annotations

import collections
from typing import Mapping, Sequence

import numpy as np


def maximum_spanning_trees(weights: np.ndarray) -> np.ndarray:
  """Undirected maximum spanning trees (Prim), for a stack of graphs.

  Args:
    weights: [G, n, n] symmetric edge weights (the diagonal is ignored).

  Returns:
    bool [G, n, n]: the adjacency of each tree (symmetric, n − 1 edges).
  """
  weights = np.asarray(weights, np.float64)
  count, n, _ = weights.shape
  tree = np.zeros((count, n, n), bool)
  if n < 2:
    return tree
  rows = np.arange(count)
  in_tree = np.zeros((count, n), bool)
  in_tree[:, 0] = True
  best = weights[:, 0, :].copy()           # best weight linking each node to the tree
  link = np.zeros((count, n), np.int64)     # the tree node of that weight
  for _ in range(n - 1):
    node = np.argmax(np.where(in_tree, -np.inf, best), axis=1)
    tree[rows, node, link[rows, node]] = True
    tree[rows, link[rows, node], node] = True
    in_tree[rows, node] = True
    better = weights[rows, node, :] > best
    best = np.where(better, weights[rows, node, :], best)
    link = np.where(better, node[:, None], link)
  return tree


def offset_graph(n: int, offset: int) -> np.ndarray:
  """[n, n]: every word t reads only word t + offset (no row where that is
  outside the sentence); offset −1 is the left neighbour."""
  graph = np.zeros((n, n), np.float32)
  t = np.arange(n)
  keep = (t + offset >= 0) & (t + offset < n)
  graph[t[keep], t[keep] + offset] = 1.0
  return graph


def uniform_graph(n: int, direction: str) -> np.ndarray:
  """[n, n]: word t reads every earlier word ('forward') or every later one
  ('backward') with equal weight, as a uniform GLoMo graph does."""
  if direction not in ("forward", "backward"):
    raise ValueError(f"direction must be 'forward' or 'backward', got {direction!r}")
  allowed = np.tri(n, k=-1, dtype=np.float32)
  if direction == "backward":
    allowed = allowed.T
  total = allowed.sum(axis=1, keepdims=True)
  return np.where(total > 0, allowed / np.maximum(total, 1), 0).astype(np.float32)


def universal_relation(deprel: str) -> str:
  return deprel.split(":")[0]


class SyntaxScores:
  """Sums of the three scores, per graph name and per relation.

  add(heads [n], deprels, {name: graph [n, n]}) per sentence, the same names
  every time; result().
  """

  def __init__(self):
    self.sums = collections.defaultdict(lambda: np.zeros(3))      # head, neighbour, uuas
    self.relation_index: dict[str, int] = {}
    self.relation_sums = collections.defaultdict(lambda: np.zeros((0, 2)))  # [R, (head, uuas)]
    self.relation_counts = np.zeros(0, np.int64)                    # [R]
    self.counts = np.zeros(3, np.int64)   # words with a head (= gold edges), words, heads left
    self.sentences = 0
    self.names: list[str] | None = None

  def add(self, heads: np.ndarray, deprels: Sequence[str],
          graphs: Mapping[str, np.ndarray]) -> None:
    """Scores one sentence's graphs.

    Args:
      heads: int [n]: each word's head (0-based), −1 for the root.
      deprels: n relation names.
      graphs: {name: [n, n] (target, source)}, rows summing to 1 or 0.
    """
    heads = np.asarray(heads)
    n = len(heads)
    if n < 2 or not graphs:
      return
    names = list(graphs)
    if self.names is None:
      self.names = names
    elif names != self.names:
      raise ValueError(f"every sentence must be scored on the same graphs: {self.names} "
                       f"before, {names} now")
    stack = np.stack([np.asarray(graphs[k], np.float64) for k in names])   # [G, n, n]
    if stack.shape[1:] != (n, n) or len(deprels) != n:
      raise ValueError(f"graphs {stack.shape[1:]} and {len(deprels)} relations do not "
                       f"fit a sentence of {n} words")
    stack = stack * (1 - np.eye(n))
    row_max = stack.max(axis=-1, keepdims=True)
    is_max = (stack == row_max) & (row_max > 0)
    share = is_max / np.maximum(is_max.sum(axis=-1, keepdims=True), 1)    # [G, n, n]

    words = np.flatnonzero(heads >= 0)
    neighbours = np.zeros((n, n), bool)
    neighbours[words, heads[words]] = True
    neighbours |= neighbours.T
    head_hit = share[:, words, heads[words]]                               # [G, edges]
    neighbour_hit = (share * neighbours).sum(axis=(1, 2))
    tree = maximum_spanning_trees(stack + stack.transpose(0, 2, 1))
    edge_hit = tree[:, words, heads[words]]                                # [G, edges]

    self.counts += (len(words), n, int(np.sum(heads[words] < words)))
    for g, name in enumerate(names):
      self.sums[name] += (head_hit[g].sum(), neighbour_hit[g], edge_hit[g].sum())
    rels = np.array([self.relation_index.setdefault(universal_relation(deprels[w]),
                                                    len(self.relation_index))
                     for w in words], np.int64)
    size = len(self.relation_index)
    self.relation_counts = np.pad(self.relation_counts, (0, size - len(self.relation_counts)))
    np.add.at(self.relation_counts, rels, 1)
    for g, name in enumerate(names):
      sums = self.relation_sums[name]
      sums = self.relation_sums[name] = np.pad(sums, ((0, size - len(sums)), (0, 0)))
      np.add.at(sums, rels, np.stack([head_hit[g], edge_hit[g]], axis=-1))
    self.sentences += 1

  def result(self) -> dict:
    """{name: {'head', 'neighbour', 'uuas'}} (shares in [0, 1]), plus
    'relations': {name: {rel: {'head', 'uuas', 'count'}}} and the counts
    ('sentences', 'words', 'edges', and 'heads_left': the share of heads
    before their word, the best head share a forward graph can reach)."""
    with_head, words, left = (int(c) for c in self.counts)
    edges = with_head
    out = {"sentences": self.sentences, "words": words, "edges": edges,
           "heads_left": left / max(with_head, 1), "graphs": {},
           "relations": collections.defaultdict(dict)}
    for name, (head, neighbour, uuas) in self.sums.items():
      out["graphs"][name] = {"head": head / max(with_head, 1),
                             "neighbour": neighbour / max(words, 1),
                             "uuas": uuas / max(edges, 1)}
    for name, sums in self.relation_sums.items():
      for rel, r in self.relation_index.items():
        count = int(self.relation_counts[r])
        if r < len(sums) and count:
          out["relations"][name][rel] = {"head": sums[r, 0] / count,
                                         "uuas": sums[r, 1] / count, "count": count}
    out["relations"] = dict(out["relations"])
    return out
