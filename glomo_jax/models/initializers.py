"""PyTorch's default initialisations, so a fresh glomo_jax model starts where
the authors' did: Linear/Conv weights and biases U(±1/sqrt(fan_in)), GRU
U(±1/sqrt(hidden)), embedding U(±0.1)."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def uniform(bound: float):
  """U(-bound, bound) for any shape."""
  def init(key, shape, dtype=jnp.float32):
    return jax.random.uniform(key, shape, dtype, -bound, bound)
  return init


def fan_in_uniform(fan_in: int):
  """PyTorch nn.Linear / nn.Conv1d default: U(±1/sqrt(fan_in)) for weight and bias."""
  return uniform(1.0 / float(fan_in) ** 0.5)
