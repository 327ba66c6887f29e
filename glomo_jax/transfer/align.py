"""From the predictor's pieces to the task model's units (words).

The predictor reads SentencePiece pieces; task models read words (or other
units). `align_graphs` pools piece-level graphs [.., P_target, P_source] into
unit-level graphs [.., U_target, U_source]:

1. target rows: the row of unit u is the mean of the rows of u's pieces;
2. source columns: the weights on the pieces of each unit are summed;
3. weight on pieces outside every unit (unit −1: padding, or pieces the
   caller leaves out) is dropped, and so, by default, is weight between
   pieces of the same unit: the unit graphs are strictly causal, without a
   diagonal, as the authors' word graphs are (``self_loops=True`` keeps it
   on the diagonal, u → u);
4. each row is renormalised to sum to 1; a row with no weight left stays 0.

So unit rows are distributions over other units (or 0 when no weight
survives), and where every piece row of u sums to 1 with all its weight on
other units, step 4 changes nothing: the row of a 2-piece word is then the
mean of its two piece rows, with the columns of each word summed. Units
without pieces have zero rows and columns; the first unit's forward row (and
the last one's backward row) is 0, as at piece level.

``rows="whole_word"`` replaces rule 1 (graphs [B, 2L, ..., P, P], the L
forward layers first): a unit's forward row is its last piece's row and its
backward row its first piece's, the pieces whose causal query has read the
whole unit. Under rule 1 a unit's forward row leans on its first piece's
row, whose query has read nothing of the unit after that piece (its later
pieces' weight on the first piece is dropped by rule 3). Units of one piece
get the same rows either way.

`word_graphs` runs the whole path for lists of words (joined by spaces);
`text_graphs` for raw texts, each piece going to the unit that holds its
characters (`unit_of_piece_from_spans`). Length: the predictor is
convolutional (causal CNNs, no position embeddings) plus attention over all
earlier positions, so it runs at any length, including sequences longer than
its pretraining windows; by default no piece is cut (memory grows as P²).
Pass ``max_pieces`` to bound it: words whose pieces are all cut keep their
place but have zero rows and columns.

Batch shapes: every new (pieces, units) shape of a batch compiles the
predictor and the alignment again. `piece_multiple` and `unit_width` keep
shapes tight on a CPU, where a compile takes seconds and the work grows with
the padding, and few on an accelerator, where padding costs little and XLA
compiles far longer (a small training step: 39–267 s on an H100).
"""
from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from glomo_jax.io import round_up


def piece_to_unit(word_start, num_pieces: int) -> np.ndarray:
  """Unit index of each piece, from `Tokenizer.encode_words`'s word_start.

  Args:
    word_start: int [U + 1]; unit u covers pieces word_start[u]:word_start[u+1]
      (empty ranges allowed), the last entry is the number of pieces.
    num_pieces: length P of the output (pieces beyond word_start[-1] are
      padding; a P smaller than word_start[-1] cuts the last pieces).

  Returns:
    int32 [P]: the unit of each piece, −1 for pieces in no unit.
  """
  starts = np.asarray(word_start, dtype=np.int64)
  if starts.ndim != 1 or starts.size < 1 or np.any(np.diff(starts) < 0) or starts[0] != 0:
    raise ValueError("word_start must be a non-decreasing int vector starting at 0, "
                     f"got {starts}")
  pieces = np.arange(num_pieces)
  unit = np.searchsorted(starts, pieces, side="right") - 1
  return np.where(pieces < starts[-1], unit, -1).astype(np.int32)


ROWS = ("mean", "whole_word")


