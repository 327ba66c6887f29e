"""How much graph weight falls on planted true arcs (synthetic corpus).

A planted arc says that the word at position t depends on the word at s < t
(`arc_source[b, t] = s`, −1 elsewhere). Two rows of the forward graphs can
carry it:

* 'own' row t: the dependent word reading its source (the paper's Figure 3
  view: "he" attends to "Gary Bauer");
* 'predicting' row t − 1: under GLoMo's objective the features at t − 1 must
  predict x_t, so that row needs the source (only arcs with s < t − 1).

For each, the weight G^{l,h}[row, s] is averaged over arcs; chance is what a
uniform graph over the row's allowed sources would give, 1/row.
"""
from __future__ import annotations

import numpy as np

ROWS = {"own": 0, "predicting": 1}


class ArcAccumulator:
  """Sums of arc weights over batches.

  add(graphs_fw [B, L, K, T, T], arc_source int [B, T]); result() -> dict.
  """

  def __init__(self):
    self.weight = {}    # row kind -> [L, K] summed weight on true sources
    self.top1 = {}      # row kind -> [L, K] rows whose argmax is the true source
    self.chance = {k: 0.0 for k in ROWS}
    self.count = {k: 0 for k in ROWS}

  def add(self, graphs_fw: np.ndarray, arc_source: np.ndarray) -> None:
    graphs_fw = np.asarray(graphs_fw, np.float32)
    arc_source = np.asarray(arc_source)
    if graphs_fw.ndim != 5 or arc_source.shape != graphs_fw.shape[:1] + graphs_fw.shape[3:4]:
      raise ValueError(f"graphs {graphs_fw.shape} must be [B, L, K, T, T] and arc_source "
                       f"{arc_source.shape} [B, T]")
    b, t = np.nonzero(arc_source >= 0)
    s = arc_source[b, t]
    for kind, offset in ROWS.items():
      keep = s < t - offset
      bb, row, ss = b[keep], t[keep] - offset, s[keep]
      if len(bb) == 0:
        continue
      rows = graphs_fw[bb, :, :, row, :]                               # [n, L, K, T]
      w = rows[np.arange(len(bb)), :, :, ss]                           # [n, L, K]
      hit = (np.argmax(rows, axis=-1) == ss[:, None, None]) & (rows.max(axis=-1) > 0)
      if kind not in self.weight:
        self.weight[kind] = np.zeros(w.shape[1:], np.float64)
        self.top1[kind] = np.zeros(w.shape[1:], np.float64)
      self.weight[kind] += w.sum(0)
      self.top1[kind] += hit.sum(0)
      self.chance[kind] += float(np.sum(1.0 / row))
      self.count[kind] += len(bb)

  def result(self) -> dict:
    """Per row kind ('own', 'predicting'): {kind}_mean (over arcs, layers,
    heads), {kind}_best and its {kind}_best_layer/_head, {kind}_top1 (share
    of arcs whose row argmax is the true source, best head), {kind}_chance,
    {kind}_arcs."""
    out = {}
    for kind in ROWS:
      n = self.count[kind]
      out[f"{kind}_arcs"] = n
      if not n:
        continue
      per_head = self.weight[kind] / n
      layer, head = np.unravel_index(np.argmax(per_head), per_head.shape)
      out.update({f"{kind}_mean": float(per_head.mean()),
                  f"{kind}_best": float(per_head[layer, head]),
                  f"{kind}_best_layer": int(layer), f"{kind}_best_head": int(head),
                  f"{kind}_top1": float(np.max(self.top1[kind] / n)),
                  f"{kind}_chance": self.chance[kind] / n})
    return out


def arc_scores(graphs_fw: np.ndarray, arc_source: np.ndarray) -> dict:
  """`ArcAccumulator` over a single batch."""
  acc = ArcAccumulator()
  acc.add(graphs_fw, arc_source)
  return acc.result()
