"""`GLoMoResNet`: graphs between pixels transferred into a CIFAR ResNet
(paper §3.5, Table 3).

  H  = normalised pixels                                 [B, H, W, 3]
  Hs = H box-averaged by `graph_downsample` = f          [B, H/f · W/f, 3]
  [Hs ; gated] = GraphTransfer(Hs, graphs)               (glomo_jax.transfer)
  x  = [H ; gated upsampled ×f (nearest)]                [B, H, W, 3 + features]
  logits = ResNet(x)

The graphs [B, 2L, K, n, n] (n = H/f · W/f pixels in raster order, [..,
target, source]) come from the frozen pixel predictor run on the images
downsampled by f; with f = 1 (the paper) the transfer acts on the pixels
themselves. Given the predictor as `graph_fn`, the graphs are computed and
applied to Hs (`propagated_candidates`) `graph_chunk` images at a time
(`lax.map`), so only [chunk, 2L, K, n, n] graphs exist at once: at 32×32
(n = 1,024) a dense graph is 1M entries per head and layer. Hs is an input,
so nothing needs the graphs in the backward pass. f = 2 is the CPU-scale
variant: a predictor pretrained at 16×16 gives graphs between 16×16 pixels of the 32×32
images, and each pixel's gated features are shared by its 2×2 block.

Variants (`variant`): 'baseline' (the ResNet on H), 'uniform' (the
uniform-graph ablation: mean of Hs over the image), 'glomo' (the predictor's
graphs: mixtures of G^l and Λ^l). The transfer is built from `transfer`, a
`TransferOptions`; its `features` is the width of the gated part (default 3,
the width of H, as `GatedFusion`).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from glomo_jax.images.data import downsample
from glomo_jax.images.resnet import resnet
from glomo_jax.transfer.candidates import propagated_candidates
from glomo_jax.transfer.options import PIXEL_VARIANTS, TransferOptions, variant_of

# CIFAR-10 training-set channel means and standard deviations (0–1 scale)
CIFAR_MEAN = np.array([0.4914, 0.4822, 0.4465], np.float32)
CIFAR_STD = np.array([0.2470, 0.2435, 0.2616], np.float32)


def normalise(images) -> jax.Array:
  """uint8 [..., 3] -> float32 (v / 255 − mean) / std per channel."""
  return (jnp.asarray(images, jnp.float32) / 255.0 - CIFAR_MEAN) / CIFAR_STD


class PixelTransferInput(nn.Module):
  """x = [H ; gated upsampled] (or H for 'baseline'): the ResNet's input
  (module docstring). Fields as `GLoMoResNet`."""
  variant: str = "baseline"
  transfer: TransferOptions = TransferOptions()
  graph_downsample: int = 1
  graph_chunk: int | None = None

  @nn.compact
  def __call__(self, images, graphs=None, graph_fn=None) -> jax.Array:
    """Args:
      images: uint8 [B, H, W, 3].
      graphs: [B, 2L, K, n, n] for 'glomo', or None with `graph_fn`.
      graph_fn: uint8 images [b, H/f, W/f, 3] -> their graphs (the frozen
        predictor), called on chunks of `graph_chunk` images (None: all).

    Returns:
      float32 [B, H, W, 3 (+ features)].
    """
    variant = variant_of(self.variant, PIXEL_VARIANTS)
    x = normalise(images)
    if variant.at is None:
      return x
    f = self.graph_downsample
    small = downsample(x, f)
    b, h, w, c = small.shape
    flat = small.reshape(b, h * w, c)
    candidates = None
    if variant.reads_graphs and graph_fn is not None:
      candidates = self._chunked_candidates(downsample(images, f), flat, graph_fn)
    elif variant.reads_graphs and (graphs is None or graphs.shape[-1] != h * w):
      raise ValueError(f"'glomo' needs graphs between the {h}×{w} = {h * w} pixels of "
                       f"the images downsampled by {f}, got "
                       f"{None if graphs is None else graphs.shape}")
    out = self.transfer.layer(self.variant)(flat, graphs, None, candidates)
    gated = out[..., c:].reshape(b, h, w, -1)                      # raster t = r·w + c
    gated = jnp.repeat(jnp.repeat(gated, f, axis=1), f, axis=2)
    return jnp.concatenate([x, gated.astype(x.dtype)], axis=-1)

  def _chunked_candidates(self, small_images, flat, graph_fn):
    """(forward, backward) C_c Hs [B, C, n, 3], `graph_chunk` images at a time
    (the batch padded to a multiple; strided rows, so that each chunk spans
    the batch's shards when it is split over devices)."""
    b, n = flat.shape[:2]
    chunk = min(self.graph_chunk or b, b)
    steps = -(-b // chunk)
    mask = jnp.ones((chunk, n), bool)

    def one(args):
      images, h = args
      return propagated_candidates(graph_fn(images), h, mask, self.transfer.layers_for())

    def split(a):   # padded to steps·chunk rows; step i takes rows i, i + steps, …
      a = jnp.pad(a, [(0, steps * chunk - b)] + [(0, 0)] * (a.ndim - 1))
      return a.reshape((chunk, steps) + a.shape[1:]).swapaxes(0, 1)

    def join(a):    # [steps, chunk, ...] -> [b, ...]
      return a.swapaxes(0, 1).reshape((steps * chunk,) + a.shape[2:])[:b]
    fw, bw = jax.lax.map(one, (split(small_images), split(flat)))
    return jax.lax.stop_gradient(join(fw)), jax.lax.stop_gradient(join(bw))


class GLoMoResNet(nn.Module):
  """The module docstring's network: `PixelTransferInput` ('input'), then the
  CIFAR ResNet ('resnet').

  Attributes:
    variant: 'baseline', 'uniform' or 'glomo'.
    depth, width, num_classes: the ResNet (`glomo_jax.images.resnet`).
    transfer: the GraphTransfer's options (num_layers: L of the predictor).
    graph_downsample: f, the factor between the images and the graphs' pixels.
    graph_chunk: images whose graphs exist at once with a `graph_fn`.
  """
  variant: str = "baseline"
  depth: int = 18
  width: int = 64
  num_classes: int = 10
  transfer: TransferOptions = TransferOptions()
  graph_downsample: int = 1
  graph_chunk: int | None = None

  @nn.compact
  def __call__(self, images, graphs=None, train: bool = False, graph_fn=None) -> jax.Array:
    """images uint8 [B, H, W, 3]; graphs [B, 2L, K, n, n] or graph_fn for
    'glomo' (`PixelTransferInput`) -> logits float32 [B, num_classes]."""
    x = PixelTransferInput(self.variant, self.transfer, self.graph_downsample,
                           self.graph_chunk, name="input")(images, graphs, graph_fn)
    return resnet(self.depth, self.num_classes, self.width, name="resnet")(x, train)
