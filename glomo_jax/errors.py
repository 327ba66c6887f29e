"""The project's one user-error type: `InputError`.

Every reader of the user's input (corpora, task data, SQuAD, CoNLL-U,
GloVe, images, tokenizers, exports, graph caches, config values) raises an
`InputError` for input it cannot use: a file cut short, a damaged archive,
a record with a field of the wrong type or out of range, text that is not
UTF-8. Its message is one line that names the input (a path, or a source
such as ``tfds 'imdb_reviews' split 'train'``), the line or record where
known, and what is wrong. It is a ValueError, so the entry points
(`experiments/cli.py`) print it as one line and exit with status 1.

A missing file stays a `FileNotFoundError` (its message names the path).
`write_failed` turns an OSError of a write (no space, no permission) into
one that names the file and what was kept.
"""
from __future__ import annotations

import errno
import os


_LONGEST = 600       # characters of a problem kept (a huge line is not repeated whole)


class InputError(ValueError):
  """Input that cannot be used; ``str()`` is one line:
  ``<where>[:<line> | record <record>]: <problem>``.

  Attributes:
    where: the file's path, or the source's name.
    problem: what is wrong (and, where it helps, how to fix it).
    line: 1-based line in the file, or None.
    record: the record (example number, question id, array name), or None.
  """

  def __init__(self, where, problem: str, *, line: int | None = None,
               record: str | int | None = None):
    self.where = os.fspath(where) if isinstance(where, os.PathLike) else str(where)
    problem = " ".join(str(problem).split())            # one line
    self.problem = problem if len(problem) <= _LONGEST else problem[:_LONGEST] + " …"
    self.line, self.record = line, record
    super().__init__(self.message)

  @property
  def message(self) -> str:
    place = self.where
    if self.line is not None:
      place += f":{self.line}"
    elif self.record is not None:
      place += f" record {self.record}"
    return f"{place}: {self.problem}"

  def __str__(self) -> str:
    return self.message

  def __reduce__(self):  # picklable (worker processes send errors back)
    return (_rebuild, (type(self), self.where, self.problem, self.line, self.record))


def _rebuild(cls, where, problem, line, record):
  return cls(where, problem, line=line, record=record)


def write_failed(path, error: OSError, kept: str = "") -> OSError:
  """An OSError like `error` (same errno) whose message names `path` and,
  if given, what earlier output is `kept` intact (`error` itself when it
  is one already)."""
  if getattr(error, "write_failed", False):
    return error
  reason = error.strerror or str(error) or type(error).__name__
  hint = " (free some space and rerun)" if error.errno == errno.ENOSPC else ""
  tail = f"; {kept}" if kept else ""
  out = OSError(error.errno, f"cannot write {os.fspath(path)}: {reason}{hint}{tail}")
  out.__cause__ = error
  out.write_failed = True
  return out
