"""The synthetic agreement task: labels, the one changed verb, disjointness
from the pretraining corpus, determinism."""
import numpy as np
import pytest

from glomo_jax.data.synthetic import (PLURAL_VERBS, SINGULAR_VERBS, SyntheticConfig,
                                      generate_document)
from glomo_jax.tasks.agreement import (AGREEMENT_LABELS, agreement_split,
                                       load_agreement_task, sentences_with_verbs)

SYN = SyntheticConfig(num_documents=50, seed=3)


def test_sentences_and_their_verbs_come_from_the_document():
  doc = generate_document(SYN, 50)
  sentences = sentences_with_verbs(doc)
  assert sentences and " ".join(w for s, _ in sentences for w in s) == doc.text
  for words, verbs in sentences:
    assert words[-1] == "." and "." not in words[:-1]
    assert all(words[v] in SINGULAR_VERBS | PLURAL_VERBS for v in verbs)


def test_a_violated_sentence_differs_in_exactly_one_verb_number():
  split, _ = agreement_split(SYN, 50, 300, seed=0)
  originals = [w for d in range(50, 80) for w, _ in sentences_with_verbs(generate_document(SYN, d))]
  labels = split.labels
  assert set(labels.tolist()) == {0, 1} and 0.4 < labels.mean() < 0.6
  for words, label, original in zip(split.texts["text"], labels, originals):
    diff = [i for i, (a, b) in enumerate(zip(words, original)) if a != b]
    assert len(words) == len(original)
    if label == 1:
      assert diff == []
    else:
      (i,) = diff
      assert {words[i] in SINGULAR_VERBS, original[i] in SINGULAR_VERBS} == {True, False}
      assert words[i] in SINGULAR_VERBS | PLURAL_VERBS


def test_splits_use_documents_after_the_corpus_and_are_deterministic():
  data = load_agreement_task(40, 20, 30, synthetic=SYN)
  assert data.task == "agreement" and data.label_names == AGREEMENT_LABELS
  assert data.eval_splits == ("test",) and data.text_fields == ("text",)
  assert [len(data.splits[n]) for n in ("train", "validation", "test")] == [40, 20, 30]
  # train comes from the first documents after the corpus, then validation
  train, nxt = agreement_split(SYN, SYN.num_documents, 40, seed=0)
  assert data.splits["train"].fingerprint_keys() == train.fingerprint_keys()
  validation, _ = agreement_split(SYN, nxt, 20, seed=0)
  assert data.splits["validation"].fingerprint_keys() == validation.fingerprint_keys()
  again = load_agreement_task(40, 20, 30, synthetic=SYN)
  for name in data.splits:
    assert data.splits[name].fingerprint_keys() == again.splits[name].fingerprint_keys()
  other = load_agreement_task(40, 20, 30, synthetic=SYN, seed=1)
  assert not np.array_equal(other.splits["train"].labels, data.splits["train"].labels)
  with pytest.raises(ValueError, match="at least 1"):
    load_agreement_task(0, 20, 30, synthetic=SYN)
