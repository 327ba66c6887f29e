"""Applying graphs to features, and the gated fusion (paper §2.3).

Given features H [B, T, d] and graphs M_1 … M_n ([B, n, T_target, T_source]):

  HM_n[t] = Σ_i M_n[t, i] H[i]                      (`graph_features`)
  x       = [H ; HM_1 ; … ; HM_n]                   (concat on features: d·(n+1))
  gated   = (W1 x + b1) ⊙ σ(W2 x + b2)              (width `features`, default d)
  output  = [H ; gated]                             (width d + features)

The authors' ``GateLayer`` (SQuAD code, ``gate_fuse 2``), whose input x
they drop with ``LockedDropout`` (`dropout_rate`: one mask per example and
feature, shared over positions; the H in the output stays clean). `GatedFusion`
takes HM already computed: by `graph_features` from graphs, or, in
`GraphTransfer`, by mixing the candidates applied to H (which never forms a
[T, T] matrix per candidate). Padding: with a mask, `graph_features` drops
padding sources (their H is replaced by 0 and their graph columns ignored)
and zeroes the HM rows of padding targets, so nothing at a padding position
reaches a real one.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


def graph_features(graphs, h, mask=None, precision=None) -> jax.Array:
  """HM: each graph's weighted sums of the features.

  Args:
    graphs: [B, n, T_target, T_source].
    h: [B, T, d].
    mask: optional [B, T] (1 = real position).
    precision: of the product (`jax.lax.Precision`; None: the default).

  Returns:
    [B, n, T, d] with [b, k, t] = Σ_i graphs[b, k, t, i] h[b, i]; rows of
    padding targets are 0 and padding sources contribute nothing.
  """
  graphs, h = jnp.asarray(graphs), jnp.asarray(h)
  if graphs.ndim != 4 or h.ndim != 3 or graphs.shape[0] != h.shape[0] or \
      graphs.shape[-2:] != (h.shape[1], h.shape[1]):
    raise ValueError(f"graphs [batch, n, T, T] and h [batch, T, d] do not fit: "
                     f"{graphs.shape} and {h.shape}")
  if mask is not None:
    mask = jnp.asarray(mask).astype(bool)
    h = jnp.where(mask[:, :, None], h, 0)
    graphs = jnp.where(mask[:, None, None, :], graphs, 0)
  out = jnp.einsum("bnts,bsd->bntd", graphs, h, precision=precision)
  if mask is not None:
    out = jnp.where(mask[:, None, :, None], out, 0)
  return out


class GatedFusion(nn.Module):
  """[H ; W1 x ⊙ σ(W2 x)] with x = [H ; HM_1 ; … ; HM_n] (module docstring).

  Attributes:
    features: width of the gated part; None = the width d of H.
    dropout_rate: locked dropout on x (module docstring).

  Parameters: 'linear' (W1, b1) and 'gate' (W2, b2), kernels [d·(n+1), features].
  """
  features: int | None = None
  dropout_rate: float = 0.0

  @nn.compact
  def __call__(self, h, hm, deterministic: bool = True):
    """Args:
      h: [B, T, d].
      hm: [B, n, T, d], HM_1 … HM_n (e.g. `graph_features(graphs, h, mask)`).
      deterministic: no dropout (else a 'dropout' rng is needed).

    Returns:
      [B, T, d + features]: H, then the gated part.
    """
    h, hm = jnp.asarray(h), jnp.asarray(hm)
    if hm.ndim != 4 or h.ndim != 3 or hm.shape[0] != h.shape[0] or \
        hm.shape[2:] != h.shape[1:]:
      raise ValueError(f"hm [batch, n, T, d] and h [batch, T, d] do not fit: "
                       f"{hm.shape} and {h.shape}")
    batch, n, length, dim = hm.shape
    x = jnp.concatenate(
        [h, hm.transpose(0, 2, 1, 3).reshape(batch, length, n * dim)], axis=-1)
    x = nn.Dropout(self.dropout_rate, broadcast_dims=(1,))(x, deterministic)
    width = self.features or h.shape[-1]
    gate = nn.sigmoid(nn.Dense(width, name="gate")(x))
    gated = nn.Dense(width, name="linear")(x) * gate
    return jnp.concatenate([h, gated.astype(h.dtype)], axis=-1)
