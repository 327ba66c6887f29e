"""Text classification tasks of the GLoMo paper (§3): IMDB sentiment and NLI
(MNLI, SNLI), SST-2 sentiment, agreement judgements on the built-in
synthetic language (no download) and verb number on real English; task
definitions on `glomo_jax.downstream`, built of the text toolkit
(`glomo_jax.text`: words, GloVe, readers, splits, batching, text layers) and
the word graphs of `glomo_jax.graphs`, read through `glomo_jax.transfer`.

* `agreement`: subject–verb agreement judgements on the synthetic language.
* `verb_number`, `verb_number_sources`: verb number on real English (the
  raw-text rule, UD gold instances); `subject_arcs`: the subject-arc table.
* `text_classifier`: TextClassifier, the one-text classifier (BiGRU +
  linear + self-attention).
* `esim`: ESIM (+ self-attention after the inference composition).
* `config`: ClassificationConfig, every field of a run.
* `task`: ClassificationTask, the downstream task.
* `run`: run_classification, a whole run as one call.
"""
from glomo_jax.classification.agreement import AGREEMENT_LABELS, load_agreement_task
from glomo_jax.classification.config import ClassificationConfig
from glomo_jax.classification.esim import ESIM, soft_align
from glomo_jax.classification.run import build_model, load_task_data, run_classification
from glomo_jax.classification.task import ClassificationTask
from glomo_jax.classification.text_classifier import TextClassifier

__all__ = [
    "AGREEMENT_LABELS", "ClassificationConfig", "ClassificationTask", "ESIM", "TextClassifier",
    "build_model", "load_agreement_task", "load_task_data", "run_classification", "soft_align",
]
