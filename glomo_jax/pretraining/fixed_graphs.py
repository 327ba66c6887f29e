"""Fixed graphs for pretraining: what the objective rewards.

With `PretrainConfig.graph_source` other than 'predicted', the feature
predictors and decoders train on graphs that do not come from the graph
predictor (`GLoMo.__call__(..., graphs=...)`), and the held-out loss says how
much those graphs help the objective:

* 'uniform': row j reads every real earlier unit (forward; every later one
  backward) with equal weight;
* 'previous': row j reads only the unit before it (forward; the one after it
  backward), the adjacent-unit chain;
* 'planted': the built-in corpus's true arcs (`glomo_jax.data.synthetic`):
  a forward row whose unit is the target of a planted arc inside the window
  reads only its source, every other row is 'previous';
* 'export': the graphs of an exported graph predictor (`graph_export`),
  frozen, computed with its running BatchNorm statistics.

Every head of every layer gets the same graph for the first three. Graphs
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
  """[batch, T, T] each -> [batch, 2L, K, T, T]."""
  b, t, _ = fw.shape
  fw = jnp.broadcast_to(fw[:, None, None], (b, layers, heads, t, t))
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
  position of a planted arc's target, −1 elsewhere) a forward row with an
  arc reads its source instead ('planted'). -> float32 [batch, 2L, K, T, T]."""
  t = mask.shape[1]
  fw_allowed, bw_allowed = _allowed_both(mask, t)
  source = jnp.broadcast_to(jnp.arange(t) - 1, mask.shape)
  if arc_source is not None:
    source = jnp.where(arc_source >= 0, arc_source, source)
  fw = (jnp.arange(t)[None, None, :] == source[:, :, None]) & fw_allowed
  bw = (jnp.arange(t)[None, None, :] == jnp.arange(t)[None, :, None] + 1) & bw_allowed
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
