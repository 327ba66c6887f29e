"""`PixelGLoMo`: GLoMo pretraining over the pixels of images (paper §3.5).

The text network with pixels as units, in raster order t = r·W + c:

* embedding: each channel value (quantised to V = `config.vocab_size` levels,
  256 = every value) has its own vector per channel; a pixel's embedding is
  the sum of its three, e_t = E_R[r_t] + E_G[g_t] + E_B[b_t]  [batch, H·W, d];
* per direction, the text `GraphPredictor` (its key and query CNNs replaced
  by the raster-causal `PixelConvStack`s), threshold, sparsity and
  `FeaturePredictor`, unchanged: graphs [batch, L, K, H·W, H·W], target row,
  source column, strictly causal in raster order (up to BatchNorm's batch
  statistics in training, as for text);
* the context objective over the 3×3 window (`pixel_window.py`): from F^L_t the
  text `ContextDecoder` (a GRU started at F^L_t, teacher-forced with
  [0, e(p_1), e(p_2), e(p_3)]) predicts the window's future pixels
  p_1 … p_4 in raster order; each output scores every level of each channel
  through that channel's embedding table (tied, as the text decoder's output
  layer), a categorical over V levels per channel (the three channels
  independent given the decoder state). Window pixels outside the image
  are not predicted, and their inputs are zero vectors.

Backward direction: the text model reads each sequence both ways and the
transfer mixes the graphs of both (each unit gets edges to earlier and to
later units). The paper's image setup is "PixelCNN-like", which is one
direction; we keep both, as for text, so a transferred pixel sees the whole
image: the backward direction reads the reversed raster order, i.e. the
image rotated by 180° (its own 3×3 window is then the pixels above and to
the left), and `graphs` maps its graphs back to the original positions.

Read from `ModelConfig`: vocab_size (levels), dim, num_heads, head_dim,
num_graph_layers, key_layers, query_layers, kernel_size (odd), norm,
threshold, sparsity, composition, decoder_layers, sample_positions,
loss_chunk_size, dtype, param_dtype, dropout, bn_*. Pixels need
decoupled=True and objective='context'; context_length is fixed by the
window (4) and not read.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from glomo_jax.config import ModelConfig
from glomo_jax.models.pixel_window import window_targets
from glomo_jax.models.context_decoder import ContextDecoder
from glomo_jax.models.feature_predictor import FeaturePredictor
from glomo_jax.models.glomo import direction_metrics, top_features_at
from glomo_jax.models.graph_predictor import GraphPredictor
from glomo_jax.models.initializers import uniform
from glomo_jax.ops.chunked_cross_entropy import tied_softmax_cross_entropy

CHANNELS = 3


def check_images(images) -> None:
  if images.ndim != 4 or images.shape[-1] != CHANNELS:
    raise ValueError(f"images must be [batch, H, W, 3], got shape {images.shape}")
  if images.dtype != jnp.uint8:
    raise ValueError(f"images must be uint8 values 0-255, got dtype {images.dtype}")


def quantise(images, levels: int) -> jax.Array:
  """uint8 [..., 3] -> int32 levels ⌊v·levels / 256⌋ in [0, levels)."""
  return (jnp.asarray(images).astype(jnp.int32) * levels) // 256


class PixelGLoMo(nn.Module):
  """GLoMo on images of `image_shape` (module docstring). Parameter tree:
  embedding [3, V, d]; graph_fw, graph_bw; features_fw, features_bw;
  decoder_fw, decoder_bw. BatchNorm statistics in 'batch_stats'.

  No parameter depends on `image_shape`: the variables of a model built for
  one size apply to `PixelGLoMo(config, other_shape)`.
  """
  config: ModelConfig
  image_shape: tuple[int, int]

  def setup(self):
    c = self.config
    if not c.decoupled or c.objective != "context":
      raise ValueError("PixelGLoMo needs decoupled=True and objective='context' "
                       f"(got decoupled={c.decoupled}, objective={c.objective!r})")
    if c.kernels != "reference":
      raise ValueError(f"PixelGLoMo runs the reference ops; got kernels={c.kernels!r}")
    if c.vocab_size > 256:
      raise ValueError(f"vocab_size is the levels per channel, at most 256; got "
                       f"{c.vocab_size}")
    shape = tuple(self.image_shape)
    self.embedding = self.param("embedding", uniform(0.1),
                                (CHANNELS, c.vocab_size, c.dim), c.params_dtype)
    self.graph_fw = GraphPredictor(c, image_shape=shape)
    self.graph_bw = GraphPredictor(c, image_shape=shape)
    self.features_fw = FeaturePredictor(c)
    self.features_bw = FeaturePredictor(c)
    self.decoder_fw = ContextDecoder(c)
    self.decoder_bw = ContextDecoder(c)

  def _embed(self, levels):
    """levels int [B, T, 3] -> [B, T, d] = Σ_c E_c[level_c]."""
    emb = sum(self.embedding[ch][levels[..., ch]] for ch in range(CHANNELS))
    return emb.astype(self.config.compute_dtype)

  def _sequences(self, images):
    """Both directions' levels [B, H·W, 3] in reading order."""
    check_images(images)
    b, h, w, _ = images.shape
    if (h, w) != tuple(self.image_shape):
      raise ValueError(f"images are {h}×{w}, the model was built for "
                       f"{self.image_shape[0]}×{self.image_shape[1]}: use "
                       f"PixelGLoMo(config, ({h}, {w})) with the same variables")
    levels = quantise(images, self.config.vocab_size).reshape(b, h * w, CHANNELS)
    return {"fw": levels, "bw": jnp.flip(levels, 1)}

  def graphs(self, images, train: bool = False) -> jax.Array:
    """uint8 [B, H, W, 3] -> [B, 2L, K, H·W, H·W] ([.., target, source], raster
    indices): the L forward layers (strictly lower-triangular), then the L
    backward layers mapped back to the original positions (strictly upper)."""
    seqs = self._sequences(images)
    g_fw = self.graph_fw(self._embed(seqs["fw"]), None, train)
    g_bw = self.graph_bw(self._embed(seqs["bw"]), None, train)
    return jnp.concatenate([g_fw, jnp.flip(g_bw, (-1, -2))], axis=1)

  def draw_positions(self, num_pixels: int):
    """Start positions (forward, backward), each int [n]: `sample_positions`
    drawn with replacement from [0, H·W − 1) with the 'sample' rng (shared by
    the batch), or, at 0, every position but the last (which predicts
    nothing)."""
    n = self.config.sample_positions
    if n == 0:
      everything = jnp.arange(num_pixels - 1)
      return everything, everything
    k1, k2 = jax.random.split(self.make_rng("sample"))
    return (jax.random.randint(k1, (n,), 0, num_pixels - 1),
            jax.random.randint(k2, (n,), 0, num_pixels - 1))

  def __call__(self, images, train: bool = True, positions=None):
    """The pretraining loss.

    Args:
      images: uint8 [B, H, W, 3].
      train: batch statistics (needs mutable=['batch_stats']) and dropout.
      positions: optional (forward, backward) int [n] raster start positions
        in each direction's reading order; drawn by `draw_positions` when
        omitted (needs a 'sample' rng if sample_positions > 0).

    Returns:
      (loss, metrics): loss = ½(forward + backward) mean cross-entropy per
      predicted channel value (nats); metrics = {loss, loss_fw, loss_bw,
      values} where values counts the predicted channel values of both
      directions.
    """
    c = self.config
    seqs = self._sequences(images)
    height, width = self.image_shape
    parts = {"fw": (self.graph_fw, self.features_fw, self.decoder_fw),
             "bw": (self.graph_bw, self.features_bw, self.decoder_bw)}
    if positions is None:
      positions = self.draw_positions(height * width)
    hidden, targets, weights = [], [], []
    for i, which in enumerate(("fw", "bw")):
      graph, feats, decoder = parts[which]
      levels, pos = seqs[which], jnp.asarray(positions[i])
      emb = self._embed(levels)
      h0 = top_features_at(graph, feats, emb, None, train, pos)        # [B, n, d]
      at, valid = window_targets(height, width, pos)                   # [n, 4]
      later = jnp.where(valid[None, :, :-1, None], emb[:, at[:, :-1]], 0)
      inputs = jnp.concatenate([jnp.zeros_like(later[:, :, :1]), later], axis=2)
      out = decoder(h0, inputs, train)                                 # [B, n, 4, d]
      hidden.append(out.reshape(-1, c.dim))
      targets.append(levels[:, at].reshape(-1, CHANNELS))             # [B·n·4, 3]
      weights.append(jnp.broadcast_to(valid[None], out.shape[:3]).reshape(-1)
                     .astype(jnp.float32))
    counts = [CHANNELS * jnp.sum(w) for w in weights]
    hidden = jnp.concatenate(hidden)
    scaled = jnp.concatenate([w / (2.0 * jnp.maximum(n, 1.0))
                              for w, n in zip(weights, counts)])
    all_targets = jnp.concatenate(targets)
    loss, ce = 0.0, 0.0
    for ch in range(CHANNELS):
      part, ce_ch = tied_softmax_cross_entropy(
          hidden, self.embedding[ch].astype(c.compute_dtype), all_targets[:, ch], scaled,
          c.loss_chunk_size)
      loss, ce = loss + part, ce + ce_ch
    return loss, direction_metrics(loss, ce, weights, counts, counted="values")

