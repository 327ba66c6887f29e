"""What a training run trains: the `Task` that `glomo_jax.train.loop.run` drives.

The loop owns everything generic (mesh and shardings, the train state,
checkpoints with exact resume, preemption, progress, TensorBoard, the
non-finite guard, best-checkpoint and early-stopping bookkeeping); a task
says what is trained, on what, and how it is scored. Pretraining
(`glomo_jax.pretraining`) and every downstream task (`glomo_jax.classification`) are
tasks.

Batches are dicts of numpy arrays holding this process's rows of a global
batch (leading axis); the loop places them on the mesh, split along that axis
over every device. Train batches come from an iterator with `state()` (a
small JSON-serialisable dict) and `restore(state)`, so a resumed run reads
exactly the batches the uninterrupted run would have read.
"""
from __future__ import annotations

import abc
import dataclasses
from typing import Any, Callable, Iterator, Mapping, Protocol

import jax
import optax


class Batches(Protocol):
  """A resumable iterator of host-local batches."""

  def __iter__(self) -> Iterator[dict]: ...
  def __next__(self) -> dict: ...
  def state(self) -> dict: ...
  def restore(self, state: Mapping[str, Any]) -> None: ...


# run_eval(batch) -> the task's eval_step outputs for one host-local batch, as
# numpy (the loop's compiled, sharded eval_step with the variables bound).
RunEval = Callable[[dict], dict]


class Task(abc.ABC):
  """Base class of tasks. Subclasses set the attributes and implement the
  abstract methods; `batch_spec` and the hooks are optional.

  Attributes:
    rng_streams: names of the per-step rngs `loss` reads (e.g. ('dropout',)).
    eval_splits: splits evaluated every `eval_every` steps and at the end; the
      loop's `select_metric` names one of their metrics as '<split>/<name>'.
    tokens_per_batch: shown as `<unit_name>`/s in the progress line (0: not shown).
    unit_name: what `tokens_per_batch` counts ('tokens', 'pixels').
    log_metrics: the train and evaluation metrics shown on the console (None:
      all); TensorBoard gets every one.
    batch_flag: the flag of the global batch size, named when a program does
      not fit the devices' memory (`glomo_jax.train.memory`); kernels_flag:
      the flag of the model's kernels (reference or fused) where it has one.
  """
  rng_streams: tuple[str, ...] = ("dropout",)
  eval_splits: tuple[str, ...] = ()
  tokens_per_batch: int = 0
  unit_name: str = "tokens"
  log_metrics: tuple[str, ...] | None = None
  batch_flag: str = "--config.optim.batch_size"
  kernels_flag: str | None = None

  # ---- model ------------------------------------------------------------------
  @abc.abstractmethod
  def init_variables(self, rng: jax.Array) -> dict:
    """{'params': ..., 'batch_stats': ... (optional)}; traced under jit."""

  @abc.abstractmethod
  def optimizer(self) -> optax.GradientTransformation:
    """The optimiser of the parameters (the loop scales its updates by the
    state's lr_scale)."""

  @abc.abstractmethod
  def loss(self, variables: dict, batch: dict, rngs: dict
           ) -> tuple[jax.Array, dict, Any]:
    """(scalar loss, metrics {name: scalar}, updated batch_stats) of a
    training batch; `rngs` holds one key per `rng_streams` entry."""

  # ---- data -------------------------------------------------------------------
  @abc.abstractmethod
  def train_batches(self) -> Batches:
    """The resumable iterator of this process's training batches."""

  def batch_spec(self) -> dict[str, jax.ShapeDtypeStruct] | None:
    """Global shapes of every training batch when they are fixed: the loop
    then compiles the step before it builds the state. None: compiled at
    each new batch shape."""
    return None

  # ---- evaluation -------------------------------------------------------------
  @abc.abstractmethod
  def eval_step(self, variables: dict, batch: dict) -> dict:
    """Pure function of one batch (the loop jits it); returns arrays that
    `evaluate` accumulates (e.g. sums)."""

  @abc.abstractmethod
  def evaluate(self, split: str, run_eval: RunEval) -> dict[str, float]:
    """Metrics of one split: feed its batches to `run_eval`, accumulate."""

  # ---- hooks ------------------------------------------------------------------
  def check_resume(self, workdir: str) -> None:
    """When `workdir` holds checkpoints, before anything compiles: raise
    (e.g. ValueError) if this task must not resume that run, such as a run
    of another config (`glomo_jax.train.run_config.check_run_config`)."""

  def on_start(self, ctx: "RunContext") -> None:
    """After the state is restored or initialised, before the first step."""

  def on_end(self, ctx: "RunContext") -> dict:
    """After the last step (not after a preemption); its dict joins the
    run's summary."""
    return {}


@dataclasses.dataclass
class RunContext:
  """What the loop hands to a task's hooks.

  Attributes:
    workdir: the run directory. is_main: process 0 (writes files).
    mesh: the device mesh. state: the current TrainState.
    history: the evaluations so far, [{'step', 'train': {...}, split: {...}}].
    best: {'value', 'step'} of the selection metric's best evaluation, or {}.
    evaluate: evaluate(split, variables=None) -> metrics (default: the
      state's variables).
    best_variables: the variables saved at the best evaluation (needs
      LoopConfig.keep_best).
  """
  workdir: str
  is_main: bool
  mesh: Any
  state: Any
  history: list
  best: dict
  evaluate: Callable[..., dict]
  best_variables: Callable[[], dict]
