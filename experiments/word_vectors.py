r"""GloVe extended to a corpus's words: writes a GloVe text file for the tasks.

  python -m experiments.word_vectors \
      --corpus='../shared/data/wiki_text/enwiki2015_wikiextractor_part[1-8].jsonl.xz' \
      --glove=../shared/data/glove/glove.6B.100d.top2604.txt.gz \
      --output=runs/word_vectors/glove_wiki.100d.txt.gz

Every document is tokenised as the tasks tokenise (`glomo_jax.text.words`,
lower-cased); vectors are learned for the corpus's frequent words (PPMI and
SVD) and mapped into the GloVe file's space by a linear map fitted on the
words both have (`glomo_jax.text.word_vectors`). The output holds GloVe's
own vectors for GloVe's words and the mapped vectors for the others; pass it
as ``--config.glove_path``. Prints the corpus, the map's held-out cosine and
a few nearest neighbours; `--output_json` keeps these figures.
"""
from __future__ import annotations

import time

from absl import flags

from experiments import cli

_CORPUS = flags.DEFINE_list("corpus", None, "Glob(s) of the corpus files (text, jsonl, "
                            "wikitext; .gz/.xz), as `corpus.pattern` reads them.")
_TEXT_FIELD = flags.DEFINE_string("text_field", "text", "The text field of jsonl documents.")
_GLOVE = flags.DEFINE_string("glove", None, "GloVe text file to extend (.txt, .gz, .xz).")
_OUTPUT = flags.DEFINE_string("output", None, "GloVe text file to write (.gz compresses).")
_OUTPUT_JSON = flags.DEFINE_string("output_json", None, "Write the figures printed as JSON.")
_MAX_WORDS = flags.DEFINE_integer("max_words", 100_000, "Corpus words to learn vectors for.")
_MIN_COUNT = flags.DEFINE_integer("min_count", 5, "Ignore corpus words seen fewer times.")
_WINDOW = flags.DEFINE_integer("window", 5, "Co-occurrence window, each side.")
_SVD_DIM = flags.DEFINE_integer("svd_dim", 300, "Width of the corpus vectors before the map.")
_RIDGE = flags.DEFINE_float("ridge", 1.0, "L2 penalty of the linear map's weight.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the SVD start and the held-out words.")
_NEIGHBOURS = flags.DEFINE_list(
    "neighbours", ["film", "excellent", "physicist", "reluctantly", "boring"],
    "Words whose nearest neighbours are printed.")
flags.mark_flags_as_required(["corpus", "glove", "output"])


def main(argv):
  del argv
  from glomo_jax.data.corpus import CorpusSpec, CorpusStats, iter_documents  # noqa: PLC0415
  from glomo_jax.io import write_json  # noqa: PLC0415
  from glomo_jax.text.glove import read_glove, write_glove  # noqa: PLC0415
  from glomo_jax.text.word_vectors import extended_glove, nearest_words  # noqa: PLC0415
  from glomo_jax.text.words import tokenize  # noqa: PLC0415

  start = time.perf_counter()
  glove, dim = read_glove(_GLOVE.value)
  spec = CorpusSpec(source="files", pattern=tuple(_CORPUS.value),
                    text_field=_TEXT_FIELD.value)
  stats = CorpusStats()
  documents = (tokenize(text) for text in iter_documents(spec, stats=stats))
  result = extended_glove(documents, glove, max_words=_MAX_WORDS.value,
                          min_count=_MIN_COUNT.value, window=_WINDOW.value,
                          svd_dim=_SVD_DIM.value, ridge=_RIDGE.value, seed=_SEED.value)
  write_glove(_OUTPUT.value, result.vectors)
  seconds = time.perf_counter() - start
  linear_map = result.linear_map
  figures = {
      "documents": stats.documents, "tokens": result.corpus_tokens,
      "corpus_words": result.corpus_words, "nonzeros": result.nonzeros,
      "glove_words": len(glove), "dim": dim, "shared_words": linear_map.shared,
      "mapped_words": result.mapped, "written_words": len(result.vectors),
      "held_out_cosine": linear_map.held_out_cosine,
      "train_cosine": linear_map.train_cosine, "seconds": round(seconds, 1),
      "neighbours": nearest_words(result.vectors, _NEIGHBOURS.value),
  }
  print(f"{stats.documents} documents, {result.corpus_tokens} tokens, "
        f"{result.corpus_words} corpus words, {result.nonzeros} co-occurrence nonzeros")
  print(f"map fitted on {linear_map.shared} words shared with {_GLOVE.value}: cosine "
        f"{linear_map.held_out_cosine:.3f} on held-out words, "
        f"{linear_map.train_cosine:.3f} on the fitted ones")
  print(f"wrote {len(result.vectors)} {dim}-d vectors ({len(glove)} GloVe, "
        f"{result.mapped} mapped) to {_OUTPUT.value} in {seconds:.0f} s")
  for word, near in figures["neighbours"].items():
    print(f"  {word}: {', '.join(near)}")
  if _OUTPUT_JSON.value:
    write_json(_OUTPUT_JSON.value, figures)


if __name__ == "__main__":
  cli.run(main)
