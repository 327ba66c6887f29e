"""Reading text classification data (IMDB, SST-2, MNLI, SNLI) into splits
(`glomo_jax.text.splits`), with the validation split carved from train.

Two sources, the same result (a `TaskData` of tokenized `Split`s):

* ``tfds``: ``imdb_reviews`` (features text, label; splits train / test),
  ``glue/sst2`` (sentence, label; train, validation as the test split),
  ``glue/mnli`` (premise, hypothesis, label; train, validation_matched,
  validation_mismatched), ``snli`` (premise, hypothesis, label; train,
  validation, test). Examples labelled -1 (no gold label, hidden test labels)
  are dropped. TFDS label order is the one used here: IMDB and SST-2 0 =
  negative, 1 = positive; NLI 0 = entailment, 1 = neutral, 2 = contradiction.
* ``files`` (plain, ``.gz`` or ``.xz``): JSON lines, one example per line:
  IMDB ``{"text": str, "label": 0|1}``; NLI ``{"premise": str, "hypothesis":
  str, "label": "entailment"|"neutral"|"contradiction"}`` (or the ids 0–2;
  ``"-"`` / -1 are dropped); other keys are ignored. Or a TSV file (a name
  ending ``.tsv`` before the compression suffix) whose header names the
  columns, split on tabs: GLUE's SST-2 ``sentence<TAB>label``. These are the
  layouts of the public releases of IMDB (JSON lines), GLUE and the NLI sets.

Splits of a `TaskData`: ``train``; ``validation`` (for early stopping:
carved from train, a seeded, disjoint random ``val_fraction`` of it, unless a
validation split is named); and the evaluation splits reported as results:
IMDB/SNLI ``test``; SST-2 ``test`` (GLUE's dev set: its test labels are
hidden); MNLI ``matched`` and ``mismatched`` (the official
validation_matched / validation_mismatched sets — MNLI's test labels are
hidden; this is what the GLoMo paper reports).

Batching is in `glomo_jax.text.batching`.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from glomo_jax.data.tfds_source import tfds_records
from glomo_jax.errors import InputError
from glomo_jax.io import json_lines, open_text, strip_compression
from glomo_jax.text.splits import Split, TaskData, random_subset, split_validation
from glomo_jax.text.words import plain_text, tokenize, tokenize_with_offsets

logger = logging.getLogger(__name__)

NLI_LABELS = ("entailment", "neutral", "contradiction")
SENTIMENT_LABELS = ("negative", "positive")


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """What a task reads.

  Attributes:
    text_fields: the model's text inputs, in order.
    label_names: class names by id.
    tfds_name: the TFDS dataset.
    tfds_splits: {our split name: TFDS split}; 'train' included.
    record_fields: the records' names of the text fields (features, JSON
      keys, TSV columns); None: the text_fields themselves.
  """
  text_fields: tuple[str, ...]
  label_names: tuple[str, ...]
  tfds_name: str
  tfds_splits: Mapping[str, str]
  record_fields: tuple[str, ...] | None = None

  @property
  def eval_splits(self) -> tuple[str, ...]:
    """The splits reported as results (every split but train)."""
    return tuple(name for name in self.tfds_splits if name != "train")


TASKS: dict[str, TaskSpec] = {
    "imdb": TaskSpec(("text",), SENTIMENT_LABELS, "imdb_reviews",
                     {"train": "train", "test": "test"}),
    "sst2": TaskSpec(("text",), SENTIMENT_LABELS, "glue/sst2",
                     {"train": "train", "test": "validation"}, record_fields=("sentence",)),
    "mnli": TaskSpec(("premise", "hypothesis"), NLI_LABELS, "glue/mnli",
                     {"train": "train", "matched": "validation_matched",
                      "mismatched": "validation_mismatched"}),
    "snli": TaskSpec(("premise", "hypothesis"), NLI_LABELS, "snli",
                     {"train": "train", "test": "test"}),
}


# ---- reading --------------------------------------------------------------------
def numbered_jsonl(path: str) -> Iterator[tuple[int, dict]]:
  """(line number, JSON object) of a JSON-lines file (plain, .gz or .xz);
  blank lines skipped (`glomo_jax.io.json_lines`).

  Raises:
    InputError: one line naming the file and line: a line that is not a JSON
      object or not UTF-8; a file that is damaged or cut short.
  """
  for number, record, _ in json_lines(path):
    yield number, record


def read_jsonl(path: str) -> Iterator[dict]:
  """The JSON objects of `numbered_jsonl`."""
  return (record for _, record in numbered_jsonl(path))


def numbered_tsv(path: str) -> Iterator[tuple[int, dict]]:
  """(line number, {column: text}) of a tab-separated file (plain, .gz or
  .xz) whose first line names the columns; no quoting (each line is split
  on its tabs); blank lines skipped.

  Raises:
    InputError: no header, a line with another number of columns, a file
      that is not UTF-8 or is damaged or cut short.
  """
  with open_text(path) as f:
    header = f.readline().rstrip("\r\n").split("\t")
    if not any(name.strip() for name in header):
      raise InputError(path, "no header line naming the columns", line=1)
    for number, line in enumerate(f, 2):
      line = line.rstrip("\r\n")
      if not line.strip():
        continue
      cells = line.split("\t")
      if len(cells) != len(header):
        raise InputError(path, f"{len(cells)} tab-separated columns, the header has "
                         f"{len(header)} ({header})", line=number)
      yield number, dict(zip(header, cells))


def numbered_records(path: str) -> Iterator[tuple[int, dict]]:
  """(line number, record) of a data file: TSV when its name ends in .tsv
  (before a compression suffix), else JSON lines."""
  if strip_compression(str(path)).endswith(".tsv"):
    return numbered_tsv(path)
  return numbered_jsonl(path)


def _label_id(value: Any, names: Sequence[str]) -> int | None:
  """Label id of a class name, an integer (or an integer's text) or a
  0-d integer array; None for 'no gold label' ('-', '' or -1).

  Raises:
    ValueError: an unknown name, an id out of range, or another type.
  """
  if hasattr(value, "item") and getattr(value, "shape", None) == ():
    value = value.item()  # 0-d numpy array
  if isinstance(value, (bytes, np.bytes_)):
    value = value.decode("utf-8")
  if isinstance(value, str):
    name = value.strip().lower()
    if name in ("-", ""):
      return None
    if name in names:
      return names.index(name)
    if not name.lstrip("-").isdigit():
      raise ValueError(f"unknown label {value!r} (expected one of {list(names)})")
    value = int(name)
  if isinstance(value, float) and value.is_integer():
    value = int(value)
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise ValueError(f"label {value!r} is neither a class name ({list(names)}) nor an id")
  if value == -1:
    return None
  if not 0 <= value < len(names):
    raise ValueError(f"label {value} out of range [0, {len(names)})")
  return int(value)


def record_text(value: Any, field: str = "text") -> str:
  """A record's text: a str, UTF-8 bytes or a 0-d array of either.

  Raises:
    ValueError: anything else (naming `field`), or bytes that are not UTF-8.
  """
  if hasattr(value, "item") and getattr(value, "shape", None) == ():
    value = value.item()
  if isinstance(value, (bytes, np.bytes_)):
    try:
      value = value.decode("utf-8")
    except UnicodeDecodeError as e:
      raise ValueError(f"{field!r} is not UTF-8 text ({e.reason})") from None
  if not isinstance(value, str):
    raise ValueError(f"{field!r} holds {type(value).__name__}, not text")
  return value


def _tokenized_split(records: Iterable[tuple[int, Mapping[str, Any]]], spec: TaskSpec,
                     where: str, tokenizer: Callable[[str], list[str]],
                     unit: str = "record") -> Split:
  """records: (number, record) pairs; unit: what the number counts, 'line'
  (of a file) or 'record' (named in errors)."""
  texts: dict[str, list[list[str]]] = {f: [] for f in spec.text_fields}
  keep_raw = tokenizer is tokenize      # words with their characters in the text
  raw = {f: [] for f in spec.text_fields} if keep_raw else None
  spans = {f: [] for f in spec.text_fields} if keep_raw else None
  labels: list[int] = []
  dropped = 0
  for number, record in records:
    keys = spec.record_fields or spec.text_fields
    missing = [k for k in keys + ("label",) if k not in record]
    try:
      if missing:
        raise ValueError(f"missing {missing} (has {sorted(record)[:20]})")
      label = _label_id(record["label"], spec.label_names)
      example = None if label is None else [record_text(record[k], k) for k in keys]
    except ValueError as e:
      raise InputError(where, str(e), **{unit: number}) from None
    if example is None:
      dropped += 1
      continue
    for f, text in zip(spec.text_fields, example):
      if keep_raw:
        words, word_spans = tokenize_with_offsets(text)
        raw[f].append(plain_text(text))
        spans[f].append(np.asarray(word_spans, np.int32).reshape(-1, 2))
      else:
        words = tokenizer(text)
      texts[f].append(words)
    labels.append(label)
  if dropped:
    logger.info("%s: dropped %d examples without a gold label", where, dropped)
  if not labels:
    raise InputError(where, f"no example with a gold label ({dropped} without one)")
  return Split(texts, np.asarray(labels, np.int32), raw=raw, spans=spans)


def read_split(task: str, source: str, location: str, *, data_dir: str | None = None,
               tfds_reader: str = "auto", download: bool = False,
               tokenizer: Callable[[str], list[str]] = tokenize) -> Split:
  """One tokenized split.

  Args:
    task: 'imdb', 'sst2', 'mnli' or 'snli'.
    source: 'tfds' (location = TFDS split, e.g. 'validation_matched') or
      'files' (location = path of a JSON-lines or TSV file, `numbered_records`).
    data_dir, tfds_reader, download: TFDS options ('auto' reads ArrayRecord
      with the data_source reader, anything else with tf.data).
    tokenizer: text → words.
  """
  spec = _spec(task)
  if source == "tfds":
    records = enumerate(tfds_records(spec.tfds_name, location, data_dir=data_dir,
                                     reader=tfds_reader, download=download))
    return _tokenized_split(records, spec, f"tfds {spec.tfds_name!r} split {location!r}",
                            tokenizer)
  if source == "files":
    return _tokenized_split(numbered_records(location), spec, str(location), tokenizer,
                            "line")
  raise ValueError(f"unknown source {source!r}: 'tfds' or 'files'")


def _spec(task: str) -> TaskSpec:
  if task not in TASKS:
    raise ValueError(f"unknown task {task!r}: one of {sorted(TASKS)}")
  return TASKS[task]


def load_task(task: str, source: str = "tfds", *, files: Mapping[str, str] | None = None,
              validation: str | None = None, val_fraction: float = 0.1,
              test_fraction: float = 0.0, seed: int = 0, max_train_examples: int | None = None,
              max_eval_examples: int | None = None, data_dir: str | None = None,
              tfds_reader: str = "auto", download: bool = False,
              tokenizer: Callable[[str], list[str]] = tokenize) -> TaskData:
  """Reads and tokenizes a task.

  Args:
    task: 'imdb', 'sst2', 'mnli' or 'snli'.
    source: 'tfds' or 'files'.
    files: for source='files': {split name: path}, 'train' required; a
      'validation' entry is used as the validation split (nothing carved);
      every other entry becomes an evaluation split (e.g. {'test': ...}).
    validation: for source='tfds': a TFDS split to use as validation instead of
      carving one (e.g. 'validation' of snli).
    val_fraction: share of train carved out as validation (seeded by `seed`).
    test_fraction: share of train carved out (after validation, seeded by
      `seed` + 1) as the task's first evaluation split, which the data must
      not have (the local train-only files); 0: nothing carved.
    seed: seed of the validation split and of the subsets.
    max_train_examples: a seeded random subset of train (after carving).
    max_eval_examples: same for validation and evaluation splits.
    data_dir, tfds_reader, download: TFDS options (see `read_split`).
    tokenizer: text → words.

  Returns:
    TaskData with splits train, validation and the evaluation splits.
  """
  spec = _spec(task)
  read = lambda loc: read_split(task, source, loc, data_dir=data_dir,  # noqa: E731
                                tfds_reader=tfds_reader, download=download,
                                tokenizer=tokenizer)
  if source == "tfds":
    locations = dict(spec.tfds_splits)
    if validation is not None:
      locations["validation"] = validation
  elif source == "files":
    if not files or "train" not in files:
      raise ValueError("source='files' needs files={'train': path, ...}")
    if validation is not None:
      raise ValueError("with source='files' name the validation file in files")
    locations = dict(files)
  else:
    raise ValueError(f"unknown source {source!r}: 'tfds' or 'files'")

  splits = {name: read(loc) for name, loc in locations.items()}
  if "validation" not in splits:
    splits["train"], splits["validation"] = split_validation(
        splits["train"], val_fraction, seed)
  if test_fraction:
    name = spec.eval_splits[0]
    if name in splits:
      raise ValueError(f"test_fraction carves a {name!r} split, but the data has one")
    splits["train"], splits[name] = split_validation(splits["train"], test_fraction, seed + 1)
  splits["train"] = random_subset(splits["train"], max_train_examples, seed)
  for name in splits:
    if name != "train":
      splits[name] = random_subset(splits[name], max_eval_examples, seed)
  eval_splits = tuple(n for n in splits if n not in ("train", "validation"))
  ordered = {n: splits[n] for n in ("train", "validation") + eval_splits}
  data = TaskData(task, ordered, spec.text_fields, spec.label_names, eval_splits)
  logger.info("%s (%s): %s", task, source, data.summary())
  return data