def align_graphs(graphs, unit_of_piece, num_units: int, *,
                 self_loops: bool = False, rows: str = "mean") -> jax.Array:
  """Piece-level graphs -> unit-level graphs (rule: module docstring).

  Args:
    graphs: [B, ..., P_target, P_source] (any leading axes after B, e.g. 2L, K;
      [B, 2L, ..., P, P], forward layers first, for rows="whole_word").
    unit_of_piece: int [B, P]: the unit of each piece in [0, num_units), or −1
      for pieces in no unit (padding).
    num_units: U.
    self_loops: keep weight between pieces of the same unit (on the
      diagonal); default False: no diagonal, as the authors' word graphs.
    rows: "mean" (a unit's row from all its pieces' rows) or "whole_word"
      (forward rows from each unit's last piece, backward rows from its
      first; module docstring).

  Returns:
    [B, ..., U_target, U_source], dtype of graphs (at least float32); each row
    sums to 1 or is all 0.
  """
  graphs = jnp.asarray(graphs)
  graphs = graphs.astype(jnp.promote_types(graphs.dtype, jnp.float32))
  unit = jnp.asarray(unit_of_piece)
  if unit.ndim != 2 or graphs.ndim < 3 or graphs.shape[0] != unit.shape[0] or \
      graphs.shape[-2:] != (unit.shape[1], unit.shape[1]):
    raise ValueError(f"graphs [B, ..., P, P] and unit_of_piece [B, P] do not fit: "
                     f"{graphs.shape} and {unit.shape}")
  if rows not in ROWS:
    raise ValueError(f"rows must be one of {ROWS}, got {rows!r}")
  batch, pieces = unit.shape
  lead = graphs.shape[1:-2]
  if rows == "whole_word":
    if not lead or lead[0] % 2:
      raise ValueError("rows='whole_word' needs graphs [B, 2L, ..., P, P] (forward layers, "
                       f"then backward), got {graphs.shape}")
    first, last = jax.vmap(_end_pieces, in_axes=(0, None))(unit, num_units)   # [B, P] each
    reading = jnp.stack([last, first], axis=1).astype(graphs.dtype)          # [B, 2, P]
    reading = reading.reshape(batch, 2, *([1] * (len(lead) - 1)), pieces, 1)
    split = graphs.reshape(batch, 2, lead[0] // 2, *lead[1:], pieces, pieces)
    graphs = (split * reading[:, :, None]).reshape(graphs.shape)
  flat = graphs.reshape(batch, -1, pieces, pieces)
  # sums over the pieces of each unit; a row's sum and its mean (rule 1)
  # differ by a factor that the renormalisation (rule 4) removes
  pooled = jax.vmap(_summed_by_unit, in_axes=(0, 0, None))(flat, unit, num_units)
  if not self_loops:
    pooled = pooled * (1 - jnp.eye(num_units, dtype=pooled.dtype))
  total = pooled.sum(axis=-1, keepdims=True)
  pooled = jnp.where(total > 0, pooled / jnp.where(total > 0, total, 1), 0)
  return pooled.reshape(batch, *lead, num_units, num_units)


def _summed_by_unit(graphs, unit, num_units: int) -> jax.Array:
  """Sums of one example's piece graphs over the pieces of each unit.

  Segment sums, not products with one-hot membership matrices: the rows
  (targets) are summed by unit, then the columns (sources) of the result.
  Pieces of unit −1 are out of the segments' range, so their rows and
  columns are dropped.

  Args:
    graphs: [N, P_target, P_source].
    unit: int [P], the unit of each piece or −1.

  Returns:
    [N, U_target, U_source]: entry (u, v) is the sum of graphs[:, p, q] over
    the pieces p of u and q of v.
  """
  def by_unit(x):                   # [P, ...] -> [U, ...]
    return jax.ops.segment_sum(x, unit, num_units, mode="drop")   # −1: dropped
  rows = jax.vmap(by_unit)(graphs)                                 # [N, U, P]
  return jax.vmap(lambda r: by_unit(r.T).T)(rows)                  # [N, U, U]


def _end_pieces(unit, num_units: int) -> tuple[jax.Array, jax.Array]:
  """bool [P] each: whether a piece is the first, and the last, of its unit
  (False for pieces of unit −1). unit: int [P]."""
  position = jnp.arange(unit.shape[0])
  first = jax.ops.segment_min(position, unit, num_units, mode="drop")
  last = jax.ops.segment_max(position, unit, num_units, mode="drop")
  own = jnp.clip(unit, 0, num_units - 1)
  inside = unit >= 0
  return inside & (position == first[own]), inside & (position == last[own])


# The IMDB grid's 8,000 training reviews at 128 words, read by an 8k-piece
# tokenizer, come in 15 (P, W) shapes at the CPU multiples and 3 at the
# accelerator ones. On an H100 a cold cache build of 384 reviews in 2 shapes
# took 40.7 s, 38 s of it in the predictor and the alignment, compiles
# included (benchmarks/RESULTS.md).
CPU_PIECE_MULTIPLE, ACCELERATOR_MULTIPLE = 16, 128


def piece_multiple(backend: str | None = None) -> int:
  """The multiple the piece axis of a predictor batch is padded to: 16 on
  a CPU, 128 on an accelerator (module docstring, batch shapes).

  backend: 'cpu', 'gpu', 'tpu', ... (None: `jax.default_backend()`).
  """
  backend = backend or jax.default_backend()
  return CPU_PIECE_MULTIPLE if backend == "cpu" else ACCELERATOR_MULTIPLE


def unit_width(longest: int, max_units: int, multiple: int = 32,
               backend: str | None = None) -> int:
  """The unit axis W of a predictor batch whose longest example has
  `longest` units: that length rounded up to `multiple` on a CPU, to 128 on
  an accelerator, and at most `max_units`."""
  backend = backend or jax.default_backend()
  if backend != "cpu":
    multiple = max(multiple, ACCELERATOR_MULTIPLE)
  return min(max_units, round_up(max(1, int(longest)), multiple))


_align_jit = jax.jit(align_graphs, static_argnames=("num_units", "self_loops", "rows"))


def encode_word_lists(tokenizer, word_lists: Sequence[Sequence[str]], max_words: int,
                      *, max_pieces: int | None = None, pad_multiple: int | None = None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """Pieces of a batch of word lists, padded.

  Args:
    tokenizer: a `glomo_jax.data.tokenizer.Tokenizer`.
    word_lists: B lists of words (no whitespace inside a word); words beyond
      `max_words` are dropped.
    max_words: W.
    max_pieces: cut each example to this many pieces (None: no limit); the
      padded axis P can exceed it by less than the pad multiple.
    pad_multiple: the piece length P is the longest example's, rounded up to a
      multiple of this (fewer distinct shapes to compile); None:
      `piece_multiple()` of the default backend.

  Returns:
    tokens int32 [B, P] (pad id after the pieces), piece_mask bool [B, P],
    unit_of_piece int32 [B, P] (−1 for padding), word_mask bool [B, W].
  """
  encoded = []
  for words in word_lists:
    words = list(words)[:max_words]
    ids, starts = tokenizer.encode_words(words)
    encoded.append((ids, piece_to_unit(starts, len(ids)), len(words)))
  return _pad_batch(encoded, tokenizer.pad_id, max_words, max_pieces, pad_multiple)


def unit_of_piece_from_spans(text: str, piece_spans, unit_spans) -> np.ndarray:
  """The unit of each piece of a text, by characters.

  A piece belongs to the unit whose characters hold its first non-space
  character; a piece of whitespace only (a lone "▁" before a character
  SentencePiece splits off) belongs to the unit holding the character just
  after it. Pieces in no unit (text the units leave out) get −1.

  Args:
    text: the text the pieces were encoded from.
    piece_spans: int [P, 2], each piece's [start, end) characters
      (`Tokenizer.encode_with_spans`).
    unit_spans: int [U, 2], each unit's [start, end) characters, disjoint;
      (−1, −1) for a unit with no characters.

  Returns:
    int32 [P] in [−1, U).
  """
  piece_spans = np.asarray(piece_spans, np.int64).reshape(-1, 2)
  unit_spans = np.asarray(unit_spans, np.int64).reshape(-1, 2)
  position = piece_spans[:, 1].copy()
  for p, (start, end) in enumerate(piece_spans):
    stripped = len(text[start:end]) - len(text[start:end].lstrip())
    if start + stripped < end:
      position[p] = start + stripped
  inside = (unit_spans[None, :, 0] <= position[:, None]) & \
      (position[:, None] < unit_spans[None, :, 1])                 # [P, U]
  return np.where(inside.any(axis=1), np.argmax(inside, axis=1), -1).astype(np.int32)


def encode_texts(tokenizer, texts: Sequence[str], unit_spans: Sequence, max_units: int,
                 *, max_pieces: int | None = None, pad_multiple: int | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """Pieces of a batch of raw texts, each piece assigned to a unit by characters.

  The predictor reads each text as written (case, spacing and punctuation
  kept, as in its pretraining); `unit_of_piece_from_spans` maps the pieces
  to the caller's units (e.g. a treebank's or a task's words).

  Args:
    tokenizer: a `glomo_jax.data.tokenizer.Tokenizer`.
    texts: B raw texts.
    unit_spans: B int arrays [U_b, 2] of the units' [start, end) characters;
      units beyond `max_units` are dropped, and the text is cut after the
      last unit kept (as `encode_word_lists` drops the words after the cut).
    max_units: W.
    max_pieces, pad_multiple: see `encode_word_lists`.

  Returns:
    tokens int32 [B, P], piece_mask bool [B, P], unit_of_piece int32 [B, P]
    (−1 for padding and for pieces in no kept unit), unit_mask bool [B, W].
  """
  if len(texts) != len(unit_spans):
    raise ValueError(f"{len(texts)} texts but {len(unit_spans)} unit span lists")
  kept = [np.asarray(s, np.int64).reshape(-1, 2)[:max_units] for s in unit_spans]
  texts = [text[:int(s[:, 1].max(initial=0))] for text, s in zip(texts, kept)]
  encoded = []
  for text, spans, (ids, piece_spans) in zip(texts, kept,
                                              tokenizer.encode_with_spans(texts)):
    encoded.append((ids, unit_of_piece_from_spans(text, piece_spans, spans), len(spans)))
  return _pad_batch(encoded, tokenizer.pad_id, max_units, max_pieces, pad_multiple)


def _pad_batch(encoded, pad_id: int, max_units: int, max_pieces: int | None,
               pad_multiple: int | None):
  """[(ids [P_b], unit_of_piece [P_b], num_units)] -> padded arrays (see
  `encode_word_lists`)."""
  if max_units < 1:
    raise ValueError(f"max_words must be >= 1, got {max_units}")
  if max_pieces is not None and max_pieces < 1:
    raise ValueError(f"max_pieces must be >= 1, got {max_pieces}")
  if not encoded:
    raise ValueError("word_graphs needs at least one example")
  cut = [len(ids) if max_pieces is None else min(len(ids), max_pieces)
         for ids, _, _ in encoded]
  length = round_up(max(1, max(cut)), pad_multiple or piece_multiple())
  batch = len(encoded)
  tokens = np.full((batch, length), pad_id, np.int32)
  piece_mask = np.zeros((batch, length), bool)
  unit = np.full((batch, length), -1, np.int32)
  unit_mask = np.zeros((batch, max_units), bool)
  for b, ((ids, units, num_units), n) in enumerate(zip(encoded, cut)):
    tokens[b, :n] = ids[:n]
    piece_mask[b, :n] = True
    unit[b, :n] = units[:n]
    unit_mask[b, :num_units] = True
  return tokens, piece_mask, unit, unit_mask


def word_graphs(predictor, tokenizer, word_lists: Sequence[Sequence[str]],
                max_words: int, *, max_pieces: int | None = None,
                self_loops: bool = False, pad_multiple: int | None = None, rows: str = "mean"
                ) -> tuple[np.ndarray, np.ndarray]:
  """Word-level graphs of a batch of word lists from an exported predictor.

  Encodes each list with ``tokenizer.encode_words`` (its first `max_words`
  words), runs ``predictor.predict`` on the pieces, and pools the graphs to
  words with `align_graphs`.

  Args:
    predictor: an `ExportedGraphPredictor` (anything with `config`,
      `variables`, `predict(variables, tokens, mask)` and optionally
      `manifest`).
    tokenizer: the predictor's tokenizer (None: ``predictor.tokenizer``); if
      the export recorded a tokenizer fingerprint, it must match.
    word_lists: B lists of words.
    max_words: W, the word axis of the output.
    max_pieces, pad_multiple: see `encode_word_lists`.
    self_loops, rows: see `align_graphs`.

  Returns:
    graphs float32 numpy [B, 2L, K, W, W] ([.., target word, source word]; the
    L forward layers then the L backward layers; rows sum to 1 or 0; rows and
    columns of padding words are 0), and mask bool [B, W] (True for the
    example's first min(len, W) words).
  """
  tokenizer = checked_tokenizer(predictor, tokenizer)
  arrays = encode_word_lists(tokenizer, word_lists, max_words, max_pieces=max_pieces,
                             pad_multiple=pad_multiple)
  return unit_graphs(predictor, arrays, max_words, self_loops, rows)


def text_graphs(predictor, tokenizer, texts: Sequence[str], unit_spans: Sequence,
                max_units: int, *, max_pieces: int | None = None,
                self_loops: bool = False, pad_multiple: int | None = None, rows: str = "mean"
                ) -> tuple[np.ndarray, np.ndarray]:
  """Unit-level graphs of raw texts: `word_graphs`, but the predictor reads
  each text as written and its pieces go to units by characters
  (`encode_texts`).

  Returns:
    graphs float32 numpy [B, 2L, K, W, W] ([.., target unit, source unit])
    and mask bool [B, W], as `word_graphs`; units without pieces have zero
    rows and columns.
  """
  tokenizer = checked_tokenizer(predictor, tokenizer)
  arrays = encode_texts(tokenizer, texts, unit_spans, max_units, max_pieces=max_pieces,
                        pad_multiple=pad_multiple)
  return unit_graphs(predictor, arrays, max_units, self_loops, rows)


def checked_tokenizer(predictor, tokenizer):
  """`tokenizer`, or the predictor's when None; ValueError when there is none
  or when it is not the tokenizer the predictor was exported with."""
  if tokenizer is None:
    tokenizer = getattr(predictor, "tokenizer", None)
  if tokenizer is None:
    raise ValueError("word_graphs needs a tokenizer (the predictor has none)")
  recorded = (getattr(predictor, "manifest", None) or {}).get("tokenizer_fingerprint")
  if recorded is not None and recorded != tokenizer.fingerprint:
    raise ValueError(f"vocabulary mismatch: the predictor was exported with tokenizer "
                     f"{recorded}, got {tokenizer.fingerprint}")
  return tokenizer


def unit_graphs(predictor, arrays, num_units: int, self_loops: bool = False,
                rows: str = "mean") -> tuple[np.ndarray, np.ndarray]:
  """The predictor's graphs of already encoded pieces, pooled to units.

  Args:
    predictor: as for `word_graphs`.
    arrays: (tokens, piece_mask, unit_of_piece, unit_mask) from
      `encode_word_lists` or `encode_texts` (encode once, then call this for
      several predictors that share the tokenizer).
    num_units: W, the unit axis of `unit_mask`.
    self_loops, rows: see `align_graphs`.

  Returns:
    (graphs float32 numpy [B, 2L, K, W, W], unit_mask bool [B, W]).
  """
  units = device_unit_graphs(predictor, arrays, num_units, self_loops, rows)
  return np.asarray(jax.device_get(units), dtype=np.float32), arrays[3]


def device_unit_graphs(predictor, arrays, num_units: int, self_loops: bool = False,
                       rows: str = "mean", dtype=None) -> jax.Array:
  """`unit_graphs` left on the device, dispatched and not waited for (the
  caller can prepare the next batch meanwhile), in `dtype` (None: float32)."""
  tokens, piece_mask, unit, _ = arrays
  graphs = predictor.predict(predictor.variables, tokens, piece_mask)
  units = _align_jit(graphs, jnp.asarray(unit), num_units=num_units, self_loops=self_loops,
                     rows=rows)
  return units if dtype is None else units.astype(dtype)
