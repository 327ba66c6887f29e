"""The train state: everything a checkpoint must hold for an exact resume."""
from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax


@flax.struct.dataclass
class TrainState:
  """step: int32 scalar; params, batch_stats (the model's other variables,
  e.g. BatchNorm statistics; {} without), opt_state: pytrees; rng: raw uint32
  key data of the run's base key (each step folds its step number in);
  lr_scale: float32 scalar multiplying every update (the plateau rule)."""
  step: jax.Array
  params: Any
  batch_stats: Any
  opt_state: Any
  rng: jax.Array
  lr_scale: jax.Array

  @classmethod
  def create(cls, variables, tx: optax.GradientTransformation, rng: jax.Array) -> "TrainState":
    params = variables["params"]
    return cls(step=jnp.zeros((), jnp.int32), params=params,
               batch_stats=variables.get("batch_stats", {}),
               opt_state=tx.init(params),
               rng=jax.random.key_data(rng) if jnp.issubdtype(rng.dtype, jax.dtypes.prng_key)
               else rng,
               lr_scale=jnp.ones((), jnp.float32))

  @property
  def variables(self) -> dict:
    """{'params', 'batch_stats'}: what the model's apply reads."""
    return {"params": self.params, "batch_stats": self.batch_stats}
