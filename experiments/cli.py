"""What every entry point shares: `run(main)` instead of `app.run(main)`.

* A user's mistake (a ValueError, among them `glomo_jax.errors.InputError`:
  a file that cannot be read, naming it; an OSError such as a missing file
  or a failed write; a checkpoint that cannot be restored, a non-finite
  loss, a workdir in use, a missing optional package, a flag or `--config.`
  override that does not parse) is printed as one line, ``error: <what is
  wrong and how to fix it>``, and the program exits with status 1. `--debug`
  shows the traceback instead.
* Orbax's per-save INFO chatter stays out of the console (warnings stay).

`--compilation_cache_dir` (JAX's persistent compilation cache, default
<workdir>/compile_cache) is shared by the entry points that train.
"""
from __future__ import annotations

import os
import re
import sys

from absl import app, flags

DEBUG = flags.DEFINE_bool("debug", False, "On an error, show the traceback instead of one line.")
COMPILATION_CACHE = flags.DEFINE_string(
    "compilation_cache_dir", None,
    "JAX's persistent compilation cache: a resumed or repeated run loads its compiled "
    "steps instead of compiling them again (on a GPU the first compile of a step can "
    "take minutes). Default: $JAX_COMPILATION_CACHE_DIR if set, else <workdir>/"
    "compile_cache; '' sets none (JAX itself still reads $JAX_COMPILATION_CACHE_DIR).")



def user_errors() -> tuple[type[BaseException], ...]:
  """The exceptions that are a user's mistake (imported late: the loop brings
  JAX and orbax, which `--help` and a flag typo do not need)."""
  from glomo_jax.train import NonFiniteLossError, UnrestorableCheckpointError  # noqa: PLC0415
  return (ValueError, OSError, ImportError, UnrestorableCheckpointError, NonFiniteLossError)


def compilation_cache_dir(workdir: str) -> str | None:
  """The cache directory: the flag's value, else the environment's, else
  <workdir>/compile_cache; None when the flag is ''."""
  if COMPILATION_CACHE.value is not None:
    return COMPILATION_CACHE.value or None
  return os.environ.get("JAX_COMPILATION_CACHE_DIR") or os.path.join(workdir, "compile_cache")


def one_line(error: BaseException) -> str:
  """The error's message on one line: ml_collections' "did you mean" kept, a
  traceback quoted inside the message (a config file's error) reduced to its
  last line."""
  text = str(error)
  if "Traceback (most recent call last)" in text:
    head = text[:text.index("Traceback (most recent call last)")]
    last = [line for line in text.splitlines() if line.strip()][-1].strip()
    text = f"{head}{last}"
  if isinstance(error, (KeyError, AttributeError)):
    text = text.replace("\\'", "'").strip("'\"")
    unknown = re.match(r"'?([\w.]+)'?\s*\\?n?\s*Did you mean (.*)", text, re.S)
    if unknown:
      return f"unknown config field {unknown.group(1)!r} (did you mean {unknown.group(2)})"
  return " ".join(text.split()) or type(error).__name__


def _fail(message: str) -> None:
  print(f"error: {message}", file=sys.stderr)
  sys.exit(1)


def _parse_flags(argv: list[str]) -> list[str]:
  try:
    return flags.FLAGS(argv)
  except Exception as e:  # noqa: BLE001 (config files run arbitrary code while parsing)
    if "--debug" in argv:
      raise
    _fail(f"{one_line(e)} (in the command-line flags; --helpfull lists them)")
    raise


def run(main) -> None:
  """`absl.app.run(main)` with the behaviour of the module docstring."""
  def wrapped(argv):
    from glomo_jax.train.console import quiet_libraries  # noqa: PLC0415
    quiet_libraries()
    try:
      return main(argv)
    except Exception as e:  # noqa: BLE001 (only a user's mistake is caught)
      if DEBUG.value or not isinstance(e, user_errors()):
        raise
      _fail(f"{one_line(e)} (--debug shows the traceback)")
  app.run(wrapped, flags_parser=_parse_flags)
