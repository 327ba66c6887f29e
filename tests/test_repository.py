"""Files a newcomer reads in one sitting: no module of the library over 450
lines, no benchmark script over 500."""
import glob
import os

from conftest import REPO

LIMITS = {"glomo_jax": 450, "benchmarks": 500}


def test_no_file_is_too_long():
  long = []
  for folder, limit in LIMITS.items():
    for path in glob.glob(os.path.join(REPO, folder, "**", "*.py"), recursive=True):
      with open(path, encoding="utf-8") as f:
        lines = sum(1 for _ in f)
      if lines > limit:
        long.append(f"{os.path.relpath(path, REPO)}: {lines} lines (limit {limit})")
  assert not long, long
