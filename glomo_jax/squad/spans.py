"""Best answer span from start and end scores.

The answer is the span (i, j) of passage words that maximises
start[i] + end[j] subject to i <= j < i + max_span (at most `max_span`
words; document-qa's bound 17) and both inside the passage. Ties go to the
smallest start, then the shortest span. Scores are log-probabilities or
logits of one passage; the two are maximised the same way.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def best_span(start: jax.Array, end: jax.Array, mask: jax.Array, max_span: int
              ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Best valid span of each passage.

  Args:
    start, end: float [B, T] scores of each word as the span's first / last.
    mask: bool [B, T], the passage's words (a prefix of each row).
    max_span: most words in a span (>= 1).

  Returns:
    (first int32 [B], last int32 [B], score float32 [B] = start[first] +
    end[last]). A passage with no word gives (0, 0, -inf).
  """
  if max_span < 1:
    raise ValueError(f"max_span must be >= 1, got {max_span}")
  batch, length = start.shape
  width = min(max_span, length)
  mask = mask.astype(bool)
  neg = jnp.asarray(-jnp.inf, jnp.float32)
  start = jnp.where(mask, start.astype(jnp.float32), neg)
  end = jnp.where(mask, end.astype(jnp.float32), neg)
  # scores[b, i, k] = start[i] + end[i + k]: the span of k + 1 words from i
  padded = jnp.concatenate([end, jnp.full((batch, width), neg)], axis=1)
  offsets = jnp.arange(length)[:, None] + jnp.arange(width)[None, :]
  scores = start[:, :, None] + padded[:, offsets]                 # [B, T, width]
  flat = scores.reshape(batch, -1)
  best = jnp.argmax(flat, axis=1)                                 # first maximum
  first = (best // width).astype(jnp.int32)
  last = first + (best % width).astype(jnp.int32)
  score = jnp.take_along_axis(flat, best[:, None], axis=1)[:, 0]
  empty = ~jnp.any(mask, axis=1)
  first, last = jnp.where(empty, 0, first), jnp.where(empty, 0, last)
  return first, last, score
