"""The synthetic agreement task: labels, the one changed verb, disjointness
from the pretraining corpus, determinism."""
import numpy as np
import pytest

from glomo_jax.data.synthetic import (PLURAL_VERBS, SINGULAR_VERBS, SyntheticConfig,
                                      generate_document)
from glomo_jax.classification.agreement import (AGREEMENT_LABELS, agreement_split,
                                                load_agreement_task, sentences_with_verbs)

SYN = SyntheticConfig(num_documents=50, seed=3)


def test_sentences_and_their_verbs_come_from_the_document():
  doc = generate_document(SYN, 50)
  sentences = sentences_with_verbs(doc)
  assert sentences and " ".join(w for s, _, _ in sentences for w in s) == doc.text
  start = 0
  for words, verbs, arcs in sentences:
    assert words[-1] == "." and "." not in words[:-1]
    assert all(words[v] in SINGULAR_VERBS | PLURAL_VERBS for v in verbs)
    # the sentence's arcs are the document's arcs inside it, shifted; every
    # verb is the target of one
    inside = [(t - start, s - start) for t, s in doc.arcs.tolist()
              if start <= s and t < start + len(words)]
    assert sorted(map(tuple, arcs.tolist())) == sorted(inside)
    assert set(verbs) <= set(arcs[:, 0].tolist()) and (arcs[:, 1] < arcs[:, 0]).all()
    start += len(words)


def test_a_violated_sentence_differs_in_exactly_one_verb_number():
  split, _ = agreement_split(SYN, 50, 300, seed=0)
  originals = [w for d in range(50, 80) for w, _, _ in sentences_with_verbs(generate_document(SYN, d))]
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


def test_arc_graphs_are_the_planted_arcs():
  from glomo_jax.graphs.task_graphs import ArcGraphs  # noqa: PLC0415
  data = load_agreement_task(4, 2, 2, synthetic=SYN)
  data.splits["train"].arcs["text"][1] = np.array([[2, 0], [3, 0], [3, 1], [5, 4]])
  graphs = ArcGraphs(data, num_layers=2).batch("train", "text", np.array([1, -1]),
                                                np.array([5, 0]), 6)
  assert graphs.shape == (2, 4, 1, 6, 6) and not graphs[1].any()
  forward, backward = graphs[0, 0, 0], graphs[0, 2, 0]
  expected_fw = np.zeros((6, 6))
  expected_fw[2, 0] = 1
  expected_fw[3, [0, 1]] = 0.5                 # word 3 has two sources
  np.testing.assert_allclose(forward, expected_fw)   # the arc into word 5 is cut
  expected_bw = np.zeros((6, 6))
  expected_bw[0, [2, 3]] = 0.5                 # word 0 has two dependents
  expected_bw[1, 3] = 1
  np.testing.assert_allclose(backward, expected_bw)
  np.testing.assert_array_equal(graphs[0, 1], graphs[0, 0])   # every layer the same
  data.splits["test"].arcs = None
  with pytest.raises(ValueError, match="known arcs"):
    ArcGraphs(data, 2)
