"""A built-in pretraining corpus with planted long-range dependencies.

An English-like toy language, generated deterministically from a seed, whose
every long-range dependency is known. It needs no download, so it is the
default corpus for tests, CPU smoke runs and for measuring whether a graph
predictor puts its weight on the right arcs.

Grammar (one sentence; [x] optional, | choice):

  S        -> SUBJ [ADV] VERB OBJ [PP] '.'
  SUBJ     -> (NP | NAME_REF) (PP | RC | PAREN) [PP | PAREN]
  NP       -> DET [ADJ] NOUN ['named' NAME]    ('named' introduces a name)
  PP       -> PREP (NP | NAME_REF)
  RC       -> 'that' [ADV] VERB OBJ            (subject relative clause, only
                                                right after the subject's head)
  PAREN    -> OPEN PREP NP [OPEN' PREP NP CLOSE'] CLOSE   (nested brackets)
  OBJ      -> NP | NAME_REF

Modifiers are only added while the subject–verb span stays <= max_span.

Planted arcs, as (target word index, source word index), source < target, both
inside the same document; every target has exactly one source:

* ``agreement`` (kind 1): every verb (main clause and relative clause) points
  to the head of its subject (a noun, or a name). The verb's number (runs /
  run) equals its subject's; the words in between contain attractor nouns of
  either number, so the nearest noun is not a reliable cue.
* ``bracket`` (kind 2): every closing bracket points to its opening bracket;
  ``)`` closes ``(`` and ``]`` closes ``[``, properly nested.
* ``copy`` (kind 3): a name introduced by ``named NAME`` may be mentioned again
  (as a subject, object or inside a phrase) while it is at most ``max_span``
  words back; every later mention points to the first mention. A document
  never reuses a name after that, so every repeated name has its arc.

Spans: agreement 2..max_span (a main-clause subject always carries at least
one modifier), bracket 4..11, copy 2..max_span; ``max_span`` defaults to 15.
The vocabulary is ~280 lower-case words plus ``( ) [ ] .``, all separated by
single spaces, so a word-level tokenizer (`tokenizer.train_word_tokenizer`)
maps every word to exactly one token.

Documents are generated independently (document i depends only on the seed
and i), so a shard of the corpus can be generated without the rest.
"""
from __future__ import annotations

import dataclasses
import random
from typing import Iterator

import numpy as np

ARC_NONE, ARC_AGREEMENT, ARC_BRACKET, ARC_COPY = 0, 1, 2, 3
ARC_KINDS = {ARC_AGREEMENT: "agreement", ARC_BRACKET: "bracket", ARC_COPY: "copy"}

