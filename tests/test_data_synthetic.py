"""The synthetic corpus: determinism, and that every planted arc really holds."""
import numpy as np
import pytest

from glomo_jax.data import synthetic
from glomo_jax.data.synthetic import (ARC_AGREEMENT, ARC_BRACKET, ARC_COPY,
                                      SyntheticConfig, generate_corpus, generate_document)

CONFIG = SyntheticConfig(num_documents=300, seed=3)
VERBS = synthetic.SINGULAR_VERBS | synthetic.PLURAL_VERBS
NOUNS = synthetic.SINGULAR_NOUNS | synthetic.PLURAL_NOUNS


@pytest.fixture(scope="module")
def docs():
  return list(generate_corpus(CONFIG))


def test_deterministic_by_seed_and_independent_of_corpus_size(docs):
  again = list(generate_corpus(CONFIG))
  assert [d.words for d in again] == [d.words for d in docs]
  for a, b in zip(again, docs):
    np.testing.assert_array_equal(a.arcs, b.arcs)
    np.testing.assert_array_equal(a.kinds, b.kinds)
  other = list(generate_corpus(SyntheticConfig(num_documents=300, seed=4)))
  assert sum(a.words != b.words for a, b in zip(other, docs)) > 290
  # Document i does not depend on how many documents the corpus has.
  assert generate_document(SyntheticConfig(num_documents=5, seed=3), 7).words == docs[7].words


def test_shards_are_disjoint_and_cover_the_corpus(docs):
  shards = [list(generate_corpus(CONFIG, i, 3)) for i in range(3)]
  assert sum(len(s) for s in shards) == len(docs)
  for i, shard in enumerate(shards):
    assert [d.words for d in shard] == [d.words for d in docs[i::3]]


def test_small_vocabulary_and_documents_use_only_it(docs):
  vocab = synthetic.vocabulary()
  assert 200 <= len(vocab) <= 400
  assert len(set(vocab)) == len(vocab)
  used = {w for d in docs for w in d.words}
  assert used <= set(vocab)
  assert len(used) > 0.9 * len(vocab)
  for d in docs[:20]:
    assert d.text.split(" ") == list(d.words)


def test_arcs_point_backwards_inside_the_document(docs):
  for d in docs:
    assert d.arcs.dtype == np.int32 and d.arcs.shape == (len(d.kinds), 2)
    target, source = d.arcs[:, 0], d.arcs[:, 1]
    assert np.all(source >= 0) and np.all(source < target)
    assert np.all(target < len(d.words))
    assert len(np.unique(target)) == len(target)  # one source per target
    assert np.all(np.diff(target) > 0)  # sorted by target
    assert set(d.kinds.tolist()) <= {ARC_AGREEMENT, ARC_BRACKET, ARC_COPY}


def test_agreement_arcs_link_every_verb_to_a_subject_of_its_number(docs):
  for d in docs:
    agreement = {int(t): int(s) for (t, s), k in zip(d.arcs, d.kinds) if k == ARC_AGREEMENT}
    verbs = [i for i, w in enumerate(d.words) if w in VERBS]
    assert sorted(agreement) == verbs
    for t, s in agreement.items():
      assert d.words[s] in NOUNS or d.words[s] in synthetic.NAME_SET
      assert synthetic.number_of(d.words[t]) == synthetic.number_of(d.words[s])


def test_agreement_is_not_given_away_by_the_nearest_noun(docs):
  # Attractors: often the noun right before the verb has the other number.
  disagree = total = 0
  for d in docs:
    for (t, s), k in zip(d.arcs, d.kinds):
      if k != ARC_AGREEMENT:
        continue
      nearest = max(i for i in range(s, t) if synthetic.number_of(d.words[i]) and
                    d.words[i] not in VERBS)
      total += 1
      disagree += synthetic.number_of(d.words[nearest]) != synthetic.number_of(d.words[t])
  assert disagree / total > 0.1


def test_bracket_arcs_are_the_matching_pairs(docs):
  closing_of = {"(": ")", "[": "]"}
  for d in docs:
    stack, pairs = [], set()
    for i, w in enumerate(d.words):
      if w in closing_of:
        stack.append(i)
      elif w in (")", "]"):
        opening = stack.pop()
        assert closing_of[d.words[opening]] == w
        pairs.add((i, opening))
    assert not stack
    arcs = {(int(t), int(s)) for (t, s), k in zip(d.arcs, d.kinds) if k == ARC_BRACKET}
    assert arcs == pairs


def test_copy_arcs_point_to_the_first_mention(docs):
  for d in docs:
    first, expected = {}, set()
    for i, w in enumerate(d.words):
      if w in synthetic.NAME_SET:
        if w in first:
          expected.add((i, first[w]))
        else:
          first[w] = i
    arcs = {(int(t), int(s)) for (t, s), k in zip(d.arcs, d.kinds) if k == ARC_COPY}
    assert arcs == expected
    for t, s in arcs:
      assert d.words[s - 1] == "named"  # the first mention is an introduction


def test_spans_and_mix_of_relations(docs):
  spans = {k: [] for k in (ARC_AGREEMENT, ARC_BRACKET, ARC_COPY)}
  for d in docs:
    for (t, s), k in zip(d.arcs, d.kinds):
      spans[int(k)].append(int(t - s))
  for kind, values in spans.items():
    assert len(values) > 100, kind
    assert max(values) <= CONFIG.max_span
  assert min(spans[ARC_BRACKET]) >= 4
  everything = np.concatenate([np.asarray(v) for v in spans.values()])
  assert np.mean(everything >= 3) > 0.6
  assert np.max(spans[ARC_AGREEMENT]) >= 12


def test_config_validation():
  with pytest.raises(ValueError, match="max_span"):
    SyntheticConfig(max_span=5)
  with pytest.raises(ValueError, match="sentences"):
    SyntheticConfig(min_sentences=5, max_sentences=2)
  with pytest.raises(ValueError, match="shard_index"):
    list(generate_corpus(CONFIG, 3, 3))


def test_the_demo_corpus_is_pinned():
  """README's demo figures depend on the exact order of the generator's
  random draws: the demo's corpus (3,000 documents, seed 0: words, arcs and
  their kinds) has this fingerprint. A change to the grammar or to the
  draws must update it, and README's demo tables with it."""
  import hashlib  # noqa: PLC0415
  import sys  # noqa: PLC0415
  from conftest import REPO  # noqa: PLC0415
  sys.path.insert(0, REPO)
  from experiments.configs import demo  # noqa: PLC0415
  spec = demo.get_config().corpus.synthetic
  assert (spec.num_documents, spec.seed) == (3000, 0)
  digest = hashlib.sha256()
  for doc in generate_corpus(SyntheticConfig(num_documents=spec.num_documents, seed=spec.seed)):
    digest.update(doc.text.encode())
    digest.update(b"\n")
    digest.update(doc.arcs.tobytes())
    digest.update(doc.kinds.tobytes())
  assert digest.hexdigest() == (
      "19c4afa938bd0029ff908ff630c82001e5f727b2aa782784d5a6b2825c435eda")
