"""`DownstreamConfig`: the fields every downstream run's config has (its
variant, the predictor it reads, the optimiser and training length, seeds,
mesh, compiles), their checks, and what a resumed run may change.

A task's config subclasses it, adds its data and model fields, sets
`VARIANTS`, and extends `check` (calling this one).
"""
from __future__ import annotations

import dataclasses

from glomo_jax.config import DictConfig
from glomo_jax.downstream.options import OptimOptions
from glomo_jax.transfer.options import TEXT_VARIANTS, VARIANTS, check_variant

# Fields a resumed run may change: how long it trains and how often it
# reports or saves, where its graph caches live, and the order in which the
# graph transfer computes the same numbers. With a cosine schedule the length
# is the schedule's, so it may not change.
RESUMABLE_CHANGES = ("optim.steps", "optim.epochs", "optim.log_every",
                     "optim.checkpoint_every", "graph_cache_dir", "model.transfer.apply_as",
                     "transfer.apply_as")   # the text and SQuAD models' path; CIFAR's
LENGTH = ("optim.steps", "optim.epochs")


@dataclasses.dataclass(frozen=True)
class DownstreamConfig(DictConfig):
  """Attributes:
    variant: what is transferred (`glomo_jax.transfer.options`); one of
      the task's `VARIANTS`.
    predictor_export: the graph predictor's export (the variants that read
      graphs; `glomo_jax.export`).
    optim: optimiser, training length and evaluations.
    seed: initialisation, dropout, shuffling (and augmentation).
    data_seed: validation carve, subsets and random word vectors.
    mesh_data: data-parallel devices (-1: all).
    compile_fast: cheap XLA compiles (CPU smoke runs).
  """
  VARIANTS = TEXT_VARIANTS

  variant: str = "baseline"
  predictor_export: str | None = None
  optim: OptimOptions = OptimOptions()
  seed: int = 0
  data_seed: int = 0
  mesh_data: int = -1
  compile_fast: bool = False

  @property
  def reads_graphs(self) -> bool:
    """Whether the variant reads a predictor's graphs."""
    return VARIANTS[self.variant].reads_graphs if self.variant in VARIANTS else False

  def check(self) -> None:
    """Raises ValueError naming what cannot work, and how to fix it."""
    check_variant(self.variant, self.VARIANTS)
    self.optim.check()

  def check_predictor(self, writer: str = "experiments.pretrain / experiments.export") -> None:
    """Raises ValueError when the variant reads graphs and no export is named."""
    if self.reads_graphs and not self.predictor_export:
      raise ValueError(f"variant {self.variant!r} needs --config.predictor_export=DIR "
                       f"(an export of {writer})")

  def resumable(self) -> tuple[str, ...]:
    """The fields a resumed run may change (`RESUMABLE_CHANGES`)."""
    if self.optim.schedule == "cosine":
      return tuple(k for k in RESUMABLE_CHANGES if k not in LENGTH)
    return RESUMABLE_CHANGES
