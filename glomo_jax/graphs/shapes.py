"""The shapes of predictor batches, by backend.

Every new (pieces, units) shape of a batch compiles the predictor and the
alignment again. On a CPU a compile takes seconds and the work grows with
the padding, so shapes are kept tight (small multiples); on an accelerator
padding costs little and XLA compiles a program for far longer, so shapes
are kept few (multiples of 128).
"""
from __future__ import annotations

import jax
import numpy as np

from glomo_jax.io import round_up

CPU_PIECE_MULTIPLE, ACCELERATOR_MULTIPLE = 16, 128


def piece_multiple(backend: str | None = None) -> int:
  """The multiple the piece axis of a predictor batch is padded to: 16 on
  a CPU, 128 on an accelerator (module docstring).

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


def batch_width(lengths, max_words: int) -> int:
  """The word axis W of one batch of examples of `lengths` words: the
  longest rounded up to a multiple of 32 on a CPU, of 128 on an accelerator
  (`unit_width`), at most max_words."""
  return unit_width(int(np.max(lengths)), max_words, 32)
