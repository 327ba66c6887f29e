"""Verb number prediction on real English (Linzen, Dupoux & Goldberg 2016):
read the words before a finite verb and say whether the verb is singular or
plural. Its subject may be many words back, with nouns of the other number
in between (attractors: "the keys to the *cabinet* are"): the arc that GLoMo's
pretraining rewards the row before the verb to find, since that row must
predict the verb.

One example is one JSON object per line (plain, .gz or .xz):

  {"words": ["The", "keys", "to", "the", "cabinet", "are", "here", "."],
   "verb": 5, "label": "plural",
   "subject": 1, "attractors": 1, "heads": [1, 6, 4, 4, 1, 6, -1, 6]}

* ``words``: the sentence's words as written (tokenized: punctuation split);
* ``verb``: the 0-based index of the target verb (≥ 1: at least one word
  before it);
* ``label``: "singular" / "plural" (or 0 / 1);
* optional ``subject`` (the gold subject's index, before the verb),
  ``attractors`` (nouns of the other number between subject and verb) and
  ``heads`` (the gold tree: each word's head index, −1 for the root).

Only ``words[:verb]`` is read (by the classifier and by the graph
predictor): the verb and what follows would give the label away; a prefix
longer than the config's `max_words` keeps its last words, those nearest
the verb. The
classifier reads the words lower-cased when `lowercase` (GloVe and most
external agreement sets are uncased); the predictor reads them as written,
joined by spaces (`Split.raw`, what it saw in pretraining). Any external
agreement set converts to this layout in a few lines;
`glomo_jax.classification.verb_number_sources` builds it from raw Wikipedia text (a
rule) and from a UD treebank (gold parses).

Oracle graphs (`graph_source='arcs'`; `oracle_arcs`):
* 'subject': one arc, the row of the word before the verb reads the gold
  subject (its own row when the subject is that word): the demo's planted
  arc on real text;
* 'tree': every gold tree edge between two words before the verb, each
  split by direction as the predictor's graphs are (the later word reads the
  earlier one forward, the earlier reads the later backward).
Arcs are (target, source) with target ≥ source, as `graphs.task_graphs.ArcGraphs`
reads them.
"""
from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np

from glomo_jax.downstream.scores import ScoreGroup
from glomo_jax.errors import InputError
from glomo_jax.text.readers import _label_id, numbered_jsonl
from glomo_jax.text.splits import Split, TaskData, random_subset, split_validation

NUMBER_LABELS = ("singular", "plural")
ORACLE_ARCS = ("subject", "tree")
INFO = ("attractors", "distance")
EVAL_SPLITS = ("test", "gold")
# scores split by attractors (0, 1, 2, ≥ 3; ≥ 1) and subject distance (1, 2–3, ≥ 4)
SCORE_GROUPS = (
    ScoreGroup("attractors_0", "attractors", 0, 0), ScoreGroup("attractors_1", "attractors", 1, 1),
    ScoreGroup("attractors_2", "attractors", 2, 2), ScoreGroup("attractors_3+", "attractors", 3),
    ScoreGroup("attractors_1+", "attractors", 1), ScoreGroup("distance_1", "distance", 1, 1),
    ScoreGroup("distance_2-3", "distance", 2, 3), ScoreGroup("distance_4+", "distance", 4))


def subject_arc(verb: int, subject: int) -> np.ndarray:
  """int32 [1, 2]: (the row before the verb, the subject)."""
  return np.asarray([[verb - 1, subject]], np.int32)


def tree_arcs(heads: np.ndarray, verb: int) -> np.ndarray:
  """int32 [n, 2] (later, earlier) of every gold edge between words < verb."""
  heads = np.asarray(heads)[:verb]
  words = np.flatnonzero((heads >= 0) & (heads < verb))
  pairs = np.stack([words, heads[words]], axis=1) if len(words) else np.zeros((0, 2), int)
  return np.sort(pairs, axis=1)[:, ::-1].astype(np.int32).reshape(-1, 2)


def _int(record: dict, key: str, low: int, high: int | None = None) -> int:
  value = record[key]
  if isinstance(value, bool) or not isinstance(value, int):
    raise ValueError(f"{key!r} must be an integer, got {value!r}")
  if value < low or (high is not None and value >= high):
    raise ValueError(f"{key!r} = {value} is outside [{low}, {high if high is not None else '∞'})")
  return value


