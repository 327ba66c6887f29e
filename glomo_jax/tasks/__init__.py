"""Text classification tasks of the GLoMo paper (§3): IMDB sentiment and NLI
(MNLI, SNLI), SST-2 sentiment, and agreement judgements on the built-in
synthetic language (no download); task definitions on `glomo_jax.downstream`.

The words, GloVe, readers, splits, batching and text layers are in
`glomo_jax.text`.

* `agreement`: subject–verb agreement judgements on the synthetic language.
* `text_classifier`: TextClassifier, the one-text classifier (BiGRU +
  linear + self-attention).
* `esim`: ESIM (+ self-attention after the inference composition).
* `graphs`: the word graphs of a task's splits (graph caches).
* `config`: TransferConfig, every field of a run.
* `classification`: ClassificationTask, the downstream task.
* `transfer`: run_transfer, a whole run as one call.
"""
from glomo_jax.tasks.agreement import AGREEMENT_LABELS, load_agreement_task
from glomo_jax.text.batching import batches, make_batch
from glomo_jax.tasks.classification import ClassificationTask
from glomo_jax.tasks.config import TransferConfig
from glomo_jax.text.readers import load_task, read_split
from glomo_jax.text.splits import Split, TaskData, split_validation
from glomo_jax.tasks.esim import ESIM, soft_align
from glomo_jax.text.glove import Coverage, embedding_matrix, read_glove, write_glove
from glomo_jax.graphs.task_graphs import TaskGraphs
from glomo_jax.text.layers import embedding_initializer
from glomo_jax.tasks.text_classifier import TextClassifier
from glomo_jax.tasks.transfer import build_model, load_task_data, run_transfer
from glomo_jax.text.words import PAD_ID, UNK_ID, Vocabulary, tokenize

__all__ = [
    "AGREEMENT_LABELS", "ClassificationTask", "Coverage", "ESIM", "PAD_ID", "Split",
    "TaskData", "TaskGraphs", "TextClassifier", "TransferConfig", "UNK_ID", "Vocabulary",
    "batches", "build_model", "embedding_initializer", "embedding_matrix",
    "load_agreement_task", "load_task", "load_task_data", "make_batch", "read_glove",
    "read_split", "run_transfer", "soft_align", "split_validation", "tokenize",
    "write_glove",
]
