"""The one training loop and its parts: mesh and shardings, train state,
steps, checkpoints, preemption, progress, and `ExampleBatches` (batches.py:
the resumable iterator over a split of examples, its batch order). Tasks live
in `glomo_jax.pretraining` (text, pixels) and on `glomo_jax.downstream`
(`glomo_jax.classification`, `glomo_jax.squad`, `glomo_jax.images.cifar`)."""
from glomo_jax.train.batches import ExampleBatches, batch_order, host_rows
from glomo_jax.train.checkpoint import Checkpointer, UnrestorableCheckpointError
from glomo_jax.train.config import LoopConfig
from glomo_jax.train.loop import NonFiniteLossError, run
from glomo_jax.train.optimizer import make_optimizer
from glomo_jax.train.sharding import batch_sharding, make_mesh, state_shardings
from glomo_jax.train.state import TrainState
from glomo_jax.train.step import create_state, init_state, state_creator, step_rngs, train_step
from glomo_jax.train.task import Batches, RunContext, Task
from glomo_jax.train.workdir import WorkdirInUseError, hold_workdir

__all__ = [
    "Batches", "Checkpointer", "ExampleBatches", "batch_order", "host_rows", "LoopConfig", "NonFiniteLossError", "RunContext", "Task",
    "TrainState", "UnrestorableCheckpointError", "WorkdirInUseError", "batch_sharding",
    "create_state", "hold_workdir", "init_state", "make_mesh", "make_optimizer", "run",
    "state_creator", "state_shardings", "step_rngs", "train_step",
]
