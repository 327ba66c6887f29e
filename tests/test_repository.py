"""Files a newcomer reads in one sitting: no module of the library over 450
lines, no benchmark script over 500, no Markdown document over 400 (a longer
one links a file per topic, as experiments/RESULTS.md does)."""
import glob
import os

from conftest import REPO

LIMITS = {"glomo_jax": 450, "benchmarks": 500}
DOCUMENTS = ("README.md", "WORKSPACE.md", "docs/*.md", "experiments/**/*.md",
             "benchmarks/*.md")
DOCUMENT_LIMIT = 400


def _lines(path):
  with open(path, encoding="utf-8") as f:
    return sum(1 for _ in f)


def test_no_file_is_too_long():
  long = []
  for folder, limit in LIMITS.items():
    for path in glob.glob(os.path.join(REPO, folder, "**", "*.py"), recursive=True):
      lines = _lines(path)
      if lines > limit:
        long.append(f"{os.path.relpath(path, REPO)}: {lines} lines (limit {limit})")
  assert not long, long


def test_no_document_is_too_long():
  long = []
  for pattern in DOCUMENTS:
    paths = glob.glob(os.path.join(REPO, pattern), recursive=True)
    assert paths, f"no document matches {pattern}"
    for path in paths:
      lines = _lines(path)
      if lines > DOCUMENT_LIMIT:
        long.append(f"{os.path.relpath(path, REPO)}: {lines} lines (limit {DOCUMENT_LIMIT})")
  assert not long, long
