"""Causal 1-D convolution stacks (the key and query CNNs of the graph predictor).

Each block: zero the padding positions, causal Conv1d(d → d, kernel k),
normalisation, ReLU. Output position t depends only on inputs at positions
≤ t.

The authors' conv pads k−1 zeros on *both* sides (PyTorch
``Conv1d(padding=k-1)``), normalises all T+k−1 outputs with BatchNorm, then
keeps the first T; the batch statistics therefore include the k−1 tail
outputs. `norm='batch'` reproduces that exactly (needed to load their
weights). `norm='layer'` normalises each position over its channels.
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from glomo_jax.models.initializers import fan_in_uniform
from glomo_jax.ops.dense import dense

SCALE_INITS = ("ones", "uniform")


def causal_conv1d(x: jax.Array, kernel: jax.Array, left: int, right: int,
                  bias: jax.Array | None = None) -> jax.Array:
  """1-D convolution as im2col + one GEMM (`ops.dense`).

  x: [batch, T, c_in]; kernel: [k, c_in, c_out]; bias: optional [c_out]
  -> [batch, T + left + right − k + 1, c_out];
  output p = Σ_i x_padded[p + i] · kernel[i] (+ bias) with `left` / `right`
  zeros padded.
  Same result as `lax.conv_general_dilated`, but its kernel gradient is a GEMM
  too: XLA:CPU compiles the conv's kernel gradient into a windowed
  convolution that is far slower (benchmarks/RESULTS.md).
  """
  k = kernel.shape[0]
  xp = jnp.pad(x, ((0, 0), (left, right), (0, 0)))
  n = xp.shape[1] - k + 1
  cols = jnp.concatenate([xp[:, i:i + n] for i in range(k)], axis=-1)   # [B, n, k·c_in]
  return dense(cols, kernel.reshape(k * kernel.shape[1], kernel.shape[2]), bias)


class TorchBatchNorm(nn.Module):
  """BatchNorm over every axis but the last, with PyTorch's semantics.

  Training: normalise with the biased batch variance, update the running
  variance with the *unbiased* one (as torch does), running = momentum·running
  + (1 − momentum)·batch. Statistics live in the 'batch_stats' collection as
  `mean` and `var`.

  Attributes:
    momentum: weight of the old running statistics (torch momentum 0.1 ⇒ 0.9).
    epsilon: added to the variance.
    scale_init: the scale γ starts at 'ones' (PyTorch ≥ 0.4) or 'uniform',
      drawn from U(0, 1) as the authors' PyTorch 0.3.1 did.
  """
  momentum: float = 0.9
  epsilon: float = 1e-5
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32
  scale_init: str = "ones"

  @nn.compact
  def __call__(self, x: jax.Array, train: bool) -> jax.Array:
    """x: [..., channels] -> same shape."""
    c = x.shape[-1]
    if self.scale_init not in SCALE_INITS:
      raise ValueError(f"scale_init {self.scale_init!r} is not one of {list(SCALE_INITS)}")
    init = nn.initializers.ones if self.scale_init == "ones" else nn.initializers.uniform(1.0)
    scale = self.param("scale", init, (c,), self.param_dtype)
    bias = self.param("bias", nn.initializers.zeros, (c,), self.param_dtype)
    ra_mean = self.variable("batch_stats", "mean",
                            lambda: jnp.zeros((c,), self.param_dtype))
    ra_var = self.variable("batch_stats", "var",
                           lambda: jnp.ones((c,), self.param_dtype))
    stat_dtype = jnp.promote_types(x.dtype, jnp.float32)
    xs = x.astype(stat_dtype)
    if train:
      axes = tuple(range(x.ndim - 1))
      mean = jnp.mean(xs, axis=axes)
      var = jnp.mean(jnp.square(xs - mean), axis=axes)
      if not self.is_initializing():
        n = xs.size // c
        unbiased = var * (n / max(n - 1, 1))
        ra_mean.value = (self.momentum * ra_mean.value
                         + (1 - self.momentum) * mean.astype(self.param_dtype))
        ra_var.value = (self.momentum * ra_var.value
                        + (1 - self.momentum) * unbiased.astype(self.param_dtype))
    else:
      mean, var = ra_mean.value.astype(stat_dtype), ra_var.value.astype(stat_dtype)
    y = (xs - mean) * jax.lax.rsqrt(var + self.epsilon)
    y = y * scale.astype(stat_dtype) + bias.astype(stat_dtype)
    return y.astype(self.dtype)


def normalise(y: jax.Array, kind: str, train: bool, momentum: float, epsilon: float,
              dtype: Any, param_dtype: Any, name: str, scale_init: str = "ones") -> jax.Array:
  """The conv stacks' normalisation, inside a compact module: 'batch'
  (`TorchBatchNorm` over every axis but the last, γ from `scale_init`) or
  'layer' (per position)."""
  if kind == "batch":
    return TorchBatchNorm(momentum=momentum, epsilon=epsilon, dtype=dtype,
                          param_dtype=param_dtype, scale_init=scale_init, name=name)(y, train)
  return nn.LayerNorm(epsilon=epsilon, dtype=dtype, param_dtype=param_dtype, name=name)(y)


class NormedConv(nn.Module, kw_only=True):
  """The fields every conv stack shares (keyword-only): its normalisation
  and dtypes, from `ModelConfig` (`norm`, `bn_momentum`, `bn_epsilon`,
  `bn_scale_init`, `compute_dtype`, `params_dtype`).

  Attributes:
    norm: 'batch' (the authors') or 'layer'.
    bn_momentum, epsilon, bn_scale_init: `TorchBatchNorm`'s momentum,
      epsilon (LayerNorm's too) and scale_init.
    dtype: compute dtype; param_dtype: storage dtype of the parameters.
  """
  norm: str = "batch"
  bn_momentum: float = 0.9
  epsilon: float = 1e-5
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32
  bn_scale_init: str = "ones"

  def normalise(self, y: jax.Array, name: str, train: bool) -> jax.Array:
    """`normalise` with this module's fields, as its submodule `name`."""
    return normalise(y, self.norm, train, self.bn_momentum, self.epsilon, self.dtype,
                     self.param_dtype, name, self.bn_scale_init)

  def norm_fields(self) -> dict:
    """The shared fields, for a conv module built inside this one."""
    return dict(norm=self.norm, bn_momentum=self.bn_momentum, epsilon=self.epsilon,
                dtype=self.dtype, param_dtype=self.param_dtype,
                bn_scale_init=self.bn_scale_init)


class CausalConvBlock(NormedConv):
  """mask → causal Conv1d → norm → ReLU on channel-last input.

  Attributes:
    features: output channels.
    kernel_size: k.
    (and the keyword-only `NormedConv` fields.)
  """
  features: int
  kernel_size: int = 3

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array | None, train: bool) -> jax.Array:
    """x: [batch, T, d_in]; mask: [batch, T] (1 = real) or None -> [batch, T, features]."""
    b, t, c = x.shape
    k = self.kernel_size
    if mask is not None:
      x = x * mask[:, :, None].astype(x.dtype)
    kernel = self.param("kernel", fan_in_uniform(c * k), (k, c, self.features),
                        self.param_dtype)
    bias = self.param("bias", fan_in_uniform(c * k), (self.features,), self.param_dtype)
    # Left padding k−1 gives outputs 0..T−1 (position t sees ≤ t); for batch
    # norm the authors' k−1 extra right-side outputs join the statistics.
    right = k - 1 if self.norm == "batch" else 0
    y = causal_conv1d(x.astype(self.dtype), kernel.astype(self.dtype), k - 1, right, bias)
    return jax.nn.relu(self.normalise(y, "norm", train)[:, :t])


class CausalConvStack(NormedConv):
  """`num_layers` CausalConvBlocks of width `features` (and the keyword-only
  `NormedConv` fields)."""
  num_layers: int
  features: int
  kernel_size: int = 3

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array | None, train: bool) -> jax.Array:
    """x: [batch, T, d] -> [batch, T, features]; output t depends on inputs ≤ t."""
    for i in range(self.num_layers):
      x = CausalConvBlock(self.features, self.kernel_size, **self.norm_fields(),
                          name=f"block_{i}")(x, mask, train)
    return x
