"""Word vectors for the words GloVe lacks, learned from raw text.

The downstream tasks read GloVe (`glomo_jax.text.glove`). Where only part of
GloVe is at hand (this repository's data holds its 2,604 most frequent
words), the rest of a task's words would get random vectors. This module
learns vectors for every frequent word of a corpus and maps them into
GloVe's space, so a task vocabulary gets GloVe where GloVe has the word and
the mapped corpus vector elsewhere:

1. `cooccurrence_counts`: word-context counts within a symmetric window,
   each pair weighted 1/distance (GloVe's weighting).
2. `positive_pmi`: PPMI(w, c) = max(0, log P(w, c) / (P(w) P_α(c))), with
   the context distribution smoothed, P_α(c) ∝ count(c)^α, α = 0.75
   (Levy, Goldberg & Dagan 2015).
3. `svd_vectors`: the rank-k truncated SVD of the PPMI matrix, word vectors
   U_k S_k^½ (the same paper's eigenvalue weighting p = 0.5).
4. `fit_linear_map`: a ridge least-squares affine map from these vectors to
   GloVe's, fitted on the words both have (Mikolov, Le & Sutskever 2013's
   translation matrix); its held-out cosine says how well the spaces agree.

`extended_glove` runs 1–4 on tokenised documents and returns the table:
GloVe's own vector for every word GloVe has, the mapped vector for every
other corpus word. `experiments/word_vectors.py` writes it as a GloVe text
file, which `--config.glove_path` reads like any other.

Matrices: rows are words (the target of a context), columns are contexts;
the counts are symmetric because the window is.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import time
from typing import Iterable, Mapping, Sequence

import numpy as np
import scipy.sparse
import scipy.sparse.linalg

logger = logging.getLogger(__name__)

def corpus_vocabulary(documents: Iterable[Sequence[str]], max_words: int,
                      min_count: int) -> tuple[list[str], list[np.ndarray]]:
  """The corpus's most frequent words and each document's ids.

  Args:
    documents: tokenised documents (lists of words).
    max_words: keep at most this many words (by descending count; ties
      alphabetical).
    min_count: drop words seen fewer times.

  Returns:
    (words, ids): ids[d] is int32 [len(documents[d])], the index of each token
    in `words`, or -1 for a dropped word (kept so that distances stay true).
  """
  provisional: dict[str, int] = {}
  encoded, tokens_read = [], 0
  for tokens in documents:
    encoded.append(np.fromiter((provisional.setdefault(t, len(provisional)) for t in tokens),
                               np.int64, len(tokens)))
    tokens_read += len(tokens)
    if len(encoded) % 1000 == 0:
      logger.info("read %d documents, %d tokens, %d distinct words", len(encoded),
                  tokens_read, len(provisional))
  counts = np.bincount(np.concatenate(encoded), minlength=len(provisional)) if encoded else []
  names = list(provisional)
  order = np.asarray(sorted((i for i in range(len(names)) if counts[i] >= min_count),
                            key=lambda i: (-counts[i], names[i]))[:max_words], np.int64)
  remap = np.full(len(names), -1, np.int32)
  remap[order] = np.arange(len(order), dtype=np.int32)
  return [names[i] for i in order], [remap[ids] for ids in encoded]


def cooccurrence_counts(documents: Iterable[np.ndarray], vocab_size: int, window: int,
                        chunk_pairs: int = 20_000_000) -> scipy.sparse.csr_matrix:
  """Symmetric co-occurrence counts, each pair weighted 1 / distance.

  Args:
    documents: int [length] word ids per document; -1 marks a word outside
      the vocabulary (it counts for distances, never as a word or context).
    vocab_size: V.
    window: contexts up to this many positions left and right.
    chunk_pairs: pairs summed at a time (bounds memory, not the result).

  Returns:
    float64 csr [V, V]: X[w, c] = Σ over occurrences of c within `window`
    positions of w of 1 / |distance|. Symmetric.
  """
  if window < 1:
    raise ValueError(f"window must be at least 1, got {window}")
  total = scipy.sparse.csr_matrix((vocab_size, vocab_size))
  rows, cols, weights, held = [], [], [], 0

  def flush():
    nonlocal total, held
    if rows:
      r, c, w = (np.concatenate(a) for a in (rows, cols, weights))
      total = total + scipy.sparse.coo_matrix(
          (np.concatenate([w, w]), (np.concatenate([r, c]), np.concatenate([c, r]))),
          shape=(vocab_size, vocab_size)).tocsr()
      rows.clear(), cols.clear(), weights.clear()
    held = 0

  for ids in documents:
    ids = np.asarray(ids)
    for distance in range(1, min(window, len(ids) - 1) + 1):
      left, right = ids[:-distance], ids[distance:]
      keep = (left >= 0) & (right >= 0)
      rows.append(left[keep])
      cols.append(right[keep])
      weights.append(np.full(int(keep.sum()), 1.0 / distance))
      held += int(keep.sum())
    if held >= chunk_pairs:
      flush()
  flush()
  total.sum_duplicates()
  return total


def positive_pmi(counts: scipy.sparse.csr_matrix, context_power: float = 0.75
                 ) -> scipy.sparse.csr_matrix:
  """PPMI of a word-context count matrix (module docstring, step 2).

  Args:
    counts: csr [V, C] non-negative counts (rows: words, columns: contexts).
    context_power: α of the smoothed context distribution (1: plain PMI).

  Returns:
    csr [V, C] float64, zero where the count is zero or the PMI is negative.
  """
  counts = counts.tocsr().astype(np.float64)
  total = counts.sum()
  word_p = np.asarray(counts.sum(axis=1)).ravel() / total
  context = np.asarray(counts.sum(axis=0)).ravel() ** context_power
  context_p = context / context.sum()
  coo = counts.tocoo()
  pmi = (np.log(coo.data / total) - np.log(word_p[coo.row]) - np.log(context_p[coo.col]))
  keep = pmi > 0
  return scipy.sparse.csr_matrix((pmi[keep], (coo.row[keep], coo.col[keep])),
                                 shape=counts.shape)


def svd_vectors(matrix: scipy.sparse.spmatrix, dim: int, seed: int = 0,
                singular_power: float = 0.5) -> np.ndarray:
  """Rank-`dim` vectors of `matrix`'s rows: U_k S_k^p (p = `singular_power`).

  Returns:
    float32 [rows, dim], columns by descending singular value, each column's
    sign fixed so that its largest-magnitude entry is positive
    (deterministic across solvers).
  """
  if not 0 < dim < min(matrix.shape):
    raise ValueError(f"dim must be in 1..{min(matrix.shape) - 1} for a {matrix.shape} "
                     f"matrix, got {dim}: use a larger corpus or a smaller dim")
  start = np.random.default_rng(seed).standard_normal(min(matrix.shape))
  u, s, _ = scipy.sparse.linalg.svds(matrix.astype(np.float64), k=dim, v0=start)
  order = np.argsort(-s)
  u, s = u[:, order], s[order]
  sign = np.sign(u[np.argmax(np.abs(u), axis=0), np.arange(dim)])
  return (u * sign * s ** singular_power).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class LinearMap:
  """y ≈ x @ weight + bias, fitted by `fit_linear_map`.

  Attributes:
    weight: [source dim, target dim]; bias: [target dim].
    held_out_cosine: mean cosine between mapped and true vectors of the
      held-out shared words (fit on the rest); nan when there were too few.
    train_cosine: the same on the words the final map was fitted on.
    shared: number of words both spaces have.
  """
  weight: np.ndarray
  bias: np.ndarray
  held_out_cosine: float
  train_cosine: float
  shared: int

  def __call__(self, x: np.ndarray) -> np.ndarray:
    return (x @ self.weight + self.bias).astype(np.float32)


def _ridge(x: np.ndarray, y: np.ndarray, ridge: float) -> tuple[np.ndarray, np.ndarray]:
  ones = np.ones((x.shape[0], 1))
  design = np.concatenate([x, ones], axis=1).astype(np.float64)
  penalty = ridge * np.eye(design.shape[1])
  penalty[-1, -1] = 0.0  # the bias is not shrunk
  solution = np.linalg.solve(design.T @ design + penalty, design.T @ y.astype(np.float64))
  return solution[:-1], solution[-1]


def _mean_cosine(a: np.ndarray, b: np.ndarray) -> float:
  norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
  return float(np.mean(np.sum(a * b, axis=1) / np.maximum(norms, 1e-12)))


def fit_linear_map(source: np.ndarray, target: np.ndarray, ridge: float = 1.0,
                   held_out: float = 0.1, seed: int = 0) -> LinearMap:
  """Ridge least-squares affine map from `source` rows to `target` rows.

  Args:
    source: [N, Ds] vectors of N shared words in the space mapped from.
    target: [N, Dt] the same words' vectors in the space mapped to (GloVe).
    ridge: L2 penalty on the weight (not the bias).
    held_out: share of the N words held out to measure `held_out_cosine`;
      the returned map is then refitted on all N.
    seed: which words are held out.
  """
  if source.shape[0] != target.shape[0]:
    raise ValueError(f"{source.shape[0]} source rows against {target.shape[0]} target rows")
  count = source.shape[0]
  if count < 2:
    raise ValueError(f"{count} shared words: the corpus and GloVe need words in common "
                     "to map one space onto the other")
  held = int(round(held_out * count))
  held_out_cosine = float("nan")
  if 0 < held < count:
    order = np.random.default_rng(seed).permutation(count)
    test, train = order[:held], order[held:]
    weight, bias = _ridge(source[train], target[train], ridge)
    held_out_cosine = _mean_cosine(source[test] @ weight + bias, target[test])
  weight, bias = _ridge(source, target, ridge)
  return LinearMap(weight, bias, held_out_cosine,
                   _mean_cosine(source @ weight + bias, target), count)


@dataclasses.dataclass(frozen=True)
class ExtendedGlove:
  """GloVe plus mapped corpus vectors (`extended_glove`'s result).

  Attributes:
    vectors: {word: float32 [D]}: GloVe's words with GloVe's vectors, then
      the corpus words GloVe lacks with their mapped vectors.
    mapped: how many words got a mapped vector.
    linear_map: the map used (its cosines say how well it fits).
    corpus_words, corpus_tokens, nonzeros: the corpus vocabulary's size, the
      tokens read, and the co-occurrence matrix's nonzero entries.
  """
  vectors: dict[str, np.ndarray]
  mapped: int
  linear_map: LinearMap
  corpus_words: int
  corpus_tokens: int
  nonzeros: int


def extended_glove(documents: Iterable[Sequence[str]], glove: Mapping[str, np.ndarray], *,
                   max_words: int = 100_000, min_count: int = 5, window: int = 5,
                   svd_dim: int = 300, ridge: float = 1.0, seed: int = 0) -> ExtendedGlove:
  """GloVe extended to a corpus's frequent words (module docstring).

  Args:
    documents: tokenised documents, lower-cased like GloVe 6B
      (`glomo_jax.text.words.tokenize`).
    glove: {word: vector}, all of one width D.
    max_words, min_count: the corpus vocabulary (`corpus_vocabulary`).
    window: co-occurrence window, each side.
    svd_dim: width of the corpus vectors before the map to D.
    ridge, seed: `fit_linear_map`'s.
  """
  start = time.perf_counter()

  def stage(what, *args):
    logger.info("%.0f s: " + what, time.perf_counter() - start, *args)

  words, ids = corpus_vocabulary(documents, max_words, min_count)
  if not words:
    raise ValueError(f"no corpus word is seen {min_count} times: lower min_count or "
                     "read more text")
  tokens = sum(len(d) for d in ids)
  stage("%d documents, %d tokens, %d words kept", len(ids), tokens, len(words))
  counts = cooccurrence_counts(ids, len(words), window)
  stage("co-occurrence counts: %d nonzeros", counts.nnz)
  pmi = positive_pmi(counts)
  stage("PPMI: %d positive entries; SVD to %d dimensions next", pmi.nnz, svd_dim)
  corpus = svd_vectors(pmi, min(svd_dim, len(words) - 1), seed)
  stage("SVD done")
  index = {w: i for i, w in enumerate(words)}
  shared = [w for w in glove if w in index]
  if not shared:
    raise ValueError("the corpus and the GloVe file share no word: are both lower-cased "
                     "(tokenize lower-cases)?")
  linear_map = fit_linear_map(corpus[[index[w] for w in shared]],
                              np.stack([glove[w] for w in shared]), ridge, seed=seed)
  vectors = {w: np.asarray(v, np.float32) for w, v in glove.items()}
  missing = [w for w in words if w not in vectors]
  if missing:
    mapped = linear_map(corpus[[index[w] for w in missing]])
    vectors.update(zip(missing, mapped))
  return ExtendedGlove(vectors, len(missing), linear_map, len(words), tokens, counts.nnz)


def nearest_words(vectors: Mapping[str, np.ndarray], queries: Sequence[str],
                  count: int = 5) -> dict[str, list[str]]:
  """The `count` nearest words (by cosine) of each query found in `vectors`."""
  names = list(vectors)
  matrix = np.stack([vectors[w] for w in names])
  matrix = matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
  position = {w: i for i, w in enumerate(names)}
  result = collections.OrderedDict()
  for query in queries:
    if query in position:
      scores = matrix @ matrix[position[query]]
      scores[position[query]] = -np.inf
      result[query] = [names[i] for i in np.argsort(-scores)[:count]]
  return result
