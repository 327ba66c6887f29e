"""What every downstream task shares, on top of the training loop
(`glomo_jax.train`): a new kind of task is a config, a task and a run
function on these pieces (WORKSPACE.md, "Adding a downstream task").

* `config`: `DownstreamConfig`, the fields every task's config has (variant,
  predictor, optimiser, seeds, mesh), their checks and the resume rules.
* `options`: `OptimOptions` (optimiser and training length → the
  optimiser and the loop's `LoopConfig`) and `TfdsOptions`.
* From the loop (`glomo_jax.train.batches`, re-exported here):
  `ExampleBatches`, the resumable training iterator over a split,
  `batch_order`, `host_rows`.
* `task`: `DownstreamTask`, the loop's task with selection on validation,
  the held-out scores of the best variables and the recorded config.
* `scores`: classification sums and the sum-based evaluation of a split.
* `run`: `train_and_report` (the loop, then results.json), `load_predictor`.

The task definitions on it: text classification (`glomo_jax.classification`: IMDB,
SST-2, MNLI / SNLI, agreement), SQuAD (`glomo_jax.squad`), CIFAR-10
(`glomo_jax.images.cifar`).
"""
from glomo_jax.downstream.config import RESUMABLE_CHANGES, DownstreamConfig
from glomo_jax.downstream.options import OptimOptions, TfdsOptions
from glomo_jax.downstream.run import RESULTS_FILE, load_predictor, train_and_report
from glomo_jax.downstream.scores import classification_sums, mean_loss, summed_accuracy
from glomo_jax.downstream.task import VALIDATION, DownstreamTask
from glomo_jax.train.batches import ExampleBatches, batch_order, host_rows

__all__ = [
    "RESULTS_FILE", "RESUMABLE_CHANGES", "VALIDATION", "DownstreamConfig", "DownstreamTask",
    "ExampleBatches", "OptimOptions", "TfdsOptions", "batch_order", "classification_sums",
    "host_rows", "load_predictor", "mean_loss", "summed_accuracy", "train_and_report",
]
