"""ResNet-18 / ResNet-34 in their CIFAR form (He et al. 2016, as in the
widely used kuangliu/pytorch-cifar layout the GLoMo paper's Table 3 numbers
match): a 3×3 stem convolution of stride 1 and no max-pool, four stages of
basic blocks (widths w, 2w, 4w, 8w; the first block of stages 2–4 has stride
2 and a 1×1 convolution + BatchNorm shortcut), global average pooling, one
dense layer. w = 64 gives the published models (ResNet-18: 11,173,962
parameters for 10 classes); a smaller `width` is the CPU-scale model.

Input [batch, H, W, C] (any C: the GLoMo transfer widens the input from the
3 pixel channels to 3 + gated features); BatchNorm statistics are in the
'batch_stats' collection (momentum 0.9, epsilon 1e-5, PyTorch's).
"""
from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

STAGES = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3)}


class BasicBlock(nn.Module):
  """conv3×3 → BN → ReLU → conv3×3 → BN, plus the shortcut, → ReLU."""
  features: int
  strides: int = 1

  @nn.compact
  def __call__(self, x: jax.Array, train: bool) -> jax.Array:
    norm = lambda name: nn.BatchNorm(use_running_average=not train, momentum=0.9,  # noqa: E731
                                     epsilon=1e-5, name=name)
    conv = lambda f, k, s, name: nn.Conv(f, (k, k), (s, s), padding=k // 2,  # noqa: E731
                                         use_bias=False, name=name)
    y = nn.relu(norm("bn1")(conv(self.features, 3, self.strides, "conv1")(x)))
    y = norm("bn2")(conv(self.features, 3, 1, "conv2")(y))
    if self.strides != 1 or x.shape[-1] != self.features:
      x = norm("shortcut_bn")(conv(self.features, 1, self.strides, "shortcut_conv")(x))
    return nn.relu(x + y)


class CifarResNet(nn.Module):
  """ResNet of `stages` basic blocks per stage (module docstring).

  Attributes:
    stages: blocks per stage, e.g. (2, 2, 2, 2) for ResNet-18.
    num_classes: outputs.
    width: w, channels of the stem and the first stage (64 published).
  """
  stages: Sequence[int] = STAGES[18]
  num_classes: int = 10
  width: int = 64

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    """x: [batch, H, W, C] float -> logits [batch, num_classes] (float32)."""
    x = nn.Conv(self.width, (3, 3), padding=1, use_bias=False, name="stem_conv")(x)
    x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5,
                             name="stem_bn")(x))
    for stage, blocks in enumerate(self.stages):
      for block in range(blocks):
        strides = 2 if stage > 0 and block == 0 else 1
        x = BasicBlock(self.width * 2 ** stage, strides,
                       name=f"stage{stage + 1}_block{block + 1}")(x, train)
    x = jnp.mean(x, axis=(1, 2))
    return nn.Dense(self.num_classes, name="head")(x).astype(jnp.float32)


def resnet(depth: int, num_classes: int = 10, width: int = 64,
           name: str | None = None) -> CifarResNet:
  """CIFAR ResNet-`depth` (18 or 34)."""
  if depth not in STAGES:
    raise ValueError(f"ResNet depth {depth} is not one of {sorted(STAGES)}")
  return CifarResNet(STAGES[depth], num_classes, width, name=name)
