"""Does the pretrained GLoMo model itself prefer the verb form that agrees?

The language-model condition of the agreement literature (Linzen, Dupoux &
Goldberg 2016; Gulordava et al. 2018): after the words before a verb, the
model is right when it gives the verb's form of the correct number a higher
probability than the same verb's form of the other number ("the keys to the
cabinet" → are > is). GLoMo's forward direction is such a model
(`GLoMo.next_token_log_probs`: the row of the prefix's last piece predicts
the next piece), and its graphs are trained for exactly that prediction: if
the model does not prefer the agreeing form, nothing in its objective asked
the row before the verb to read the subject, and its graphs need not hold
that arc (`glomo_jax.classification.subject_arcs` measures the arc itself).
Any language model with the same method is scored the same way (the
same-size LSTM control of experiments/lstm_control.py).

An instance is a verb-number example (`glomo_jax.classification.verb_number`:
'words', 'verb', 'label', optional 'subject', 'attractors'); its verb form
must be one of `FORM_PAIRS` (is/are, was/were, has/have); a form of
several pieces scores the sum of its pieces' log-probabilities. The prefix
is read as written, the words joined by spaces, as the graph predictor
reads a task's text.
"""
from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from glomo_jax.classification.verb_number import parse_example
from glomo_jax.downstream.scores import ScoreGroup, group_accuracy, group_membership
from glomo_jax.errors import InputError
from glomo_jax.text.readers import numbered_jsonl

# a form -> (singular form, plural form) of its verb
FORM_PAIRS = {"is": ("is", "are"), "are": ("is", "are"), "was": ("was", "were"),
              "were": ("was", "were"), "has": ("has", "have"), "have": ("has", "have")}


def form_pieces(tokenizer, form: str) -> list[int]:
  """The pieces of `form` after a space, as it follows a prefix ("▁is", or
  "▁ha" "s" in a small vocabulary)."""
  pieces = tokenizer.encode("x " + form)[len(tokenizer.encode("x")):]
  if not pieces:
    raise ValueError(f"the verb form {form!r} encodes to no piece")
  return pieces


def verb_form_log_probs(model, variables, tokenizer, examples: Sequence[dict],
                        batch_size: int = 32, pad_multiple: int = 16) -> np.ndarray:
  """float32 [N, 2]: log-probabilities of each example's singular and plural
  verb form right after its prefix: the sum over the form's pieces of each
  piece's log-probability given the prefix and the pieces before it.

  Args:
    model: a flax module whose `next_token_log_probs(tokens [B, T], mask
      [B, T])` gives float32 [B, T, V] log-probabilities, row t predicting
      token t + 1 from tokens ≤ t (`glomo_jax.models.glomo.GLoMo`, or any
      other language model); variables: its variables.
    tokenizer: the model's tokenizer.
    examples: dicts with 'words' (the sentence) and 'verb' (the verb's
      index; its form lower-cased must be in `FORM_PAIRS`).
    batch_size: sequences per model call (two an example: the prefix with
      each form); pad_multiple: lengths are padded to a multiple of this
      (fewer compiled shapes).

  Raises:
    ValueError: a verb form not in `FORM_PAIRS`.
  """
  pieces = {form: form_pieces(tokenizer, form) for form in FORM_PAIRS}
  sequences = []                                   # (prefix pieces, form pieces), 2 an example
  for i, ex in enumerate(examples):
    form = ex["words"][ex["verb"]].lower()
    if form not in FORM_PAIRS:
      raise ValueError(f"example {i}: the verb {form!r} is not one of {sorted(FORM_PAIRS)}")
    prefix = tokenizer.encode(" ".join(ex["words"][:ex["verb"]]))
    sequences += [(prefix, pieces[f]) for f in FORM_PAIRS[form]]
  log_probs = jax.jit(lambda v, t, m: model.apply(v, t, m,
                                                  method=type(model).next_token_log_probs))
  scores = np.zeros(len(sequences), np.float32)
  for start in range(0, len(sequences), batch_size):
    batch = sequences[start:start + batch_size]
    longest = max(len(p) + len(f) for p, f in batch)
    width = -(-longest // pad_multiple) * pad_multiple
    tokens = np.full((batch_size, width), tokenizer.pad_id, np.int32)
    mask = np.zeros((batch_size, width), bool)
    for b, (prefix, form) in enumerate(batch):
      tokens[b, :len(prefix) + len(form)] = prefix + form
      mask[b, :len(prefix) + len(form)] = True
    lp = np.asarray(log_probs(variables, jnp.asarray(tokens), jnp.asarray(mask)))
    for b, (prefix, form) in enumerate(batch):
      rows = np.arange(len(prefix) - 1, len(prefix) - 1 + len(form))   # row t predicts t + 1
      scores[start + b] = lp[b, rows, form].sum()
  return scores.reshape(len(examples), 2)


def correct_items(examples: Sequence[dict], log_probs: np.ndarray) -> np.ndarray:
  """bool [N]: the form of the example's 'label' (0 singular, 1 plural) got
  the higher log-probability (`verb_form_log_probs`; a tie is wrong)."""
  labels = np.asarray([ex["label"] for ex in examples])
  margin = log_probs[:, 1] - log_probs[:, 0]
  return np.where(labels == 1, margin > 0, margin < 0)


def agreement_scores(examples: Sequence[dict], log_probs: np.ndarray,
                     groups: Sequence[ScoreGroup]) -> dict:
  """{'accuracy', 'examples', 'accuracy/<group>', 'examples/<group>'}: how
  often the form of the example's 'label' (0 singular, 1 plural) gets the
  higher log-probability (a tie counts as wrong), over all examples and over
  each of `groups` (info: 'attractors', and 'distance' = verb − subject)."""
  correct = correct_items(examples, log_probs).astype(np.float32)
  info = {"attractors": np.asarray([ex.get("attractors", -1) for ex in examples]),
          "distance": np.asarray([ex["verb"] - ex["subject"] if ex.get("subject", -1) >= 0
                                  else -1 for ex in examples])}
  member = group_membership(groups, info, np.arange(len(examples)))
  sums = {"group_correct": correct @ member, "group_count": member.sum(0)}
  return {"accuracy": float(correct.mean()), "examples": len(examples),
          **group_accuracy(groups, sums)}


def read_probe_examples(path: str, limit: int | None = None) -> list[dict]:
  """Probe instances of a verb-number JSON-lines file: {'words' (the whole
  sentence), 'verb', 'label', 'subject', 'attractors'}, each record checked
  as the task checks it (`parse_example`).

  Raises:
    InputError: one line naming the file, the line and the problem.
  """
  out = []
  for number, record in numbered_jsonl(path):
    try:
      parsed = parse_example(record)
      form = record["words"][record["verb"]].lower()
      if form not in FORM_PAIRS:
        raise ValueError(f"the verb {form!r} is not one of {sorted(FORM_PAIRS)}")
    except ValueError as e:
      raise InputError(path, str(e), line=number) from None
    out.append({"words": record["words"], "verb": record["verb"], "label": parsed["label"],
                "subject": record["subject"] if record.get("subject") is not None else -1,
                "attractors": parsed["attractors"]})
    if limit is not None and len(out) >= limit:
      break
  if not out:
    raise InputError(path, "no example")
  return out
