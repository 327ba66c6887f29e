"""The shared text toolkit of the text tasks (classification, SQuAD): words,
word vectors, the readers of labelled text, splits, batches and the text
layers models are built of.

* `words`: word tokenizer and Vocabulary (pad 0, unk 1).
* `glove`: GloVe text files → embedding matrix of a Vocabulary.
* `word_vectors`: co-occurrence counts, PPMI, SVD: vectors for words GloVe lacks.
* `splits`: Split (one split's tokenized examples), TaskData (a task's
  splits), the seeded validation split and subsets.
* `readers`: TFDS / JSON-lines / TSV readers (TaskSpec, read_split, load_task).
* `batching`: padded batches of a split.
* `layers`: masked softmax, padding-safe BiRNN, self-attention, pooling.
* `fields`: TextFields, the text and graph-cache fields every text config
  shares; VocabOptions; a run's set-up (task_vocabulary, word_table).
"""
from glomo_jax.text.batching import batches, make_batch, pad_labels, word_targets
from glomo_jax.text.fields import TextFields, VocabOptions, task_vocabulary, word_table
from glomo_jax.text.glove import Coverage, embedding_matrix, read_glove, write_glove
from glomo_jax.text.layers import embedding_initializer
from glomo_jax.text.readers import TASKS, TaskSpec, load_task, read_split
from glomo_jax.text.splits import Split, TaskData, random_subset, split_validation
from glomo_jax.text.words import PAD_ID, UNK_ID, Vocabulary, tokenize

__all__ = [
    "Coverage", "PAD_ID", "Split", "TASKS", "TaskData", "TaskSpec", "TextFields", "UNK_ID",
    "VocabOptions", "Vocabulary", "batches", "embedding_initializer", "embedding_matrix",
    "load_task", "make_batch", "pad_labels", "random_subset", "read_glove", "read_split",
    "split_validation", "task_vocabulary", "tokenize", "word_table", "word_targets",
    "write_glove",
]
