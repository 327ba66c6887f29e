"""What the training loop prints: its progress lines (INFO, logger
'glomo_jax.train') without orbax's per-save INFO chatter (its warnings stay).

The entry points get this from `experiments.cli`; a notebook or a script of
your own calls `show_progress()` once.
"""
from __future__ import annotations

import logging


class QuietLibraries(logging.Filter):
  """Drops INFO records of orbax (warnings and errors pass)."""

  def filter(self, record):
    return record.levelno >= logging.WARNING or "/orbax/" not in record.pathname


def quiet_libraries() -> None:
  """Adds `QuietLibraries` to the root and absl handlers (idempotent)."""
  for handler in logging.getLogger().handlers + logging.getLogger("absl").handlers:
    if not any(isinstance(f, QuietLibraries) for f in handler.filters):
      handler.addFilter(QuietLibraries())


def show_progress() -> None:
  """Shows the loop's progress lines (steps/s, loss, ETA) on the console."""
  from absl import flags  # noqa: PLC0415
  from absl import logging as absl_logging  # noqa: PLC0415
  if not flags.FLAGS.is_parsed():  # a notebook has no command line; absl warns otherwise
    flags.FLAGS.mark_as_parsed()
  absl_logging.use_absl_handler()  # on the root logger, as under absl.app.run
  absl_logging.set_verbosity(absl_logging.INFO)
  logging.getLogger("glomo_jax").setLevel(logging.INFO)
  quiet_libraries()
