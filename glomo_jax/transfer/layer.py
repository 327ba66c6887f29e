"""`GraphTransfer`: the one layer a task model calls to use transferred graphs.

Given features h [B, T, d] and a mask [B, T]:

* 'glomo': the predictor's graphs [B, 2L, K, T, T] ([.., target, source]) get
  `jax.lax.stop_gradient` (the predictor is frozen); each direction's
  (2L−1)·K candidates are mixed by the direction's own `GraphMixture`
  ('mixture_fw', 'mixture_bw'; num_mixtures each, conditioned on h or free)
  into M_n h for the mixtures M_n of the candidate graphs (padding rows and
  columns of the graphs ignored), one of two ways (`apply_as`):
  - 'candidates': every candidate applied to h (`propagated_candidates`,
    C_c h), then the results mixed;
  - 'mixtures': the candidate matrices formed (`graph_candidates`), mixed
    into M_n, and each M_n applied to h (`graph_features`).
  The mixture is linear in each row, so both give the same numbers to float
  rounding; 'auto' takes the cheaper for the shapes (below). The
  2·num_mixtures M_n h, ordered
  [fw_1, bw_1, fw_2, bw_2, …] as in the authors' code, go to `GatedFusion`
  ('fusion'): output [H ; gated], [B, T, d + features].
* 'uniform': the same fusion with one graph, uniform over the valid positions
  (`uniform_graphs`); the graphs are not read.
* 'none': h is returned unchanged (no parameters; the graphs are not read).

Padding never leaks: graph entries in padding rows or columns are ignored
(they must be finite: NaN·0 is NaN), padding features are not propagated,
and the HM rows of padding targets are 0, so outputs at real positions do not depend on anything at padding
positions (the output at a padding position still holds its own h).

Cost, beyond the graphs it is given (2L·K·T² an example), with C = (2L−1)·K:
- 'candidates' holds C_c h, B·2·C·T·d floats, and does one [T, T]·[T, d]
  product per graph and candidate, forward and backward; no [T, T] candidate
  matrix is formed (forming them is O(T³) in time and B·2·C·T² floats in
  memory, too much for SQuAD's passages).
- 'mixtures' holds the candidate matrices, B·2·C·T² floats, and forms the
  products Λ^l, 2·(L−1)·K [T, T]·[T, T] products with no gradient; then only
  2·num_mixtures [T, T]·[T, d] products, forward and backward.
- 'auto' (`mixtures_are_cheaper`) takes 'mixtures' where it costs fewer
  multiply-adds and T ≤ 2d: IMDB's 128 words and MNLI's 64, not SQuAD's passages.
Dropout follows the authors' code (`dropout_rate`, with ``train=True``):
H and HM come from the clean h, and locked dropout (one mask per example and
feature, shared over positions) is applied only to the input of each
mixture's weights and to the gate's input [H ; HM]. The H in the output is
clean: the task model drops the output as it would drop h (the authors' next
RNN does).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from glomo_jax.transfer.candidates import (graph_candidates, mixtures_are_cheaper,
                                           propagated_candidates)
from glomo_jax.transfer.fusion import GatedFusion, graph_features
from glomo_jax.transfer.mixture import GraphMixture
from glomo_jax.transfer.uniform import uniform_graphs

MODES = ("glomo", "uniform", "none")
APPLY_AS = ("auto", "candidates", "mixtures")


class GraphTransfer(nn.Module):
  """Graph transfer onto features h (module docstring).

  Attributes:
    mode: 'glomo' (the predictor's graphs), 'uniform' (the ablation) or 'none'.
    num_layers: L of the predictor whose graphs come in.
    num_mixtures: mixtures per direction (authors: 2).
    conditioned: mixture weights from h per target position (authors' default)
      or free softmax parameters.
    features: width of the gated part (default: the input width d).
    dropout_rate: see the module docstring (authors: the model's rate).
    apply_as: how 'glomo' reaches M_n H (module docstring): 'candidates'
      (each candidate applied to h, then mixed), 'mixtures' (the candidate
      matrices mixed, then each mixture applied to h), or 'auto' (whichever
      `mixtures_are_cheaper` picks for the shapes). Same numbers to float rounding.
  """
  mode: str = "glomo"
  num_layers: int = 3
  num_mixtures: int = 2
  conditioned: bool = True
  features: int | None = None
  dropout_rate: float = 0.0
  apply_as: str = "auto"

  @nn.compact
  def __call__(self, h, graphs, mask, candidates=None, train: bool = False):
    """Args:
      h: [B, T, d] features of the task model (embeddings or an RNN layer's
        states).
      graphs: [B, 2L, K, T, T] unit-level graphs from the frozen predictor,
        [.., target, source] (ignored and may be None for 'uniform' / 'none',
        or when `candidates` are given).
      mask: [B, T] bool or 0/1 (1 = real unit); None = all real.
      candidates: optional (forward, backward) `propagated_candidates(graphs,
        h, mask, L)`, computed by the caller, e.g. in chunks of the batch to
        bound the memory of the graphs. No gradient reaches h through them:
        for inputs such as pixels, which have none.
      train: dropout on (needs a 'dropout' rng when dropout_rate > 0).

    Returns:
      [B, T, d + features] = [H ; gated] for 'glomo' / 'uniform'; h unchanged
      for 'none'.
    """
    if self.mode not in MODES:
      raise ValueError(f"GraphTransfer.mode={self.mode!r} is not one of {list(MODES)}")
    if self.apply_as not in APPLY_AS:
      raise ValueError(f"GraphTransfer.apply_as={self.apply_as!r} is not one of "
                       f"{list(APPLY_AS)}")
    if self.mode == "none":
      return h
    h = jnp.asarray(h)
    if h.ndim != 3:
      raise ValueError(f"h must be [batch, T, d], got shape {h.shape}")
    batch, length, _ = h.shape
    mask = (jnp.ones((batch, length), bool) if mask is None
            else jnp.asarray(mask).astype(bool))
    if mask.shape != (batch, length):
      raise ValueError(f"mask {mask.shape} must be [batch, T] = {(batch, length)}")

    if self.mode == "uniform":
      hm = graph_features(uniform_graphs(mask)[:, None], h, mask)  # [B, 1, T, d]
    else:
      as_mixtures = False
      if candidates is not None:
        fw, bw = (jax.lax.stop_gradient(c) for c in candidates)     # [B, C, T, d]
        count = (2 * self.num_layers - 1)
        if fw.shape != bw.shape or fw.shape[0] != batch or fw.shape[2:] != h.shape[1:] \
            or fw.shape[1] % count:
          raise ValueError(f"candidates must be two [batch={batch}, (2L−1)·K, T={length}, "
                           f"d={h.shape[-1]}] arrays with L={self.num_layers}, got "
                           f"{fw.shape} and {bw.shape}")
      elif graphs is None:
        raise ValueError("mode 'glomo' needs the predictor's graphs")
      else:
        graphs = jax.lax.stop_gradient(jnp.asarray(graphs))
        as_mixtures = self.apply_as == "mixtures" or (
            self.apply_as == "auto" and mixtures_are_cheaper(
                graphs.shape[2], length, h.shape[-1], self.num_layers, self.num_mixtures))
        if as_mixtures:      # the candidate matrices [B, C, T, T], padding zeroed
          pair = mask[:, None, None, :, None] & mask[:, None, None, None, :]
          fw, bw = graph_candidates(
              jnp.where(pair, graphs.astype(jnp.promote_types(graphs.dtype, jnp.float32)), 0),
              self.num_layers)
        else:                # C_c h [B, C, T, d]
          fw, bw = propagated_candidates(graphs, h, mask, self.num_layers)
      mix = dict(num_mixtures=self.num_mixtures, conditioned=self.conditioned,
                 dropout_rate=self.dropout_rate)
      hm_fw = GraphMixture(**mix, name="mixture_fw")(fw, h, deterministic=not train)
      hm_bw = GraphMixture(**mix, name="mixture_bw")(bw, h, deterministic=not train)
      if as_mixtures:        # M_n [B, n, T, T] -> M_n H
        highest = jax.lax.Precision.HIGHEST
        hm_fw = graph_features(hm_fw, h, mask, precision=highest)
        hm_bw = graph_features(hm_bw, h, mask, precision=highest)
      hm = jnp.stack([hm_fw, hm_bw], axis=2).reshape(
          batch, 2 * self.num_mixtures, length, h.shape[-1])
    return GatedFusion(self.features, self.dropout_rate, name="fusion")(
        h, hm, deterministic=not train)
