"""`GLoMo`: the whole pretraining network (paper §2.1).

Embedding E [V, d] (shared by both directions, tied to both decoders' output
layers) → for each direction (forward reads x, backward reads x flipped): a
graph predictor, a feature predictor and a context decoder → loss
= ½(forward + backward) mean cross-entropy.

Usage (pure functions of params, inputs and rngs)::

  model = GLoMo(ModelConfig.tiny())
  variables = model.init(rng, tokens)                   # params, batch_stats
  (loss, metrics), updates = model.apply(
      variables, tokens, mask, train=True, rngs={"sample": key},
      mutable=["batch_stats"])
  graphs = model.apply(variables, tokens, method=GLoMo.graphs)  # [B, 2L, K, T, T]
"""
from __future__ import annotations

import functools
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from glomo_jax.config import ModelConfig
from glomo_jax.models.context_decoder import ContextDecoder, context_targets
from glomo_jax.models.feature_predictor import FeaturePredictor
from glomo_jax.models.fused_features import fused_top_features_at
from glomo_jax.models.graph_predictor import GraphPredictor
from glomo_jax.models.initializers import uniform
from glomo_jax.models.sentence_objective import sentence_targets
from glomo_jax.ops.chunked_cross_entropy import tied_softmax_cross_entropy
from glomo_jax.ops.embedding_lookup import embedding_lookup
from glomo_jax.ops.pallas.tied_softmax import fused_tied_softmax_cross_entropy

DIRECTIONS = ("fw", "bw")


def _check_inputs(tokens, mask):
  if tokens.ndim != 2:
    raise ValueError(f"tokens must be [batch, T] ids, got shape {tokens.shape}")
  if not jnp.issubdtype(tokens.dtype, jnp.integer):
    raise ValueError(f"tokens must be integer ids, got dtype {tokens.dtype}")
  if mask is not None and mask.shape != tokens.shape:
    raise ValueError(f"mask {mask.shape} must have the shape of tokens {tokens.shape}")


def top_features_at(graph: GraphPredictor, feats: FeaturePredictor, emb, mask,
                    train: bool, positions) -> jax.Array:
  """Top-layer features F^L of a decoupled direction at `positions` only.

  The loss reads F^L only at the decoder start positions, and row j of a
  graph feeds only position j, so the top layer is computed at those rows
  (`GraphPredictor.split_graphs`): the same numbers, less work.

  Args:
    graph, feats: the direction's predictors (bound submodules).
    emb: [batch, T, d] units in reading order; mask: optional [batch, T].
    train: batch statistics.
    positions: int [n] rows.

  Returns:
    [batch, n, d].

  With `ModelConfig.fused_graph` the graphs are never formed: each layer's
  mixing is the fused kernel (`models.fused_features`), the same numbers.
  """
  if graph.config.fused_graph:
    return fused_top_features_at(graph, feats, emb, mask, train, positions)
  lower, top = graph.split_graphs(emb, mask, train, positions)
  h = emb
  for layer in range(lower.shape[1]):
    h = feats.layer(layer, h, lower[:, layer])
  return feats.layer(lower.shape[1], h, top, rows=positions)


def direction_metrics(loss, ce, weights, counts, counted: str = "tokens") -> dict:
  """The loss metrics of a model that reads both ways: `loss`, each
  direction's mean cross-entropy (`loss_fw`, `loss_bw`) and how many values
  were predicted (`counted`).

  Args:
    loss: the scalar loss ½(fw + bw).
    ce: [n_fw + n_bw] cross-entropy of every decoded row, forward rows first
      (pixels: summed over the channels).
    weights: ([n_fw], [n_bw]): 1 for a row that counts, 0 for padding.
    counts: each direction's predicted values (pixels: rows × channels).
  """
  n_fw = weights[0].shape[0]
  per_dir = [jnp.sum(ce[:n_fw] * weights[0]) / jnp.maximum(counts[0], 1.0),
             jnp.sum(ce[n_fw:] * weights[1]) / jnp.maximum(counts[1], 1.0)]
  return {"loss": loss, "loss_fw": per_dir[0], "loss_bw": per_dir[1],
          counted: counts[0] + counts[1]}


