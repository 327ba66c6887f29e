"""The sentence-level objective of the "− unit-level" ablation (paper §2.1.1,
Table 2; skip-thought style, Kiros et al. 2015).

The window (in the direction's reading order) is cut into consecutive segments
of `sentence_length` tokens, standing in for sentences (the token stream
carries no sentence boundaries). Segment s is summarised by the mean of its
top-layer features over its real tokens; from that one vector the decoder GRU
predicts every token of segment s+1 with teacher forcing. The backward
direction reads the flipped sequence, so it predicts the previous segment.
Because the pooled vector is permutation invariant, this objective cannot
tell the graph which tokens relate, which is what the ablation shows.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def sentence_targets(top: jax.Array, emb: jax.Array, tokens: jax.Array,
                     mask: jax.Array | None, segment: int):
  """Decoder start states, inputs, targets and weights of the sentence objective.

  Args:
    top: [batch, T, d] top-layer features.
    emb: [batch, T, d] embeddings.
    tokens: int [batch, T].
    mask: optional [batch, T], 1 = real token.
    segment: tokens per segment S; T // S segments are used (≥ 2 needed).

  Returns:
    h0 [batch, n, d], inputs [batch, n, S, d], targets int [batch, n, S],
    weights float32 [batch, n, S] with n = T // S − 1.
  """
  b, t, d = top.shape
  n_seg = t // segment
  if n_seg < 2:
    raise ValueError(f"the sentence objective needs at least 2 segments of "
                     f"{segment} tokens, but the window has {t} tokens")
  used = n_seg * segment
  m = jnp.ones((b, t), jnp.float32) if mask is None else mask.astype(jnp.float32)
  seg_m = m[:, :used].reshape(b, n_seg, segment)
  seg_top = top[:, :used].reshape(b, n_seg, segment, d).astype(jnp.float32)
  count = jnp.sum(seg_m, axis=-1, keepdims=True)
  pooled = jnp.sum(seg_top * seg_m[..., None], axis=2) / jnp.maximum(count, 1.0)
  h0 = pooled[:, :-1].astype(top.dtype)                         # segments 0..n-2
  nxt_emb = emb[:, segment:used].reshape(b, n_seg - 1, segment, d)
  inputs = jnp.concatenate([jnp.zeros_like(nxt_emb[:, :, :1]), nxt_emb[:, :, :-1]], axis=2)
  targets = tokens[:, segment:used].reshape(b, n_seg - 1, segment)
  weights = seg_m[:, 1:] * (count[:, :-1] > 0).astype(jnp.float32)
  return h0, inputs, targets, weights
