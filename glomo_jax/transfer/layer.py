"""`GraphTransfer`: the one layer a task model calls to use transferred graphs.

Given features h [B, T, d] and a mask [B, T]:

* 'glomo': the predictor's graphs [B, 2L, K, T, T] ([.., target, source]) get
  their padding rows and columns zeroed and `jax.lax.stop_gradient` (the
  predictor is frozen); each direction's (2L−1)·K candidates
  (`graph_candidates`) are mixed by its own `GraphMixture` ('mixture_fw',
  'mixture_bw'; num_mixtures each, conditioned on h or free); the
  2·num_mixtures graphs, ordered [fw_1, bw_1, fw_2, bw_2, …] as in the
  authors' code, go to `GatedFusion` ('fusion'): output [H ; gated],
  [B, T, d + features].
* 'uniform': the same fusion with one graph, uniform over the valid positions
  (`uniform_graphs`); the graphs are not read.
* 'none': h is returned unchanged (no parameters; the graphs are not read).

Padding never leaks: graph entries in padding rows or columns are zeroed,
padding features are not propagated, and the HM rows of padding targets are
0, so outputs at real positions do not depend on anything at padding
positions (the output at a padding position still holds its own h).

Cost: the candidates take B·2·(2L−1)·K·T² floats (paper config, L=3, K=8:
80·T² per example), so long inputs are quadratic in memory as in attention.
No dropout is applied here; apply it to h before the call if wanted (the
authors drop out the features before the mixture logits and the gate).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from glomo_jax.transfer.candidates import graph_candidates
from glomo_jax.transfer.fusion import GatedFusion
from glomo_jax.transfer.mixture import GraphMixture
from glomo_jax.transfer.uniform import uniform_graphs

MODES = ("glomo", "uniform", "none")


class GraphTransfer(nn.Module):
  """Graph transfer onto features h (module docstring).

  Attributes:
    mode: 'glomo' (the predictor's graphs), 'uniform' (the ablation) or 'none'.
    num_layers: L of the predictor whose graphs come in.
    num_mixtures: mixtures per direction (authors: 2).
    conditioned: mixture weights from h per target position (authors' default)
      or free softmax parameters.
    features: width of the gated part (default: the input width d).
  """
  mode: str = "glomo"
  num_layers: int = 3
  num_mixtures: int = 2
  conditioned: bool = True
  features: int | None = None

  @nn.compact
  def __call__(self, h, graphs, mask):
    """Args:
      h: [B, T, d] features of the task model (embeddings or an RNN layer's
        states).
      graphs: [B, 2L, K, T, T] unit-level graphs from the frozen predictor,
        [.., target, source] (ignored and may be None for 'uniform' / 'none').
      mask: [B, T] bool or 0/1 (1 = real unit); None = all real.

    Returns:
      [B, T, d + features] = [H ; gated] for 'glomo' / 'uniform'; h unchanged
      for 'none'.
    """
    if self.mode not in MODES:
      raise ValueError(f"GraphTransfer.mode={self.mode!r} is not one of {list(MODES)}")
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
      mixed = uniform_graphs(mask)[:, None]                      # [B, 1, T, T]
    else:
      if graphs is None:
        raise ValueError("mode 'glomo' needs the predictor's graphs")
      graphs = jnp.asarray(graphs)
      expected = (batch, 2 * self.num_layers)
      if graphs.ndim != 5 or graphs.shape[:2] != expected or \
          graphs.shape[-2:] != (length, length):
        raise ValueError(f"graphs must be [batch={batch}, 2L={2 * self.num_layers}, K, "
                         f"T={length}, T={length}], got shape {graphs.shape}")
      graphs = jax.lax.stop_gradient(
          graphs.astype(jnp.promote_types(graphs.dtype, jnp.float32)))
      pair = mask[:, :, None] & mask[:, None, :]
      graphs = jnp.where(pair[:, None, None], graphs, 0)
      fw, bw = graph_candidates(graphs, self.num_layers)
      mix = dict(num_mixtures=self.num_mixtures, conditioned=self.conditioned)
      m_fw = GraphMixture(**mix, name="mixture_fw")(fw, h)      # [B, n, T, T]
      m_bw = GraphMixture(**mix, name="mixture_bw")(bw, h)
      mixed = jnp.stack([m_fw, m_bw], axis=2).reshape(
          batch, 2 * self.num_mixtures, length, length)
    return GatedFusion(self.features, name="fusion")(h, mixed, mask)
