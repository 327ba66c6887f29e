"""SQuAD v1.1 data: paragraphs and questions, tokenized with character offsets.

Two sources, one result (a `SquadSplit`):

* ``files``: the official JSON layout (``{"data": [{"title", "paragraphs":
  [{"context", "qas": [{"id", "question", "answers": [{"text",
  "answer_start"}]}]}]}]}``), plain, ``.gz`` or ``.xz``: the official
  train-v1.1.json / dev-v1.1.json, or ../shared/data/squad_v1.1 (.bz2 too).
* ``tfds``: ``squad/v1.1`` (splits train / validation; one record per
  question with id, title, context, question, answers {text, answer_start});
  questions with the same (title, context) share a paragraph.

Words are `glomo_jax.text.words.tokenize_with_offsets` tokens (lower-cased;
``context[start:end]`` is the token as written), so a predicted word span
maps back to the exact passage text (`Paragraph.text_of`). A question's
training target is the word span covering its first answer's characters;
when the given answer_start does not hold the answer text, the text's first
occurrence is used, and a question whose answer is found nowhere has no span
(it is left out of training and counted; evaluation still scores it against
its answer texts).
"""
from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from glomo_jax.data.tfds_source import tfds_records
from glomo_jax.errors import InputError
from glomo_jax.io import open_text
from glomo_jax.text.readers import record_text
from glomo_jax.text.words import tokenize_with_offsets

logger = logging.getLogger(__name__)

TFDS_NAME = "squad/v1.1"


@dataclasses.dataclass
class Paragraph:
  """A passage: its text, words and each word's character span.

  Attributes:
    title: the article's title. context: the passage text.
    words: lower-cased words [n]. spans: int32 [n, 2], word i is
      context[spans[i, 0]:spans[i, 1]].
  """
  title: str
  context: str
  words: list[str]
  spans: np.ndarray

  @classmethod
  def from_text(cls, title: str, context: str) -> "Paragraph":
    words, spans = tokenize_with_offsets(context)
    return cls(title, context, words, np.asarray(spans, np.int32).reshape(-1, 2))

  def tokens(self) -> list[str]:
    """The words as written (original case), for the character inputs."""
    return [self.context[s:e] for s, e in self.spans]

  def text_of(self, start: int, end: int) -> str:
    """The passage text from word `start` to word `end` (inclusive); '' for
    a passage without words."""
    if not len(self.spans):
      return ""
    return self.context[self.spans[start, 0]:self.spans[end, 1]]

  def word_span(self, char_start: int, char_end: int) -> tuple[int, int] | None:
    """(first, last) word overlapping characters [char_start, char_end), or None."""
    inside = np.flatnonzero((self.spans[:, 1] > char_start) & (self.spans[:, 0] < char_end))
    return (int(inside[0]), int(inside[-1])) if len(inside) else None


@dataclasses.dataclass
class Question:
  """A question about one paragraph.

  Attributes:
    id: the official question id. text: the question. words, tokens: its
    lower-cased words and the words as written. spans: int32 [n, 2], word
    i is text[spans[i, 0]:spans[i, 1]].
    paragraph: index of its paragraph in the split.
    answers: the ground-truth answer texts (dev: several annotators).
    span: (start, end) words of the first answer (inclusive), or None.
  """
  id: str
  text: str
  words: list[str]
  tokens: list[str]
  spans: np.ndarray
  paragraph: int
  answers: list[str]
  span: tuple[int, int] | None

  @classmethod
  def from_text(cls, id_: str, text: str, paragraph: int, answers: list[str],
                span: tuple[int, int] | None) -> "Question":
    words, spans = tokenize_with_offsets(text)
    return cls(id_, text, words, [text[s:e] for s, e in spans],
               np.asarray(spans, np.int32).reshape(-1, 2), paragraph, answers, span)


