"""Examples of the verb-number task (`glomo_jax.classification.verb_number`) from raw
text, by a rule, and from a UD treebank, by its gold parses.

Raw text (`rule_label`, `text_examples`): a verb form that fixes its own
number without a parse: is / was (singular), are / were (plural), and with
`have_forms` has (singular) / have (plural). The rule keeps the label
honest by skipping the places where the form's number need not be its
subject's:

* the sentence's first word, and questions (a sentence ending in '?',
  closing quotes and brackets aside): inversion, the subject follows
  ("Are the dogs ...");
* after there / here and after words that invert (where, what, how, why,
  when, so, nor, neither, as, than): "there are two dogs", "as are the cats";
* after you (plural form, any number) and, for were, after I / he / she / it
  (the subjunctive "if it were");
* have after a modal, "to" or "not" / "n't" ("will have", "to have",
  "could not have" are not finite), and after I (the form says nothing of
  number).

`rule_accuracy` measures the rule against a treebank's gold subjects.

Treebank (`treebank_examples`): each is / are / was / were / has / have that
is finite (VerbForm=Fin) whose gold subject (nsubj or nsubj:pass of the verb,
or of the predicate it is the aux or cop of) comes before it, has a number
(`subject_number`: its Number, plural when coordinated by "and"; not a first
or second person pronoun), and agrees with the verb form's number.
Attractors: nouns (NOUN, PROPN) strictly between subject and verb whose
Number is the other one (not the subject's own conjuncts).
"""
from __future__ import annotations

import re
from typing import Iterable, Iterator, Sequence

import numpy as np

from glomo_jax.eval.conllu import Sentence
from glomo_jax.text.words import tokenize_with_offsets

BE_FORMS = {"is": 0, "was": 0, "are": 1, "were": 1}
HAVE_FORMS = {"has": 0, "have": 1}
INVERTING = frozenset("there here where what how why when so nor neither as than".split())
SUBJUNCTIVE = frozenset("i he she it".split())
NOT_FINITE_BEFORE_HAVE = frozenset("will would can could may might must shall should "
                                   "to not n't".split())
SUBJECT_RELATIONS = ("nsubj", "nsubj:pass")
NOUNS = ("NOUN", "PROPN")
NUMBERS = {"Sing": 0, "Plur": 1}

_ABBREVIATIONS = frozenset("mr mrs ms dr st jr sr prof gen col lt sgt rev vs etc no fig "
                           "inc ltd co corp jan feb mar apr jun jul aug sep sept oct nov dec "
                           "e.g i.e u.s u.k".split())
_CLOSING = frozenset("\"”’')]")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"”')\]]*\s+(?=[\"“(\[]?[A-Z0-9])")


def rule_label(words: Sequence[str], i: int, have_forms: bool = False) -> int | None:
  """The number (0 singular, 1 plural) the rule gives the verb at words[i],
  or None where the form is not a target or the rule skips it (module
  docstring). words: the sentence's tokens (any case)."""
  forms = {**BE_FORMS, **HAVE_FORMS} if have_forms else BE_FORMS
  word = words[i].lower()
  if word not in forms or i == 0 or _is_question(words):
    return None
  before = words[i - 1].lower()
  if before in INVERTING or before == "you":
    return None
  if word == "were" and before in SUBJUNCTIVE:
    return None
  if word == "have" and before in NOT_FINITE_BEFORE_HAVE | {"i"}:
    return None
  return forms[word]


def _is_question(words: Sequence[str]) -> bool:
  """Whether the sentence's last token before closing quotes or brackets is
  '?' ('Is it?', 'He asked "is it?"')."""
  end = len(words)
  while end and words[end - 1] in _CLOSING:
    end -= 1
  return end > 0 and words[end - 1] == "?"


def split_sentences(text: str) -> Iterator[str]:
  """Sentences of a paragraph (a line of text): split after . ! ? followed by
  a space and an upper-case letter or digit, except after an abbreviation or
  a one-letter initial ("Mr. Smith", "J. Smith", "U.S. Army")."""
  for paragraph in text.split("\n"):
    start = 0
    for match in _SENTENCE_END.finditer(paragraph):
      last = paragraph[start:match.start()].rstrip("\"”')]").split()[-1:] or [""]
      stem = last[0].rstrip(".!?").lower()
      if last[0].endswith(".") and (stem in _ABBREVIATIONS or len(stem) == 1):
        continue
      yield paragraph[start:match.start()].strip()
      start = match.end()
    if paragraph[start:].strip():
      yield paragraph[start:].strip()


