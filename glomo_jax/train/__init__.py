"""Sharded pretraining: mesh, train state, steps, checkpoints, the loop."""
from glomo_jax.train.checkpoint import Checkpointer
from glomo_jax.train.config import TrainConfig
from glomo_jax.train.optimizer import PlateauRule, make_optimizer
from glomo_jax.train.sharding import batch_sharding, make_mesh, state_shardings
from glomo_jax.train.state import TrainState
from glomo_jax.train.step import eval_step, train_step
from glomo_jax.train.trainer import NonFiniteLossError, train_and_evaluate