@dataclasses.dataclass
class SquadSplit:
  """Paragraphs and their questions (questions in reading order)."""
  paragraphs: list[Paragraph]
  questions: list[Question]

  def __len__(self) -> int:
    return len(self.questions)

  @property
  def texts(self) -> dict[str, list[list[str]]]:
    """Per question, the words of its passage ('context') and of the question:
    what `glomo_jax.train.batches.batch_order` buckets by."""
    return {"context": [self.paragraphs[q.paragraph].words for q in self.questions],
            "question": [q.words for q in self.questions]}

  def lengths(self, field: str) -> np.ndarray:
    """Words per question of 'context' (its passage) or 'question', int64 [N]."""
    if field == "context":
      counts = [len(self.paragraphs[q.paragraph].words) for q in self.questions]
    elif field == "question":
      counts = [len(q.words) for q in self.questions]
    else:
      raise ValueError(f"unknown field {field!r}: 'context' or 'question'")
    return np.asarray(counts, np.int64)

  def select_paragraphs(self, indices: Sequence[int]) -> "SquadSplit":
    """The paragraphs at `indices` (in that order) with all their questions."""
    new = {int(p): i for i, p in enumerate(indices)}
    questions = [dataclasses.replace(q, paragraph=new[q.paragraph])
                 for q in self.questions if q.paragraph in new]
    questions.sort(key=lambda q: q.paragraph)
    return SquadSplit([self.paragraphs[int(p)] for p in indices], questions)

  def trainable(self, max_context_words: int | None = None) -> "SquadSplit":
    """The questions with an answer span inside the first `max_context_words`
    words of their passage (all paragraphs kept)."""
    keep = [q for q in self.questions if q.span is not None and
            (max_context_words is None or q.span[1] < max_context_words)]
    return SquadSplit(self.paragraphs, keep)

  def summary(self) -> str:
    words = self.lengths("context")
    longest = int(words.max(initial=0))
    return (f"{len(self.paragraphs)} paragraphs, {len(self)} questions, passage words "
            f"mean {words.mean() if len(words) else 0:.0f} max {longest}")


