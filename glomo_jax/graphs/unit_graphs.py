"""Unit-level (word-level) graphs of an exported predictor: encode the
words or texts (`glomo_jax.graphs.encode`), run the predictor on the
pieces, pool its graphs to units (`glomo_jax.graphs.align`).
"""
from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from glomo_jax.graphs.align import align_graphs_jit
from glomo_jax.graphs.encode import checked_tokenizer, encode_texts, encode_word_lists


def word_graphs(predictor, tokenizer, word_lists: Sequence[Sequence[str]],
                max_words: int, *, max_pieces: int | None = None,
                self_loops: bool = False, pad_multiple: int | None = None, rows: str = "mean"
                ) -> tuple[np.ndarray, np.ndarray]:
  """Word-level graphs of a batch of word lists from an exported predictor.

  Encodes each list with ``tokenizer.encode_words`` (its first `max_words`
  words), runs ``predictor.predict`` on the pieces, and pools the graphs to
  words with `glomo_jax.graphs.align.align_graphs`.

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
  units = align_graphs_jit(graphs, jnp.asarray(unit), num_units=num_units,
                           self_loops=self_loops, rows=rows)
  return units if dtype is None else units.astype(dtype)
