"""The picking task (Ke et al. 2018): a sequence of n random digits and a
question k; the answer is the most frequent digit among the first k.

Ties: among the digits most frequent in the first k, the answer is the one
that appears first. This is the rule that fits every example of the
slides (a tie of 3 and 9 at k = 23 answered 3; 666333 at k = 6 answered 6):
the smallest tied digit would answer 3 for 666333, and the tied digit whose
count was reached first would answer 9 at k = 23.

Generated sets (seeded, `generate`): n uniform in [min_length, max_length],
k uniform in [min_k, min(max_k, n)], digits uniform. Malicious sets
(`generate_malicious`, as the slides' 666333666288882888819999999990): runs
of one digit, each run's digit other than the previous run's, its length
uniform in [1, max_run].

A user's sequences (`read_picking`): JSON lines, one example a line,
{"digits": "8056020170...", "k": 10} with an optional "target" that must be
the rule's answer; anything else is an `InputError` naming the file and line.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np

from glomo_jax.errors import InputError
from glomo_jax.text.readers import numbered_jsonl

FIELDS = ("digits", "k", "target")
DIGITS = "0123456789"


@dataclasses.dataclass(frozen=True)
class PickingSet:
  """Picking examples, right-padded (anything with a length is a split of
  the loop's `ExampleBatches`).

  Attributes:
    digits: uint8 [N, T] (0 after each example's length).
    lengths: int32 [N] n of each example; k: int32 [N]; targets: int32 [N].
  """
  digits: np.ndarray
  lengths: np.ndarray
  k: np.ndarray
  targets: np.ndarray

  def __len__(self) -> int:
    return len(self.lengths)

  @property
  def max_length(self) -> int:
    return self.digits.shape[1]

  def rows(self, indices) -> "PickingSet":
    """The examples at `indices` (int [M]; repeats allowed), as a set."""
    idx = np.asarray(indices, np.int64)
    return PickingSet(self.digits[idx], self.lengths[idx], self.k[idx], self.targets[idx])

  def batch(self, indices, size: int) -> dict[str, np.ndarray]:
    """Examples `indices` as a batch of `size` rows (the missing ones with
    weight 0), padded to `max_length`: digits int32 [size, T], length, k,
    target, index (of the example; −1 for padding rows) int32 [size],
    weight float32 [size]."""
    idx = np.asarray(indices, np.int64)
    pad = size - len(idx)
    if pad < 0:
      raise ValueError(f"{len(idx)} examples do not fit a batch of {size}")

    def rows(values, fill=0):
      return np.concatenate([values[idx], np.full((pad,) + values.shape[1:], fill,
                                                  values.dtype)])
    return {"digits": rows(self.digits).astype(np.int32),
            "length": rows(self.lengths), "k": rows(self.k, 1), "target": rows(self.targets),
            "index": np.concatenate([idx, np.full(pad, -1)]).astype(np.int32),
            "weight": np.concatenate([np.ones(len(idx)), np.zeros(pad)]).astype(np.float32)}

  def with_k(self, k: int) -> "PickingSet":
    """The same sequences asked the question k (each n >= k)."""
    if np.any(self.lengths < k):
      raise ValueError(f"k = {k} exceeds a sequence's length")
    ks = np.full(len(self), k, np.int32)
    return PickingSet(self.digits, self.lengths, ks, targets(self.digits, ks))


def targets(digits: np.ndarray, k: np.ndarray) -> np.ndarray:
  """The answer of each example: the most frequent digit among its first k,
  ties to the tied digit that appears first. digits: [N, T]; k: [N] (1 <= k
  <= T) -> int32 [N]."""
  digits = np.asarray(digits)
  first_k = np.arange(digits.shape[1])[None, :] < np.asarray(k)[:, None]
  counts = np.zeros((len(digits), 10), np.int64)
  first = np.zeros((len(digits), 10), np.int64)
  for d in range(10):
    hit = (digits == d) & first_k
    counts[:, d] = hit.sum(axis=1)
    first[:, d] = np.where(hit.any(axis=1), hit.argmax(axis=1), digits.shape[1])
  most = counts == counts.max(axis=1, keepdims=True)
  return np.where(most, first, digits.shape[1] + 1).argmin(axis=1).astype(np.int32)


def picking_target(digits: str, k: int) -> int:
  """`targets` of one sequence given as text ('8056...')."""
  row = np.frombuffer(digits.encode("ascii"), np.uint8) - ord("0")
  return int(targets(row[None], np.array([k]))[0])


def _draw_k(rng: np.random.Generator, lengths: np.ndarray, min_k: int,
            max_k: int | None) -> np.ndarray:
  """k uniform in [min_k, min(max_k, n)] for each n of `lengths`."""
  high = lengths if max_k is None else np.minimum(lengths, max_k)
  if np.any(high < min_k):
    raise ValueError(f"min_k = {min_k} exceeds a sequence's length or max_k")
  return rng.integers(min_k, high + 1).astype(np.int32)


def _padded(rows: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
  lengths = np.array([len(r) for r in rows], np.int32)
  digits = np.zeros((len(rows), int(lengths.max())), np.uint8)
  for i, r in enumerate(rows):
    digits[i, :len(r)] = r
  return digits, lengths


def generate(rng: np.random.Generator, count: int, min_length: int, max_length: int,
             min_k: int = 1, max_k: int | None = None) -> PickingSet:
  """`count` random examples (module docstring)."""
  if not 1 <= min_length <= max_length:
    raise ValueError(f"lengths must satisfy 1 <= min <= max, got {min_length}, {max_length}")
  lengths = rng.integers(min_length, max_length + 1, size=count).astype(np.int32)
  digits = rng.integers(0, 10, size=(count, max_length)).astype(np.uint8)
  digits[np.arange(max_length)[None, :] >= lengths[:, None]] = 0
  k = _draw_k(rng, lengths, min_k, max_k)
  return PickingSet(digits, lengths, k, targets(digits, k))


def generate_malicious(rng: np.random.Generator, count: int, length: int, max_run: int,
                       min_k: int = 1, max_k: int | None = None) -> PickingSet:
  """`count` malicious examples of `length` digits: runs of one digit
  (module docstring)."""
  if max_run < 1:
    raise ValueError(f"max_run must be >= 1, got {max_run}")
  digits = np.zeros((count, length), np.uint8)
  for row in digits:
    at, previous = 0, -1
    while at < length:
      digit = (previous + 1 + rng.integers(0, 9)) % 10 if previous >= 0 else rng.integers(0, 10)
      run = int(rng.integers(1, max_run + 1))
      row[at:at + run] = digit
      at, previous = at + run, digit
  lengths = np.full(count, length, np.int32)
  k = _draw_k(rng, lengths, min_k, max_k)
  return PickingSet(digits, lengths, k, targets(digits, k))


def from_examples(examples: Sequence[tuple[str, int]]) -> PickingSet:
  """A set of (digits as text, k) pairs, answered by the rule."""
  digits, lengths = _padded([np.frombuffer(d.encode("ascii"), np.uint8) - ord("0")
                             for d, _ in examples])
  k = np.array([k for _, k in examples], np.int32)
  return PickingSet(digits, lengths, k, targets(digits, k))


def parse_example(record: Mapping[str, Any]) -> tuple[str, int]:
  """(digits, k) of a JSON record; ValueError saying what is wrong."""
  unknown = sorted(set(record) - set(FIELDS), key=str)
  if unknown:
    raise ValueError(f"unknown fields {unknown}; an example has 'digits', 'k' and "
                     "optionally 'target'")
  digits, k = record.get("digits"), record.get("k")
  if not isinstance(digits, str) or not digits or digits.strip(DIGITS):
    raise ValueError(f"'digits' must be a non-empty string of the digits 0-9, got "
                     f"{digits!r:.60}")
  if type(k) is not int or not 1 <= k <= len(digits):
    raise ValueError(f"'k' must be an integer from 1 to the sequence's length "
                     f"{len(digits)}, got {k!r:.60}")
  if "target" in record:
    target, answer = record["target"], picking_target(digits, k)
    if type(target) is not int or target != answer:
      raise ValueError(f"'target' {target!r:.60} is not the answer: the most frequent digit "
                       f"among the first {k} is {answer} (ties: the one that appears first)")
  return digits, k


def read_picking(path: str) -> PickingSet:
  """The examples of a JSON-lines file (plain, .gz or .xz; module docstring).

  Raises:
    InputError: one line naming the file and the line: a line that is not a
      JSON object, an unknown field, digits that are empty or not 0-9, k
      outside 1..n, a target that is not the answer; or a file with no example.
  """
  examples = []
  for number, record in numbered_jsonl(path):
    try:
      examples.append(parse_example(record))
    except ValueError as e:
      raise InputError(path, str(e), line=number) from None
  if not examples:
    raise InputError(path, "no example (one JSON object a line: "
                     '{"digits": "8056020170", "k": 10})')
  return from_examples(examples)