# (singular, plural)
NOUNS = (
    ("dog", "dogs"), ("cat", "cats"), ("bird", "birds"), ("horse", "horses"),
    ("farmer", "farmers"), ("teacher", "teachers"), ("child", "children"),
    ("woman", "women"), ("man", "men"), ("king", "kings"), ("queen", "queens"),
    ("doctor", "doctors"), ("student", "students"), ("writer", "writers"),
    ("painter", "painters"), ("soldier", "soldiers"), ("sailor", "sailors"),
    ("baker", "bakers"), ("singer", "singers"), ("pilot", "pilots"),
    ("judge", "judges"), ("nurse", "nurses"), ("friend", "friends"),
    ("neighbor", "neighbors"), ("mouse", "mice"), ("goose", "geese"),
    ("wolf", "wolves"), ("fox", "foxes"), ("lion", "lions"), ("tiger", "tigers"),
    ("house", "houses"), ("river", "rivers"), ("tree", "trees"),
    ("garden", "gardens"), ("city", "cities"), ("village", "villages"),
    ("road", "roads"), ("bridge", "bridges"), ("tower", "towers"),
    ("ship", "ships"), ("car", "cars"), ("book", "books"), ("letter", "letters"),
    ("song", "songs"), ("picture", "pictures"), ("box", "boxes"),
    ("table", "tables"), ("window", "windows"), ("door", "doors"),
    ("mountain", "mountains"),
)
# (third person singular, plural); all transitive
VERBS = (
    ("sees", "see"), ("likes", "like"), ("finds", "find"), ("helps", "help"),
    ("follows", "follow"), ("watches", "watch"), ("visits", "visit"),
    ("paints", "paint"), ("chases", "chase"), ("meets", "meet"),
    ("carries", "carry"), ("builds", "build"), ("reads", "read"),
    ("writes", "write"), ("knows", "know"), ("loves", "love"),
    ("hates", "hate"), ("calls", "call"), ("leaves", "leave"),
    ("remembers", "remember"), ("forgets", "forget"), ("admires", "admire"),
    ("avoids", "avoid"), ("greets", "greet"), ("pushes", "push"),
    ("pulls", "pull"), ("holds", "hold"), ("wants", "want"), ("needs", "need"),
    ("keeps", "keep"), ("teaches", "teach"), ("guards", "guard"),
    ("feeds", "feed"), ("praises", "praise"), ("blames", "blame"),
    ("trusts", "trust"), ("fears", "fear"), ("draws", "draw"),
    ("sells", "sell"), ("buys", "buy"),
)
ADJECTIVES = (
    "old", "young", "big", "small", "red", "green", "blue", "happy", "sad",
    "quiet", "loud", "clever", "brave", "tired", "kind", "strange", "famous",
    "poor", "rich", "tall", "short", "dark", "bright", "calm", "angry",
    "gentle", "proud", "busy", "lazy", "wise",
)
ADVERBS = ("often", "never", "always", "rarely", "sometimes", "quietly",
           "slowly", "gladly", "still", "surely")
PREPOSITIONS = ("near", "behind", "with", "without", "beside", "under", "above",
                "of", "from", "around")
NAMES = (
    "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan",
    "judy", "mallory", "oscar", "peggy", "rupert", "sybil", "trent", "victor",
    "walter", "yvonne", "zack", "olga", "boris", "clara", "dmitri", "elena",
    "felix", "greta", "hugo", "irene", "jonas",
)
DETERMINERS_SG = ("a", "the", "this", "every", "one")
DETERMINERS_PL = ("the", "these", "some", "many", "two")
OPEN_BRACKETS = ("(", "[")
CLOSE_OF = {"(": ")", "[": "]"}
FUNCTION_WORDS = ("that", "named", ".")

SINGULAR_NOUNS = frozenset(s for s, _ in NOUNS)
PLURAL_NOUNS = frozenset(p for _, p in NOUNS)
SINGULAR_VERBS = frozenset(s for s, _ in VERBS)
PLURAL_VERBS = frozenset(p for _, p in VERBS)
NAME_SET = frozenset(NAMES)


def vocabulary() -> tuple[str, ...]:
  """Every word the generator can emit, sorted, without duplicates (~280)."""
  words = set(SINGULAR_NOUNS | PLURAL_NOUNS | SINGULAR_VERBS | PLURAL_VERBS)
  words.update(ADJECTIVES, ADVERBS, PREPOSITIONS, NAMES, DETERMINERS_SG,
               DETERMINERS_PL, OPEN_BRACKETS, CLOSE_OF.values(), FUNCTION_WORDS)
  return tuple(sorted(words))


def number_of(word: str) -> str | None:
  """'sg' or 'pl' for a noun, name or verb; None for any other word."""
  if word in SINGULAR_NOUNS or word in SINGULAR_VERBS or word in NAME_SET:
    return "sg"
  if word in PLURAL_NOUNS or word in PLURAL_VERBS:
    return "pl"
  return None


