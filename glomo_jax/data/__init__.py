"""Pretraining data: corpus -> SentencePiece tokens -> windows of the stream.

* `corpus`: documents from TFDS, local files (text / WikiText / jsonl, plain or
  compressed) or the synthetic corpus, chosen by a `CorpusSpec`.
* `synthetic`: a generated English-like corpus with planted, known arcs.
* `tokenizer`: SentencePiece training on a bounded sample, `Tokenizer`.
* `stream`: the tokenized corpus as one array (documents joined by eos),
  cached as .npy, with a held-out split.
* `windows`: bptt-token windows every `shift` tokens, shuffled per epoch,
  batched, sharded by host, resumable.

Typical use::

  tok = train_word_tokenizer(synthetic.vocabulary(), workdir + "/tok/")
  data = pretraining_data(CorpusSpec(source="synthetic"), tok, batch_size=32,
                          bptt=200, shift=100, cache_dir=workdir + "/cache")
  batch = next(data.train)  # {'tokens', 'mask', 'window_index', 'arc_*'}
"""
from glomo_jax.data import synthetic
from glomo_jax.data.corpus import (CorpusSpec, CorpusStats, iter_documents,
                                   load_documents)
from glomo_jax.data.stream import (TokenStream, build_stream, load_stream, save_stream,
                                   split_stream, tokenize_documents, tokenize_synthetic)
from glomo_jax.data.synthetic import (ARC_AGREEMENT, ARC_BRACKET, ARC_COPY, ARC_KINDS,
                                      ARC_NONE, SyntheticConfig, SyntheticDocument,
                                      generate_corpus, generate_document)
from glomo_jax.data.tokenizer import (EOS_ID, PAD_ID, UNK_ID, Tokenizer, train_tokenizer,
                                      train_word_tokenizer)
from glomo_jax.data.windows import (PretrainingData, WindowIterator, pretraining_data,
                                    window_starts)

__all__ = [
    "ARC_AGREEMENT", "ARC_BRACKET", "ARC_COPY", "ARC_KINDS", "ARC_NONE",
    "CorpusSpec", "CorpusStats", "EOS_ID", "PAD_ID", "PretrainingData",
    "SyntheticConfig", "SyntheticDocument", "TokenStream", "Tokenizer", "UNK_ID",
    "WindowIterator", "build_stream", "generate_corpus", "generate_document",
    "iter_documents", "load_documents", "load_stream",
    "pretraining_data", "save_stream", "split_stream", "synthetic",
    "tokenize_documents", "tokenize_synthetic", "train_tokenizer",
    "train_word_tokenizer", "window_starts",
]