def parse_example(record: dict, oracle: str | None = None, max_words: int | None = None
                  ) -> dict:
  """One checked example: {'words' (the prefix as written: its last
  `max_words` words when longer, those nearest the verb), 'label',
  'subject' (an index into 'words'; −1 where not given or cut off),
  'attractors', 'distance' (−1 where not given), 'arcs' (int32 [n, 2] of
  `oracle` among the kept words, or None)}.

  Raises:
    ValueError: a missing or mistyped field, an index outside the sentence,
      a subject not before the verb, or an oracle whose field is missing.
  """
  missing = [k for k in ("words", "verb", "label") if k not in record]
  if missing:
    raise ValueError(f"missing {missing} (has {sorted(record)[:20]})")
  words = record["words"]
  if not isinstance(words, list) or not all(isinstance(w, str) and w.strip() for w in words):
    raise ValueError("'words' must be a list of non-empty strings")
  verb = _int(record, "verb", 1, len(words))
  label = _label_id(record["label"], NUMBER_LABELS)
  if label is None:
    raise ValueError(f"label {record['label']!r} is not one of {list(NUMBER_LABELS)}")
  subject = _int(record, "subject", 0, verb) if record.get("subject") is not None else -1
  attractors = (_int(record, "attractors", 0) if record.get("attractors") is not None
                else -1)
  heads = record.get("heads")
  if heads is not None:
    if (not isinstance(heads, list) or len(heads) != len(words)
        or not all(isinstance(h, int) and not isinstance(h, bool) and -1 <= h < len(words)
                   and h != i for i, h in enumerate(heads))):
      raise ValueError(f"'heads' must be {len(words)} integers in [-1, {len(words)}), "
                       "none its own word's index")
  arcs = None
  if oracle == "subject":
    if subject < 0:
      raise ValueError("oracle_arcs='subject' needs each example's 'subject'")
    arcs = subject_arc(verb, subject)
  elif oracle == "tree":
    if heads is None:
      raise ValueError("oracle_arcs='tree' needs each example's 'heads'")
    arcs = tree_arcs(np.asarray(heads), verb)
  elif oracle is not None:
    raise ValueError(f"unknown oracle_arcs {oracle!r}: one of {list(ORACLE_ARCS)}")
  start = 0 if max_words is None else max(0, verb - max_words)
  if arcs is not None and start:
    arcs = arcs[(arcs >= start).all(axis=1)] - start
  return {"words": words[start:verb], "label": label,
          "subject": subject - start if subject >= start else -1,
          "attractors": attractors, "distance": verb - subject if subject >= 0 else -1,
          "arcs": arcs}


def examples_split(examples: Iterable[dict], lowercase: bool = True) -> Split:
  """A `Split` of parsed examples (`parse_example`): texts {'text': the
  prefix words, lower-cased when `lowercase`}; raw {'text': the words as
  written joined by spaces} with their spans; info {'attractors',
  'distance'}; arcs when the examples have them."""
  words, raw, spans, labels, arcs = [], [], [], [], []
  info = {k: [] for k in INFO}
  for ex in examples:
    words.append([w.lower() for w in ex["words"]] if lowercase else list(ex["words"]))
    raw.append(" ".join(ex["words"]))
    ends = np.cumsum([len(w) + 1 for w in ex["words"]]) - 1
    spans.append(np.stack([ends - [len(w) for w in ex["words"]], ends], 1).astype(np.int32))
    labels.append(ex["label"])
    arcs.append(ex["arcs"])
    for k in INFO:
      info[k].append(ex[k])
  has_arcs = bool(arcs) and all(a is not None for a in arcs)
  return Split({"text": words}, np.asarray(labels, np.int32),
               {"text": arcs} if has_arcs else None, {"text": raw}, {"text": spans},
               {k: np.asarray(v, np.int64) for k, v in info.items()})


def read_number_split(path: str, *, lowercase: bool = True, oracle: str | None = None,
                      max_words: int | None = None) -> Split:
  """The examples of a JSON-lines file (module docstring); each prefix cut
  to its last `max_words` words (`parse_example`).

  Raises:
    InputError: one line naming the file, the line and what is wrong with it;
      a file with no example.
  """
  examples = []
  for number, record in numbered_jsonl(path):
    try:
      examples.append(parse_example(record, oracle, max_words))
    except ValueError as e:
      raise InputError(path, str(e), line=number) from None
  if not examples:
    raise InputError(path, "no example")
  return examples_split(examples, lowercase)


def load_number_task(files: Mapping[str, str], *, lowercase: bool = True,
                     oracle: str | None = None, max_words: int | None = None,
                     val_fraction: float = 0.1, seed: int = 0,
                     max_train_examples: int | None = None,
                     max_eval_examples: int | None = None) -> TaskData:
  """The task's splits: train (files['train'], a seeded `max_train_examples`
  subset after the validation carve), validation (files['validation'], or a
  seeded `val_fraction` of train), and the evaluation splits present in
  `files`: 'test' (held-out text of the training source) and 'gold' (a
  gold-parsed set, e.g. UD; attractor and distance scores). max_words: keep
  each prefix's last words (the classifier would otherwise keep its first)."""
  if "train" not in files:
    raise ValueError("the verb-number task needs files={'train': path, ...}")
  unknown = sorted(set(files) - {"train", "validation", *EVAL_SPLITS})
  if unknown:
    raise ValueError(f"the verb-number task has no split {unknown}")
  read = lambda p: read_number_split(p, lowercase=lowercase, oracle=oracle,  # noqa: E731
                                     max_words=max_words)
  splits = {"train": read(files["train"])}
  if "validation" in files:
    splits["validation"] = read(files["validation"])
  else:
    splits["train"], splits["validation"] = split_validation(splits["train"], val_fraction,
                                                             seed)
  splits["train"] = random_subset(splits["train"], max_train_examples, seed)
  splits["validation"] = random_subset(splits["validation"], max_eval_examples, seed)
  evals = tuple(n for n in EVAL_SPLITS if n in files)
  for name in evals:
    splits[name] = random_subset(read(files[name]), max_eval_examples, seed)
  return TaskData("verb_number", splits, ("text",), NUMBER_LABELS, evals)