@dataclasses.dataclass(frozen=True)
class SyntheticConfig:
  """Size and mix of the synthetic corpus.

  Attributes:
    num_documents: documents in the corpus.
    seed: document i is a pure function of (seed, i).
    min_sentences, max_sentences: sentences per document, uniform, inclusive.
    max_span: longest agreement or copy arc, in words (target − source).
    p_adjective: chance of an adjective in a noun phrase.
    p_adverb: chance of an adverb before a verb.
    p_second_modifier: chance that a subject carries a second modifier.
    p_paren: share of subject modifiers that are bracketed (vs PP / RC).
    p_nested: chance of a nested bracket inside a bracket.
    p_intro: chance that a noun phrase introduces a new name ('named X').
    p_name_ref: chance that a noun slot mentions a name still in range.
    p_object_pp: chance of a prepositional phrase after the object.
  """
  num_documents: int = 2000
  seed: int = 0
  min_sentences: int = 4
  max_sentences: int = 10
  max_span: int = 15
  p_adjective: float = 0.35
  p_adverb: float = 0.25
  p_second_modifier: float = 0.35
  p_paren: float = 0.3
  p_nested: float = 0.4
  p_intro: float = 0.2
  p_name_ref: float = 0.6
  p_object_pp: float = 0.3

  def __post_init__(self):
    if self.num_documents < 0:
      raise ValueError(f"num_documents must be >= 0, got {self.num_documents}")
    if not 1 <= self.min_sentences <= self.max_sentences:
      raise ValueError("need 1 <= min_sentences <= max_sentences, got "
                       f"{self.min_sentences}, {self.max_sentences}")
    if self.max_span < 12:
      # A bracketed modifier ('( near the old cat [ of a dog ] )') is up to 12
      # words between a subject and its verb; a smaller span cannot fit it.
      raise ValueError(f"max_span must be >= 12, got {self.max_span}")


@dataclasses.dataclass(frozen=True)
class SyntheticDocument:
  """One generated document.

  Attributes:
    words: the document's words, in order.
    arcs: int32 [num_arcs, 2], rows (target word index, source word index),
      source < target, sorted by target; each target appears once.
    kinds: int8 [num_arcs], ARC_AGREEMENT / ARC_BRACKET / ARC_COPY per row.
  """
  words: tuple[str, ...]
  arcs: np.ndarray
  kinds: np.ndarray

  @property
  def text(self) -> str:
    """The words joined by single spaces."""
    return " ".join(self.words)


