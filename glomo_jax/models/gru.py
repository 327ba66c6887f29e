"""GRU cell and stacked GRU with PyTorch's gate layout and math.

r = σ(W_ir x + b_ir + W_hr h + b_hr), z = σ(W_iz x + b_iz + W_hz h + b_hz),
n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn)), h' = (1 − z) ⊙ n + z ⊙ h.
Gates are stored fused in the order (r, z, n) so torch weights load directly:
``input_kernel = weight_ih.T`` [in, 3·hidden], ``hidden_kernel = weight_hh.T``.
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from glomo_jax.models.initializers import uniform
from glomo_jax.ops.dense import dense


def gru_update(gi: jax.Array, gh: jax.Array, h: jax.Array) -> jax.Array:
  """One GRU update from input gates gi and hidden gates gh (biases included).

  gi, gh: [..., 3·hidden]; h: [..., hidden] -> new h [..., hidden].
  """
  i_r, i_z, i_n = jnp.split(gi, 3, axis=-1)
  h_r, h_z, h_n = jnp.split(gh, 3, axis=-1)
  r = jax.nn.sigmoid(i_r + h_r)
  z = jax.nn.sigmoid(i_z + h_z)
  n = jnp.tanh(i_n + r * h_n)
  return n + z * (h - n)


class GRUCell(nn.Module):
  """A PyTorch-compatible GRU cell (torch ``nn.GRUCell`` / one ``nn.GRU`` layer).

  Attributes:
    in_features: input width.
    features: hidden width.
  """
  in_features: int
  features: int
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  def setup(self):
    bound = 1.0 / self.features ** 0.5
    h3 = 3 * self.features
    pd = self.param_dtype
    self.input_kernel = self.param("input_kernel", uniform(bound), (self.in_features, h3), pd)
    self.input_bias = self.param("input_bias", uniform(bound), (h3,), pd)
    self.hidden_kernel = self.param("hidden_kernel", uniform(bound), (self.features, h3), pd)
    self.hidden_bias = self.param("hidden_bias", uniform(bound), (h3,), pd)

  def input_gates(self, x: jax.Array) -> jax.Array:
    """x: [..., in] -> [..., 3·hidden] (for a whole sequence in one GEMM)."""
    dt = self.dtype
    return dense(x.astype(dt), self.input_kernel.astype(dt), self.input_bias)

  def hidden_gates(self, h: jax.Array) -> jax.Array:
    """h: [..., hidden] -> [..., 3·hidden]."""
    dt = self.dtype
    return dense(h.astype(dt), self.hidden_kernel.astype(dt), self.hidden_bias)

  def __call__(self, x: jax.Array, h: jax.Array) -> jax.Array:
    """x: [..., in], h: [..., hidden] -> new h [..., hidden]."""
    return gru_update(self.input_gates(x), self.hidden_gates(h), h.astype(self.dtype))


class GRUStack(nn.Module):
  """A multi-layer GRU (torch ``nn.GRU(batch_first=True)``) over short sequences.

  Attributes:
    features: width of every layer (input width = features too).
    num_layers: depth.
  """
  features: int
  num_layers: int
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  def setup(self):
    for layer in range(self.num_layers):   # parameters under layer_0, layer_1, …
      setattr(self, f"layer_{layer}", GRUCell(self.features, self.features, self.dtype,
                                              self.param_dtype))

  def input_gates(self, x: jax.Array) -> jax.Array:
    """The first layer's input gates (bias included): [..., features] ->
    [..., 3·features]. Lets a caller compute them once per sequence position
    and hand them to `__call__` (`first_gates`) for windows that overlap."""
    return self.layer_0.input_gates(x)

  def __call__(self, x: jax.Array | None, h0: jax.Array,
               first_gates: jax.Array | None = None) -> jax.Array:
    """Top-layer outputs [N, steps, features].

    Args:
      x: [N, steps, features] inputs; None when `first_gates` is given.
      h0: [num_layers, N, features] or [N, features] (the same start for
        every layer).
      first_gates: optional [N, steps, 3·features], the first layer's input
        gates `input_gates(x)`, computed by the caller.

    The steps are unrolled (the decoder runs D ≈ 3 steps); each layer's input
    gates for all steps come from one GEMM.
    """
    if (x is None) == (first_gates is None):
      raise ValueError("give exactly one of x and first_gates")
    out = x
    for layer in range(self.num_layers):
      cell = getattr(self, f"layer_{layer}")
      gi = first_gates if layer == 0 and first_gates is not None else cell.input_gates(out)
      h = (h0[layer] if h0.ndim == 3 else h0).astype(self.dtype)
      steps = []
      for s in range(gi.shape[1]):
        h = gru_update(gi[:, s], cell.hidden_gates(h), h)
        steps.append(h)
      out = jnp.stack(steps, axis=1)
    return out