class GLoMo(nn.Module):
  """GLoMo pretraining model. Parameter tree (frozen names):

  embedding [V, d]; graph_fw, graph_bw (GraphPredictor); features_fw,
  features_bw (FeaturePredictor); decoder_fw, decoder_bw (ContextDecoder).
  BatchNorm statistics are in the 'batch_stats' collection.

  `split_batch_scores` chooses how the graph predictors compute their
  affinity products (the same numbers; see `GraphPredictor`).
  """
  config: ModelConfig
  split_batch_scores: bool = False

  def setup(self):
    c = self.config
    self.embedding = self.param("embedding", uniform(0.1), (c.vocab_size, c.dim),
                                c.params_dtype)
    self.graph_fw = GraphPredictor(c, self.split_batch_scores)
    self.graph_bw = GraphPredictor(c, self.split_batch_scores)
    self.features_fw = FeaturePredictor(c)
    self.features_bw = FeaturePredictor(c)
    self.decoder_fw = ContextDecoder(c)
    self.decoder_bw = ContextDecoder(c)

  # ---- pieces ---------------------------------------------------------------
  def embed(self, tokens: jax.Array) -> jax.Array:
    """int [batch, T] -> [batch, T, d] in the compute dtype."""
    c = self.config
    emb = embedding_lookup(self.embedding, tokens, c.embed_grad_scale_by_freq)
    return emb.astype(c.compute_dtype)

  def _direction(self, which: str, emb, mask, train: bool, with_features: bool):
    """One direction on its own reading order: (graphs [B, L, K, T, T],
    features [F^1..F^L] or None)."""
    graph = self.graph_fw if which == "fw" else self.graph_bw
    feats = self.features_fw if which == "fw" else self.features_bw
    if self.config.decoupled:
      graphs = graph(emb, mask, train)
      return graphs, (feats(emb, graphs) if with_features else None)
    h, graphs, out = emb, [], []
    for layer in range(self.config.num_graph_layers):
      g = graph.layer_graph(layer, h, mask)
      h = feats.layer(layer, h, g)
      graphs.append(g)
      out.append(h)
    return jnp.stack(graphs, axis=1), out

  def _both(self, tokens, mask, train, with_features):
    _check_inputs(tokens, mask)
    emb = self.embed(tokens)
    if mask is not None:
      mask = mask.astype(bool)
    mask_r = None if mask is None else jnp.flip(mask, 1)
    fw = self._direction("fw", emb, mask, train, with_features)
    bw = self._direction("bw", jnp.flip(emb, 1), mask_r, train, with_features)
    return emb, mask, fw, bw

  def _start_states(self, which: str, emb, mask, train: bool, positions, graphs=None):
    """Top-layer features F^L at the decoder start `positions` (int [n]) of
    one direction's sequence: [batch, n, d] (`top_features_at`); with
    `graphs` ([batch, L, K, T, T] in this direction's reading order), the
    feature predictor mixes those instead of the graph predictor's."""
    graph = self.graph_fw if which == "fw" else self.graph_bw
    feats = self.features_fw if which == "fw" else self.features_bw
    if graphs is not None:
      h = emb
      for layer in range(graphs.shape[1] - 1):
        h = feats.layer(layer, h, graphs[:, layer])
      return feats.layer(graphs.shape[1] - 1, h, graphs[:, -1][:, :, positions],
                         rows=positions)
    if not self.config.decoupled:
      _, out = self._direction(which, emb, mask, train, with_features=True)
      return out[-1][:, positions]
    return top_features_at(graph, feats, emb, mask, train, positions)

  # ---- public methods -------------------------------------------------------
  def graphs(self, tokens: jax.Array, mask: jax.Array | None = None,
             train: bool = False) -> jax.Array:
    """All graphs of a batch.

    Args:
      tokens: int [batch, T]; mask: optional [batch, T] (1 = real token).

    Returns:
      [batch, 2L, K, T, T], [.., target, source]: the L forward layers (strictly
      lower-triangular), then the L backward layers mapped back to the original
      positions (strictly upper-triangular).
    """
    _, _, (g_fw, _), (g_bw, _) = self._both(tokens, mask, train, with_features=False)
    return jnp.concatenate([g_fw, jnp.flip(g_bw, (-1, -2))], axis=1)

  def features(self, tokens: jax.Array, mask: jax.Array | None = None,
               train: bool = False) -> jax.Array:
    """[1 + 2L, batch, T, d]: embeddings, forward layers' features, backward
    layers' features (mapped back to the original positions)."""
    emb, _, (_, f_fw), (_, f_bw) = self._both(tokens, mask, train, with_features=True)
    return jnp.stack([emb] + list(f_fw) + [jnp.flip(f, 1) for f in f_bw])

  def next_token_log_probs(self, tokens: jax.Array, mask: jax.Array | None = None
                           ) -> jax.Array:
    """The forward direction as a language model: row t's prediction of the
    next token x_{t+1} from x_0 … x_t (the context decoder's first step from
    the start state F^L_t, through the tied output layer; the 'context'
    objective's first target), for language-model probes
    (`glomo_jax.classification.lm_agreement`). Evaluation mode (running BatchNorm
    statistics).

    Args:
      tokens: int [batch, T]; mask: optional [batch, T] (1 = real token).

    Returns:
      float32 [batch, T, V] log-probabilities; row t reads only tokens ≤ t.
    """
    _check_inputs(tokens, mask)
    emb = self.embed(tokens)
    mask = None if mask is None else mask.astype(bool)
    h0 = self._start_states("fw", emb, mask, False, jnp.arange(tokens.shape[1]))
    first = jnp.zeros(h0.shape[:2] + (1, h0.shape[-1]), h0.dtype)   # step 0 reads 0
    out = self.decoder_fw(h0, first)[:, :, 0].astype(jnp.float32)    # [batch, T, d]
    logits = jnp.einsum("btd,vd->btv", out, self.embedding.astype(jnp.float32),
                        precision=jax.lax.Precision.HIGHEST)
    return jax.nn.log_softmax(logits, axis=-1)

  def draw_positions(self, length: int) -> tuple[jax.Array, jax.Array]:
    """Decoder start positions (forward, backward), each int [n].

    sample_positions > 0: drawn with replacement from [0, T − D) with the
    'sample' rng (independently per direction, shared by the batch, as the
    authors). 0: every position 0 … T − D − 1.
    """
    c = self.config
    hi = length - c.context_length
    if hi < 1:
      raise ValueError(f"windows of {length} tokens are too short for "
                       f"context_length D={c.context_length}: need T > D")
    if c.sample_positions == 0:
      everything = jnp.arange(hi)
      return everything, everything
    k1, k2 = jax.random.split(self.make_rng("sample"))
    return (jax.random.randint(k1, (c.sample_positions,), 0, hi),
            jax.random.randint(k2, (c.sample_positions,), 0, hi))

  def __call__(self, tokens: jax.Array, mask: jax.Array | None = None,
               train: bool = True,
               positions: Sequence[jax.Array] | None = None,
               graphs: jax.Array | None = None):
    """The pretraining loss.

    Args:
      tokens: int [batch, T].
      mask: optional [batch, T], 1 = real token; padding neither sends nor
        receives graph weight and adds no loss term.
      train: batch statistics (needs mutable=['batch_stats']) and dropout.
      positions: optional (forward, backward) int [n] start positions; the
        backward ones index the flipped sequence. Drawn by `draw_positions`
        when omitted (needs a 'sample' rng if sample_positions > 0).
      graphs: optional [batch, 2L, K, T, T] fixed graphs in `GLoMo.graphs`'
        layout (forward layers, then backward ones in the original
        positions): the feature predictors mix these instead of the graph
        predictors' graphs (which then get no gradient); 'context' objective.

    Returns:
      (loss, metrics): loss = ½(forward mean CE + backward mean CE), a scalar
      in at least float32 (float64 for a float64 model); metrics = {loss, loss_fw, loss_bw, tokens} where tokens counts
      the predicted targets of both directions.
    """
    c = self.config
    _check_inputs(tokens, mask)
    given = {"fw": None, "bw": None}
    if graphs is not None:
      expected = (tokens.shape[0], 2 * c.num_graph_layers, c.num_heads) + 2 * tokens.shape[1:]
      if c.objective != "context" or tuple(graphs.shape) != expected:
        raise ValueError(f"fixed graphs must be {expected} with the context objective, "
                         f"got {tuple(graphs.shape)} ({c.objective})")
      graphs = jax.lax.stop_gradient(graphs)
      given = {"fw": graphs[:, :c.num_graph_layers],
               "bw": jnp.flip(graphs[:, c.num_graph_layers:], (-1, -2))}
    if c.objective == "context" and positions is None:
      positions = self.draw_positions(tokens.shape[1])
    emb = self.embed(tokens)
    if mask is not None:
      mask = mask.astype(bool)
    seqs = {"fw": (emb, tokens, mask),
            "bw": (jnp.flip(emb, 1), jnp.flip(tokens, 1),
                   None if mask is None else jnp.flip(mask, 1))}
    hidden, targets, weights = [], [], []
    for i, which in enumerate(DIRECTIONS):
      e, tok, m = seqs[which]
      decoder = self.decoder_fw if which == "fw" else self.decoder_bw
      if c.objective == "context":
        pos = jnp.asarray(positions[i])
        h0 = self._start_states(which, e, m, train, pos, given[which])
        tgt, w = context_targets(tok, m, pos, c.context_length)
        out = decoder.decode_windows(h0, e, pos, train)
      else:
        _, feats = self._direction(which, e, m, train, with_features=True)
        h0, inputs, tgt, w = sentence_targets(feats[-1], e, tok, m, c.sentence_length)
        out = decoder(h0, inputs, train)
      hidden.append(out.reshape(-1, c.dim))
      targets.append(tgt.reshape(-1))
      weights.append(w.reshape(-1))
    counts = [jnp.sum(w) for w in weights]
    scaled = [w.astype(c.graph_dtype) / (2.0 * jnp.maximum(n, 1.0))
              for w, n in zip(weights, counts)]
    table = self.embedding.astype(c.compute_dtype)
    # the fused kernel's rows: two groups (directions), each batch-major
    cross_entropy = (functools.partial(fused_tied_softmax_cross_entropy, row_groups=2)
                     if c.fused_loss else tied_softmax_cross_entropy)
    loss, ce = cross_entropy(
        jnp.concatenate(hidden), table, jnp.concatenate(targets),
        jnp.concatenate(scaled), c.loss_chunk_size)
    return loss, direction_metrics(loss, ce, weights, counts)
