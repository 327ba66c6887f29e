"""SST-2, the one-text classification task added on the downstream layer
(WORKSPACE.md, "Adding a downstream task"): GLUE's TSV files (.gz) read into
splits, a damaged line named, and a tiny run that reports the
held-out test accuracy of the dev file."""
import gzip
import sys

import jax
import numpy as np
import pytest

from conftest import REPO

sys.path.insert(0, REPO)

from experiments.configs import sst2 as sst2_config  # noqa: E402
from glomo_jax.errors import InputError  # noqa: E402
from glomo_jax.classification import ClassificationConfig, run_classification  # noqa: E402
from glomo_jax.text import read_split  # noqa: E402

POSITIVE = ("a great , moving film", "the best of the year", "great fun")
NEGATIVE = ("a dull , awful mess", "the worst of the year", "awful")


def write_tsv(path, n, seed):
  """GLUE's layout: a `sentence<TAB>label` header, each sentence with its
  trailing space before the tab; gzip-compressed."""
  rng = np.random.default_rng(seed)
  lines = ["sentence\tlabel"]
  for i in range(n):
    label = i % 2
    lines.append(f"{rng.choice(POSITIVE if label else NEGATIVE)} \t{label}")
  with gzip.open(path, "wt", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
  return str(path)


def test_tsv_split_reads_sentences_and_labels(tmp_path):
  split = read_split("sst2", "files", write_tsv(tmp_path / "dev.tsv.gz", 6, 0))
  assert len(split) == 6 and split.labels.tolist() == [0, 1, 0, 1, 0, 1]
  assert list(split.texts) == ["text"]
  assert split.texts["text"][1][-1] in ("film", "year", "fun")   # no trailing ''
  bad = tmp_path / "bad.tsv"
  bad.write_text("sentence\tlabel\ngood \t1\nno label here\n", encoding="utf-8")
  with pytest.raises(InputError, match=r"bad.tsv:3: 1 tab-separated columns, the header has 2"):
    read_split("sst2", "files", str(bad))


def test_tiny_run_reports_validation_and_test_accuracy(tmp_path):
  config = sst2_config.get_config("tiny")
  config.files.train = write_tsv(tmp_path / "train.tsv.gz", 40, 1)
  config.files.test = write_tsv(tmp_path / "dev.tsv.gz", 10, 2)
  config.loop.num_steps, config.loop.eval_every = 4, 2
  results = run_classification(ClassificationConfig.from_dict(config.to_dict()), str(tmp_path / "run"),
                         devices=jax.devices()[:1])
  assert (results["task"], results["variant"], results["steps"]) == ("sst2", "baseline", 4)
  assert results["examples"] == {"train": 36, "validation": 4, "test": 10}
  assert 0 <= results["validation_accuracy"] <= 1 and 0 <= results["test"] <= 1
  assert "note" not in results and [c["step"] for c in results["curves"]] == [2, 4]
