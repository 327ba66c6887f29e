"""Downstream tasks of the GLoMo paper (§3): IMDB sentiment and NLI (MNLI, SNLI),
and agreement judgements on the built-in synthetic language (no download).

* `words`: word tokenizer and Vocabulary (pad 0, unk 1).
* `glove`: GloVe text files → embedding matrix of a Vocabulary.
* `datasets`: TFDS / JSON-lines readers, validation split, padded batches.
* `agreement`: subject–verb agreement judgements on the synthetic language.
* `layers`: masked softmax, padding-safe BiRNN, self-attention, pooling.
* `imdb`: IMDBClassifier (BiGRU + linear + self-attention).
* `esim`: ESIM (+ self-attention after the inference composition).
* `train`: train_classifier (early stopping, graphs fed per batch).
"""
from glomo_jax.tasks.agreement import AGREEMENT_LABELS, load_agreement_task
from glomo_jax.tasks.datasets import (Split, TaskData, batches, load_task, make_batch,
                                      read_split, split_validation)
from glomo_jax.tasks.esim import ESIM, soft_align
from glomo_jax.tasks.glove import Coverage, embedding_matrix, read_glove
from glomo_jax.tasks.imdb import IMDBClassifier
from glomo_jax.tasks.layers import embedding_initializer
from glomo_jax.tasks.train import (GraphCache, evaluate, fit_graphs, precomputed_graphs,
                                   predictor_graph_fn, train_classifier)
from glomo_jax.tasks.words import PAD_ID, UNK_ID, Vocabulary, tokenize

__all__ = [
    "AGREEMENT_LABELS", "Coverage", "ESIM", "GraphCache", "IMDBClassifier", "PAD_ID", "Split", "TaskData",
    "UNK_ID", "Vocabulary", "batches", "embedding_initializer", "embedding_matrix",
    "evaluate", "fit_graphs", "load_agreement_task", "load_task",
    "make_batch", "precomputed_graphs",
    "predictor_graph_fn", "read_glove",
    "read_split", "soft_align", "split_validation", "tokenize", "train_classifier",
]