def _get(record: Any, key: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
  """record[key] (`default` when absent and given), checked to be a `kind`;
  ValueError otherwise."""
  if not isinstance(record, Mapping):
    raise ValueError(f"expected a JSON object holding {key!r}, got {type(record).__name__}")
  if key not in record and default is not None:
    return default
  if key not in record:
    raise ValueError(f"missing {key!r} (has {sorted(map(str, record))[:20]})")
  value = record[key]
  if not isinstance(value, kind):
    names = "/".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
    raise ValueError(f"{key!r} holds {type(value).__name__}, not {names}")
  return value


def _text(record: Any, key: str, default: str | None = None) -> str:
  """record[key] as text (`record_text`); ValueError when absent (without a
  default) or not text."""
  return record_text(_get(record, key, object, default), key)


def _offset(value: Any) -> int:
  """An answer_start: an integer (or its text); ValueError otherwise."""
  if hasattr(value, "item") and getattr(value, "shape", None) == ():
    value = value.item()
  if isinstance(value, str) and value.strip().lstrip("-").isdigit():
    value = int(value)
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise ValueError(f"answer_start {value!r} is not an integer")
  return int(value)


def _question(qa: Mapping[str, Any], paragraph: Paragraph, index: int) -> Question:
  """A question of the official layout ({"id", "question", "answers": [{"text",
  "answer_start"}]}); ValueError for a missing or mistyped field."""
  answers = _get(qa, "answers", list, [])
  if not answers:
    raise ValueError("the question has no answer (SQuAD v1.1 questions all have one)")
  texts = [_text(a, "text") for a in answers]
  first, start = texts[0], _offset(answers[0].get("answer_start", -1))
  if start < 0 or paragraph.context[start:start + len(first)] != first:
    start = paragraph.context.find(first)   # the official offset is not there
  span = paragraph.word_span(start, start + len(first)) if first and start >= 0 else None
  return Question.from_text(_text(qa, "id"), _text(qa, "question"), index, texts, span)


def from_articles(articles: Iterable[Mapping[str, Any]], where: str) -> SquadSplit:
  """A split from the official JSON's "data" list.

  Raises:
    InputError: a missing or mistyped field (the record names the article,
      paragraph and question), or no question at all.
  """
  paragraphs, questions = [], []
  for a, article in enumerate(articles):
    place = f"article {a}"
    try:
      title = _text(article, "title", "")
      for p, par in enumerate(_get(article, "paragraphs", list, [])):
        place = f"article {a} paragraph {p}"
        paragraph = Paragraph.from_text(title, _text(par, "context"))
        for q, qa in enumerate(_get(par, "qas", list, [])):
          place = f"article {a} paragraph {p} question {q}"
          questions.append(_question(qa, paragraph, len(paragraphs)))
        paragraphs.append(paragraph)
    except ValueError as e:
      raise InputError(where, str(e), record=place) from None
  if not questions:
    raise InputError(where, "no questions")
  return SquadSplit(paragraphs, questions)


def read_squad_json(path: str) -> SquadSplit:
  """A split from an official-format JSON file (plain, .gz or .xz)."""
  try:
    with open_text(path) as f:
      data = json.load(f)
  except (json.JSONDecodeError, RecursionError) as e:
    raise InputError(path, f"not JSON ({e})") from None
  if not isinstance(data, dict) or not isinstance(data.get("data"), list):
    raise InputError(path, "not the SQuAD JSON layout (a top-level \"data\" list of "
                     "articles)")
  return from_articles(data["data"], str(path))


def from_records(records: Iterable[Mapping[str, Any]], where: str) -> SquadSplit:
  """A split from per-question records (TFDS squad features).

  Raises:
    InputError: a missing or mistyped field (the record is the question's
      number), or no question at all.
  """
  paragraphs: list[Paragraph] = []
  index: dict[tuple[str, str], int] = {}
  questions = []
  for number, record in enumerate(records):
    try:
      title, context = _text(record, "title"), _text(record, "context")
      key = (title, context)
      if key not in index:
        index[key] = len(paragraphs)
        paragraphs.append(Paragraph.from_text(title, context))
      answers = _get(record, "answers", Mapping)
      texts, starts = (list(_get(answers, k, (list, tuple, np.ndarray)))
                       for k in ("text", "answer_start"))
      if len(texts) != len(starts):
        raise ValueError(f"{len(texts)} answer texts but {len(starts)} answer_start")
      qa = {"id": _get(record, "id", object), "question": _get(record, "question", object),
            "answers": [{"text": t, "answer_start": s} for t, s in zip(texts, starts)]}
      questions.append(_question(qa, paragraphs[index[key]], index[key]))
    except ValueError as e:
      raise InputError(where, str(e), record=number) from None
  if not questions:
    raise InputError(where, "no questions")
  return SquadSplit(paragraphs, questions)


def read_squad_tfds(split: str, *, data_dir: str | None = None, reader: str = "auto",
                    download: bool = False) -> SquadSplit:
  """TFDS `squad/v1.1` split ('train' or 'validation')."""
  records = tfds_records(TFDS_NAME, split, data_dir=data_dir, reader=reader,
                         download=download)
  return from_records(records, f"tfds {TFDS_NAME!r} split {split!r}")


def carve_validation(split: SquadSplit, questions: int, seed: int = 0
                     ) -> tuple[SquadSplit, SquadSplit]:
  """(rest, validation): whole articles (by title, seeded order) held out
  until they hold at least `questions` questions; paragraphs keep their order."""
  titles = list(dict.fromkeys(p.title for p in split.paragraphs))
  order = np.random.default_rng(seed).permutation(len(titles))
  per_title: dict[str, int] = {}
  for q in split.questions:
    title = split.paragraphs[q.paragraph].title
    per_title[title] = per_title.get(title, 0) + 1
  held, count = set(), 0
  for i in order:
    if count >= questions:
      break
    held.add(titles[i])
    count += per_title.get(titles[i], 0)
  if len(held) == len(titles) and questions:
    raise ValueError(f"carving {questions} validation questions by article leaves no "
                     "training article: ask for fewer (val_questions)")
  rest = [i for i, p in enumerate(split.paragraphs) if p.title not in held]
  val = [i for i, p in enumerate(split.paragraphs) if p.title in held]
  return split.select_paragraphs(rest), split.select_paragraphs(val)


def paragraph_subset(split: SquadSplit, max_questions: int | None, seed: int = 0
                     ) -> SquadSplit:
  """Whole paragraphs in a seeded order until `max_questions` questions
  (None: all); the paragraphs keep their original order."""
  if max_questions is None or max_questions >= len(split):
    return split
  counts = np.bincount([q.paragraph for q in split.questions],
                       minlength=len(split.paragraphs))
  order = np.random.default_rng(seed).permutation(len(split.paragraphs))
  total, chosen = 0, []
  for p in order:
    if total >= max_questions:
      break
    chosen.append(int(p))
    total += int(counts[p])
  return split.select_paragraphs(sorted(chosen))