def text_examples(texts: Iterable[str], *, have_forms: bool = False, max_words: int = 50,
                  rng: np.random.Generator | None = None) -> Iterator[dict]:
  """Examples (`verb_number` JSON layout: words, verb, label) of raw texts:
  per sentence of at most `max_words` tokens, one target verb the rule
  labels, drawn at random among them (`rng`; None: the first)."""
  for text in texts:
    for sentence in split_sentences(text):
      words, spans = tokenize_with_offsets(sentence)
      if len(words) > max_words:
        continue
      words = [sentence[a:b] for a, b in spans]           # as written
      targets = [(i, label) for i in range(len(words))
                 if (label := rule_label(words, i, have_forms)) is not None]
      if not targets:
        continue
      i, label = targets[0] if rng is None else targets[int(rng.integers(len(targets)))]
      yield {"words": words, "verb": i, "label": label}


def _subject(sentence: Sentence, verb: int) -> int | None:
  predicate = (int(sentence.heads[verb])
               if sentence.deprels[verb].split(":")[0] in ("aux", "cop") else verb)
  if predicate < 0:
    return None
  for w, (head, rel) in enumerate(zip(sentence.heads, sentence.deprels)):
    if head == predicate and rel in SUBJECT_RELATIONS:
      return w
  return None


def subject_number(sentence: Sentence, subject: int) -> int | None:
  """0 / 1 for a singular / plural subject, None where it has no Number or
  is a first or second person pronoun; a subject coordinated by "and"
  ("the cat and the dog") is plural, whatever its first conjunct's Number."""
  feats = sentence.feats[subject]
  if feats.get("Person") in ("1", "2"):
    return None
  for conj in np.flatnonzero(sentence.heads == subject):
    if sentence.deprels[conj] == "conj" and any(
        sentence.deprels[c] == "cc" and sentence.forms[c].lower() == "and"
        for c in np.flatnonzero(sentence.heads == conj)):
      return 1
  return NUMBERS.get(feats.get("Number"))


def gold_example(sentence: Sentence, verb: int) -> dict | None:
  """The treebank example of the verb at `verb` (module docstring), or None."""
  form = sentence.forms[verb].lower()
  forms = {**BE_FORMS, **HAVE_FORMS}
  if form not in forms or sentence.feats[verb].get("VerbForm") != "Fin":
    return None
  subject = _subject(sentence, verb)
  if subject is None or subject >= verb:
    return None
  number = subject_number(sentence, subject)
  if number is None or number != forms[form]:
    return None
  attractors = sum(1 for w in range(subject + 1, verb) if sentence.upos[w] in NOUNS
                   and NUMBERS.get(sentence.feats[w].get("Number"), number) != number
                   and not (sentence.heads[w] == subject and sentence.deprels[w] == "conj"))
  return {"words": list(sentence.forms), "verb": verb, "label": number, "subject": subject,
          "attractors": attractors, "heads": [int(h) for h in sentence.heads]}


def treebank_examples(sentences: Iterable[Sentence]) -> Iterator[dict]:
  """Every gold example of the sentences (`gold_example`), in order."""
  for sentence in sentences:
    if not sentence.feats:
      raise ValueError(f"sentence {sentence.sent_id} has no FEATS column read")
    for verb in range(len(sentence)):
      example = gold_example(sentence, verb)
      if example is not None:
        yield example


def rule_accuracy(sentences: Iterable[Sentence], have_forms: bool = False) -> dict:
  """The rule against gold subjects: over the finite target verbs with a
  gold subject of known number (`subject_number`), how many the rule labels ('kept'), and how many of those it labels as the subject's
  number ('correct'); also 'skipped' among the gold-labelled verbs. The
  subject may stand before or after the verb (inversions are where a rule
  can go wrong)."""
  kept = correct = skipped = 0
  forms = {**BE_FORMS, **HAVE_FORMS} if have_forms else BE_FORMS
  for sentence in sentences:
    for verb, word in enumerate(sentence.forms):
      if word.lower() not in forms or sentence.feats[verb].get("VerbForm") != "Fin":
        continue
      subject = _subject(sentence, verb)
      if subject is None:
        continue
      number = subject_number(sentence, subject)
      if number is None:
        continue
      label = rule_label(sentence.forms, verb, have_forms)
      if label is None:
        skipped += 1
        continue
      kept += 1
      correct += int(label == number)
  return {"kept": kept, "correct": correct, "skipped": skipped,
          "accuracy": correct / kept if kept else float("nan")}
