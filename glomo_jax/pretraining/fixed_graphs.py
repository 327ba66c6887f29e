"""Fixed graphs for pretraining: what the objective rewards.

With `PretrainConfig.graph_source` other than 'predicted', the feature
predictors and decoders train on graphs that do not come from the graph
predictor (`GLoMo.__call__(..., graphs=...)`), and the held-out loss says how
much those graphs help the objective:

* 'uniform': row j reads every real earlier unit (forward; every later one
  backward) with equal weight;
* 'previous': row j reads only the unit before it (forward; the one after it
  backward), the adjacent-unit chain;
* 'planted': the built-in corpus's true arcs (`glomo_jax.data.synthetic`)
  where the objective can use them: in head 0 of every forward layer, the
  row of the unit before an arc's target (whose features predict the
  target: `glomo_jax.eval.arcs`' 'predicting' row) reads only the arc's
  source; every other row, and every other head, is 'previous';
* 'export': the graphs of an exported graph predictor (`graph_export`),
  frozen, computed with its running BatchNorm statistics.

Every layer gets the same graph for the first three. Graphs
are [batch, 2L, K, T, T] in `GLoMo.graphs`' layout ([.., target j, source i];
the L forward layers, strictly lower-triangular, then the L backward ones,
strictly upper-triangular, in the original positions); rows sum to 1, or to
0 where no source exists (the first unit forward, padding).
"""
from __future__ import annotations

from typing import Callable, Mapping

import jax
import jax.numpy as jnp

from glomo_jax.ops.sparse_graph import allowed_sources

SOURCES = ("predicted", "uniform", "previous", "planted", "export")


def _allowed_both(mask: jax.Array, length: int) -> tuple[jax.Array, jax.Array]:
  """bool [batch, T, T] forward (i < j) and backward (i > j) pairs of real units."""
  forward = allowed_sources(length, mask)[:, 0]
  return forward, jnp.swapaxes(forward, -1, -2)


def _repeat(fw: jax.Array, bw: jax.Array, layers: int, heads: int) -> jax.Array:
  """[batch, T, T] each (fw also [batch, K, T, T]) -> [batch, 2L, K, T, T]."""
  b, t, _ = bw.shape
  fw = jnp.broadcast_to(fw[:, None] if fw.ndim == 4 else fw[:, None, None],
                        (b, layers, heads, t, t))
  bw = jnp.broadcast_to(bw[:, None, None], (b, layers, heads, t, t))
  return jnp.concatenate([fw, bw], axis=1)


def uniform_graphs(mask: jax.Array, layers: int, heads: int) -> jax.Array:
  """Mask [batch, T] (1 = real) -> float32 [batch, 2L, K, T, T] (module docstring)."""
  fw, bw = (a.astype(jnp.float32) for a in _allowed_both(mask, mask.shape[1]))
  norm = lambda a: a / jnp.maximum(a.sum(-1, keepdims=True), 1.0)
  return _repeat(norm(fw), norm(bw), layers, heads)


def previous_graphs(mask: jax.Array, layers: int, heads: int,
                    arc_source: jax.Array | None = None) -> jax.Array:
  """The adjacent-unit chain; with `arc_source` (int [batch, T]: the source
  position of a planted arc's target, −1 elsewhere), head 0's forward row
  t − 1 reads s for every arc t → s with s < t − 1 instead ('planted').
  -> float32 [batch, 2L, K, T, T]."""
  t = mask.shape[1]
  idx = jnp.arange(t)
  fw_allowed, bw_allowed = _allowed_both(mask, t)
  one_hot = lambda source: (idx[None, None, :] == source[:, :, None]) & fw_allowed
  previous = jnp.broadcast_to(idx - 1, mask.shape)
  fw = one_hot(previous)
  if arc_source is not None:
    ahead = jnp.concatenate([arc_source[:, 1:], jnp.full_like(arc_source[:, :1], -1)], 1)
    arcs = one_hot(jnp.where((ahead >= 0) & (ahead < idx), ahead, previous))
    fw = jnp.concatenate([arcs[:, None], jnp.broadcast_to(fw[:, None], (fw.shape[0], heads - 1)
                                                          + fw.shape[1:])], axis=1)
  bw = (idx[None, None, :] == idx[None, :, None] + 1) & bw_allowed
  return _repeat(fw.astype(jnp.float32), bw.astype(jnp.float32), layers, heads)


def fixed_graph_fn(source: str, layers: int, heads: int, *, export: str | None = None,
                   tokenizer_fingerprint: str | None = None
                   ) -> Callable[[Mapping[str, jax.Array]], jax.Array] | None:
  """The function batch -> fixed graphs for `source`, or None for 'predicted'.

  Batches are {'tokens', 'mask'} int [batch, T] (and 'arc_source' for
  'planted'). For 'export', the export must have `layers` graph layers of
  `heads` heads and the run's tokenizer (`tokenizer_fingerprint`).
  """
  if source not in SOURCES:
    raise ValueError(f"graph_source {source!r} is not one of {list(SOURCES)}")
  if source == "predicted":
    return None
  if source == "uniform":
    return lambda batch: uniform_graphs(batch["mask"], layers, heads)
  if source == "previous":
    return lambda batch: previous_graphs(batch["mask"], layers, heads)
  if source == "planted":
    return lambda batch: previous_graphs(batch["mask"], layers, heads, batch["arc_source"])
  if not export:
    raise ValueError("graph_source 'export' needs graph_export: an export directory")
  from glomo_jax.export import load_graph_predictor  # noqa: PLC0415 (only this source)
  predictor = load_graph_predictor(export)
  c = predictor.config
  if (c.num_graph_layers, c.num_heads) != (layers, heads):
    raise ValueError(f"{export}: {c.num_graph_layers} graph layers of {c.num_heads} heads; "
                     f"the run has {layers} of {heads}")
  if tokenizer_fingerprint is not None and (
      predictor.tokenizer is None or predictor.tokenizer.fingerprint != tokenizer_fingerprint):
    raise ValueError(f"{export}: its tokenizer is not the run's; pass the export's "
                     "tokenizer.model as tokenizer_path")
  variables = predictor.variables
  return lambda batch: predictor.predict(variables, batch["tokens"], batch["mask"])
