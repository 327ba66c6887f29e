"""`DownstreamConfig`: the fields every downstream run's config has (its
variant, the predictor it reads, the optimiser, the loop's settings: length,
evaluations, checkpoints, mesh, compiles; seeds), their checks, and what a
resumed run may change.

A task's config subclasses it, adds its data and model fields, sets
`VARIANTS`, and extends `check` (calling this one).
"""
from __future__ import annotations

import dataclasses

from glomo_jax.config import DictConfig
from glomo_jax.downstream.options import DOWNSTREAM_MOVED_FIELDS, OptimOptions
from glomo_jax.train.config import DOWNSTREAM_LOOP, LoopOptions
from glomo_jax.transfer.options import TEXT_VARIANTS, VARIANTS, check_variant

# Fields a resumed run may change: how long it trains and how often it
# reports or saves, where its graph caches live, and the order in which the
# graph transfer computes the same numbers. With a cosine schedule the length
# is the schedule's, so it may not change.
RESUMABLE_CHANGES = ("loop.num_steps", "loop.epochs", "loop.log_every",
                     "loop.checkpoint_every", "graph_cache_dir", "model.transfer.apply_as",
                     "transfer.apply_as")   # the text and SQuAD models' path; CIFAR's
LENGTH = ("loop.num_steps", "loop.epochs")


@dataclasses.dataclass(frozen=True)
class DownstreamConfig(DictConfig):
  """Attributes:
    variant: what is transferred (`glomo_jax.transfer.options`); one of
      the task's `VARIANTS`.
    predictor_export: the graph predictor's export (the variants that read
      graphs; `glomo_jax.export`).
    optim: the optimiser and batches (`OptimOptions`).
    loop: the training length (num_steps, else epochs: default one epoch),
      evaluations on validation (eval_every; default once an epoch), early
      stopping (patience), progress lines (log_every), checkpoints
      (checkpoint_every: default at each evaluation, keep_checkpoints), the
      best variables kept (keep_best), the mesh (mesh_data: data-parallel
      devices, -1: all) and cheap compiles (compile_fast: CPU smoke runs);
      `LoopOptions`, with the defaults of `DOWNSTREAM_LOOP`.
    seed: initialisation, dropout, shuffling (and augmentation).
    data_seed: validation carve, subsets and random word vectors.
  """
  VARIANTS = TEXT_VARIANTS
  MOVED_FIELDS = DOWNSTREAM_MOVED_FIELDS

  variant: str = "baseline"
  predictor_export: str | None = None
  optim: OptimOptions = OptimOptions()
  loop: LoopOptions = DOWNSTREAM_LOOP
  seed: int = 0
  data_seed: int = 0

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