class _Writer:
  """Appends the words of one document and records their arcs."""

  def __init__(self, rng: random.Random, config: SyntheticConfig):
    self.rng = rng
    self.config = config
    self.words: list[str] = []
    self.arcs: list[tuple[int, int, int]] = []
    self.fresh_names = list(NAMES)
    rng.shuffle(self.fresh_names)
    self.live_names: list[tuple[str, int]] = []  # (name, first mention index)

  def emit(self, word: str) -> int:
    self.words.append(word)
    return len(self.words) - 1

  def arc(self, target: int, source: int, kind: int) -> None:
    self.arcs.append((target, source, kind))

  def referable_names(self) -> list[tuple[str, int]]:
    """Names whose first mention is at most max_span before the next word."""
    pos = len(self.words)
    return [(n, p) for n, p in self.live_names if pos - p <= self.config.max_span]

  def name_ref(self) -> int | None:
    """Mentions a live name again (copy arc), or returns None if none is live."""
    names = self.referable_names()
    if not names or self.rng.random() >= self.config.p_name_ref:
      return None
    name, first = self.rng.choice(names)
    pos = self.emit(name)
    self.arc(pos, first, ARC_COPY)
    return pos

  def noun_phrase(self, number: str, allow_intro: bool = True) -> int:
    """DET ADJ? NOUN ['named' NAME]; returns the index of the head noun."""
    c, rng = self.config, self.rng
    self.emit(rng.choice(DETERMINERS_SG if number == "sg" else DETERMINERS_PL))
    if rng.random() < c.p_adjective:
      self.emit(rng.choice(ADJECTIVES))
    pair = rng.choice(NOUNS)
    head = self.emit(pair[0] if number == "sg" else pair[1])
    if (allow_intro and number == "sg" and self.fresh_names
        and rng.random() < c.p_intro):
      self.emit("named")
      name = self.fresh_names.pop()
      self.live_names.append((name, self.emit(name)))
    return head

  def noun_slot(self, allow_intro: bool = True) -> tuple[int, str]:
    """A name mentioned again, or a noun phrase of random number."""
    pos = self.name_ref()
    if pos is not None:
      return pos, "sg"
    number = self.rng.choice(("sg", "pl"))
    return self.noun_phrase(number, allow_intro), number

  def verb(self, subject: int, number: str) -> None:
    if self.rng.random() < self.config.p_adverb:
      self.emit(self.rng.choice(ADVERBS))
    pair = self.rng.choice(VERBS)
    self.arc(self.emit(pair[0] if number == "sg" else pair[1]), subject,
             ARC_AGREEMENT)

  def prepositional_phrase(self) -> None:
    self.emit(self.rng.choice(PREPOSITIONS))
    self.noun_slot(allow_intro=False)

  def relative_clause(self, head: int, number: str) -> None:
    self.emit("that")
    self.verb(head, number)
    self.noun_slot(allow_intro=False)

  def bracketed(self, nested: bool) -> None:
    opening = self.rng.choice(OPEN_BRACKETS)
    start = self.emit(opening)
    self.emit(self.rng.choice(PREPOSITIONS))
    self.noun_phrase(self.rng.choice(("sg", "pl")), allow_intro=False)
    if nested:
      self.bracketed(nested=False)
    self.arc(self.emit(CLOSE_OF[opening]), start, ARC_BRACKET)

  # Longest possible length of each modifier, in words.
  _MAX_LEN = {"pp": 4, "rc": 6, "paren": 6, "paren_nested": 12}

  def modifier(self, head: int, number: str, budget: int, allow_rc: bool) -> int:
    """Adds one modifier that fits in `budget` words; returns its max length.

    A relative clause only directly follows its head (allow_rc), so that it
    never reads as attached to a noun of an earlier modifier.
    """
    c, rng = self.config, self.rng
    if rng.random() < c.p_paren:
      kind = "paren_nested" if rng.random() < c.p_nested else "paren"
    else:
      kind = rng.choice(("pp", "rc")) if allow_rc else "pp"
    if self._MAX_LEN[kind] > budget and kind == "paren_nested":
      kind = "paren"
    if self._MAX_LEN[kind] > budget:
      kind = "pp"
    if kind == "pp":
      self.prepositional_phrase()
    elif kind == "rc":
      self.relative_clause(head, number)
    else:
      self.bracketed(nested=kind == "paren_nested")
    return self._MAX_LEN[kind]

  def sentence(self) -> None:
    c, rng = self.config, self.rng
    head = self.name_ref()
    number = "sg"
    if head is None:
      number = rng.choice(("sg", "pl"))
      head = self.noun_phrase(number)
    # Words between the head and its verb: at most max_span - 1 (the verb may
    # follow an adverb, hence - 2 for the modifiers).
    budget = c.max_span - 2 - (len(self.words) - 1 - head)
    budget -= self.modifier(head, number, budget, allow_rc=True)
    if rng.random() < c.p_second_modifier and budget >= self._MAX_LEN["pp"]:
      self.modifier(head, number, budget, allow_rc=False)
    self.verb(head, number)
    self.noun_slot()
    if rng.random() < c.p_object_pp:
      self.prepositional_phrase()
    self.emit(".")


def generate_document(config: SyntheticConfig, index: int) -> SyntheticDocument:
  """Document `index` of the corpus described by `config` (deterministic)."""
  rng = random.Random(f"glomo-synthetic:{config.seed}:{index}")
  writer = _Writer(rng, config)
  for _ in range(rng.randint(config.min_sentences, config.max_sentences)):
    writer.sentence()
  arcs = sorted(writer.arcs)
  table = np.asarray([(t, s) for t, s, _ in arcs], dtype=np.int32).reshape(-1, 2)
  kinds = np.asarray([k for _, _, k in arcs], dtype=np.int8)
  return SyntheticDocument(tuple(writer.words), table, kinds)


def generate_corpus(config: SyntheticConfig = SyntheticConfig(), shard_index: int = 0,
                    num_shards: int = 1) -> Iterator[SyntheticDocument]:
  """Yields documents shard_index, shard_index + num_shards, ... of the corpus."""
  if not 0 <= shard_index < num_shards:
    raise ValueError(f"need 0 <= shard_index < num_shards, got {shard_index}, {num_shards}")
  for i in range(shard_index, config.num_documents, num_shards):
    yield generate_document(config, i)
