"""Console set-up shared by the entry points."""
import logging


class _QuietLibraries(logging.Filter):
  """Keeps orbax's per-save INFO chatter out of the console (warnings stay)."""

  def filter(self, record):
    return record.levelno >= logging.WARNING or "/orbax/" not in record.pathname


def quiet_libraries() -> None:
  for handler in logging.getLogger().handlers + logging.getLogger("absl").handlers:
    handler.addFilter(_QuietLibraries())
