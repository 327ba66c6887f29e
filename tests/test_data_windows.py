"""Windows of the token stream: arithmetic, shuffling, hosts, resume, arcs, speed."""
import json

import numpy as np
import pytest

from glomo_jax.data import synthetic
from glomo_jax.data.corpus import CorpusSpec
from glomo_jax.data.stream import TokenStream, tokenize_synthetic
from glomo_jax.data.tokenizer import EOS_ID, PAD_ID, train_word_tokenizer
from glomo_jax.data.windows import WindowIterator, pretraining_data, window_starts


def hand_stream(doc_lengths):
  """Documents of consecutive ids 10, 11, ..., each followed by eos."""
  tokens, starts, next_id = [], [0], 10
  for n in doc_lengths:
    tokens += list(range(next_id, next_id + n)) + [EOS_ID]
    next_id += n
    starts.append(len(tokens))
  return TokenStream(np.asarray(tokens, np.int32), np.asarray(starts, np.int64), "hand")


@pytest.fixture(scope="module")
def word_tok(tmp_path_factory):
  return train_word_tokenizer(synthetic.vocabulary(), str(tmp_path_factory.mktemp("w")) + "/")


@pytest.fixture(scope="module")
def syn_stream(word_tok):
  config = synthetic.SyntheticConfig(num_documents=60, seed=9)
  return tokenize_synthetic(synthetic.generate_corpus(config), word_tok)


def take(it, n):
  return [next(it) for _ in range(n)]


def assert_same_batches(a, b):
  assert len(a) == len(b)
  for x, y in zip(a, b):
    assert x.keys() == y.keys()
    for k in x:
      np.testing.assert_array_equal(x[k], y[k], err_msg=k)


@pytest.mark.parametrize("n, bptt, shift, tail, expected", [
    (10, 4, 2, "pad", [0, 2, 4, 6]),      # full windows reach the end exactly
    (11, 4, 2, "pad", [0, 2, 4, 6, 8]),   # one padded tail window (8..11 + 1 pad)
    (11, 4, 2, "drop", [0, 2, 4, 6]),
    (4, 4, 2, "pad", [0]),
    (7, 4, 4, "pad", [0, 4]),             # non-overlapping, tail 4..7 + 1 pad
    (10, 2, 5, "pad", [0, 5]),            # shift > bptt: tokens 7..9 are skipped
    (12, 5, 3, "drop", [0, 3, 6]),
    (12, 5, 3, "pad", [0, 3, 6, 9]),
])
def test_window_start_arithmetic(n, bptt, shift, tail, expected):
  assert window_starts(n, bptt, shift, tail).tolist() == expected


def test_stream_shorter_than_a_window_names_both_numbers():
  with pytest.raises(ValueError, match="has 7 tokens, fewer than one window of bptt=8"):
    window_starts(7, 8, 4)
  with pytest.raises(ValueError, match="has 7 tokens.*bptt=8"):
    WindowIterator(hand_stream([6]), batch_size=1, bptt=8, shift=4)
  with pytest.raises(ValueError, match="unknown tail"):
    window_starts(7, 2, 1, "wrap")


def test_batches_hold_the_stream_slices_with_tail_padding():
  s = hand_stream([3, 2, 4])  # 12 tokens: 10 11 12 eos 13 14 eos 15 16 17 18 eos
  it = WindowIterator(s, batch_size=2, bptt=5, shift=3, shuffle=False,
                      drop_remainder=False, num_epochs=1)
  assert it.starts.tolist() == [0, 3, 6, 9]  # 9..11 + 2 padded positions
  batches = list(it)
  assert len(batches) == 2
  tokens = np.concatenate([b["tokens"] for b in batches])
  mask = np.concatenate([b["mask"] for b in batches])
  assert tokens.dtype == np.int32 and mask.dtype == np.int32
  np.testing.assert_array_equal(tokens[:3], [s.tokens[0:5], s.tokens[3:8], s.tokens[6:11]])
  np.testing.assert_array_equal(tokens[3], [17, 18, EOS_ID, PAD_ID, PAD_ID])
  np.testing.assert_array_equal(mask[3], [1, 1, 1, 0, 0])
  assert mask[:3].all()
  assert [b["window_index"].tolist() for b in batches] == [[0, 1], [2, 3]]
  assert "arc_source" not in batches[0]


def test_window_longer_than_every_document():
  s = hand_stream([1, 2, 3, 1, 2] * 10)  # documents of at most 3 tokens (+ eos)
  it = WindowIterator(s, batch_size=4, bptt=16, shift=8, seed=1)
  b = next(it)
  assert b["tokens"].shape == (4, 16) and (b["tokens"] == EOS_ID).sum(axis=1).min() >= 4
  for row, w in zip(b["tokens"], b["window_index"]):
    start = it.starts[w]
    np.testing.assert_array_equal(row, s.tokens[start:start + 16])


def test_deterministic_by_seed_and_every_epoch_a_permutation():
  s = hand_stream([50] * 20)
  def make(seed):
    return WindowIterator(s, batch_size=8, bptt=20, shift=10, seed=seed,
                          drop_remainder=False)
  a, b, c = make(3), make(3), make(4)
  per_epoch = a.batches_per_epoch
  first, second = take(a, per_epoch), take(a, per_epoch)
  assert_same_batches(first + second, take(b, 2 * per_epoch))
  order_c = np.concatenate([x["window_index"] for x in take(c, per_epoch)])
  orders = [np.concatenate([x["window_index"] for x in epoch]) for epoch in (first, second)]
  for order in orders:
    real = order[order >= 0]
    assert sorted(real.tolist()) == list(range(a.num_windows))  # each window once
  assert not np.array_equal(orders[0], orders[1])  # reshuffled every epoch
  assert not np.array_equal(orders[0], order_c)


def test_drop_remainder_drops_a_different_tail_each_epoch():
  s = hand_stream([30] * 10)  # 310 tokens: 30 windows of 20 every 10
  it = WindowIterator(s, batch_size=7, bptt=20, shift=10, seed=0)
  assert it.num_windows == 30 and it.batches_per_epoch == 4
  seen = [set(np.concatenate([x["window_index"] for x in take(it, 4)]).tolist())
          for _ in range(3)]
  assert all(len(x) == 28 for x in seen) and len(set(map(frozenset, seen))) > 1
  with pytest.raises(ValueError, match="only 30 windows.*batch_size=31"):
    WindowIterator(s, batch_size=31, bptt=20, shift=10)


def test_resume_equals_straight_iteration():
  s = hand_stream([40] * 12)
  kwargs = dict(batch_size=6, bptt=25, shift=12, seed=7)
  straight = WindowIterator(s, **kwargs)
  assert straight.batches_per_epoch == 6
  expected = take(straight, 17)  # crosses two epoch boundaries
  first = WindowIterator(s, **kwargs)
  take(first, 5)
  state = json.loads(json.dumps(first.state()))
  assert state["epoch"] == 0 and state["step"] == 5 and state["seed"] == 7
  assert len(json.dumps(state)) < 400
  resumed = WindowIterator(s, **kwargs)
  resumed.restore(state)
  got = take(resumed, 12)
  assert_same_batches(got, expected[5:])
  later = WindowIterator(s, **kwargs)
  later.restore(resumed.state())  # epoch 2, step 5
  assert (later.epoch, later.step) == (2, 5)
  assert_same_batches(take(later, 1), [next(straight)])


def test_restore_rejects_other_settings():
  s = hand_stream([40] * 12)
  state = WindowIterator(s, batch_size=6, bptt=25, shift=12, seed=7).state()
  with pytest.raises(ValueError, match="seed"):
    WindowIterator(s, batch_size=6, bptt=25, shift=12, seed=8).restore(state)
  with pytest.raises(ValueError, match="num_tokens"):
    WindowIterator(hand_stream([40] * 13), batch_size=6, bptt=25, shift=12,
                   seed=7).restore(state)
  with pytest.raises(ValueError, match="bad position"):
    WindowIterator(s, batch_size=6, bptt=25, shift=12, seed=7).restore(
        dict(state, step=99))


def test_host_shards_are_disjoint_and_cover_the_global_batch(syn_stream):
  kwargs = dict(batch_size=8, bptt=30, shift=15, seed=2)
  global_batches = take(WindowIterator(syn_stream, **kwargs), 5)
  hosts = [WindowIterator(syn_stream, process_index=p, process_count=4, **kwargs)
           for p in range(4)]
  for g in global_batches:
    parts = [next(h) for h in hosts]
    assert all(p["tokens"].shape == (2, 30) for p in parts)
    ids = np.concatenate([p["window_index"] for p in parts])
    assert len(set(ids.tolist())) == 8
    for k in g:
      np.testing.assert_array_equal(np.concatenate([p[k] for p in parts]), g[k], err_msg=k)
  assert {json.dumps(h.state()) for h in hosts} == {json.dumps(hosts[0].state())}
  with pytest.raises(ValueError, match="batch_size 8 is not divisible by process_count 3"):
    WindowIterator(syn_stream, process_index=0, process_count=3, **kwargs)
  with pytest.raises(ValueError, match="process_index"):
    WindowIterator(syn_stream, process_index=4, process_count=4, **kwargs)


def test_arcs_in_window_coordinates(syn_stream, word_tok):
  it = WindowIterator(syn_stream, batch_size=16, bptt=40, shift=20, seed=0,
                      drop_remainder=False, num_epochs=1)
  found = expected = 0
  for b in it:
    assert b["arc_source"].dtype == np.int32 and b["arc_kind"].dtype == np.int8
    for row in range(len(b["window_index"])):
      w = b["window_index"][row]
      if w < 0:
        assert (b["arc_source"][row] == -1).all()
        continue
      start = it.starts[w]
      src, kind = b["arc_source"][row], b["arc_kind"][row]
      targets = np.flatnonzero(src >= 0)
      assert np.all(src[targets] < targets)
      assert np.all((kind > 0) == (src >= 0))
      np.testing.assert_array_equal(syn_stream.arc_source[start + targets],
                                    start + src[targets])
      # Every planted arc with both ends in the window is present.
      stop = min(start + 40, syn_stream.num_tokens)
      gsrc = syn_stream.arc_source[start:stop]
      expected += int(np.sum(gsrc >= start))
      found += len(targets)
      words = [word_tok.id_to_piece(int(t))[1:] for t in b["tokens"][row]]
      for t in targets:
        s, k = int(src[t]), int(kind[t])
        if k == synthetic.ARC_COPY:
          assert words[t] == words[s] and words[t] in synthetic.NAME_SET
        elif k == synthetic.ARC_BRACKET:
          assert synthetic.CLOSE_OF[words[s]] == words[t]
        else:
          assert synthetic.number_of(words[t]) == synthetic.number_of(words[s])
  assert found == expected > 100


def test_pretraining_data_end_to_end(tmp_path, word_tok):
  spec = {"source": "synthetic", "synthetic": {"num_documents": 50, "seed": 1}}
  data = pretraining_data(spec, word_tok, batch_size=4, bptt=32, shift=16, seed=0,
                          heldout_fraction=0.2, eval_batch_size=6,
                          cache_dir=str(tmp_path / "cache"))
  assert data.eval_stream.num_documents == 10 and data.train_stream.num_documents == 40
  b = next(data.train)
  assert b["tokens"].shape == (4, 32) and "arc_source" in b
  evals = list(data.eval_iterator())
  ids = np.concatenate([e["window_index"] for e in evals])
  n_eval = len(window_starts(data.eval_stream.num_tokens, 32, 16))
  assert ids[ids >= 0].tolist() == list(range(n_eval))  # every window once, in order
  assert all(e["tokens"].shape == (6, 32) for e in evals)
  assert len(list(data.eval_iterator())) == len(evals)  # fresh pass each time
  again = pretraining_data(CorpusSpec.from_dict(spec), word_tok, batch_size=4, bptt=32,
                           shift=16, heldout_fraction=0.2,
                           cache_dir=str(tmp_path / "cache"))
  np.testing.assert_array_equal(again.train_stream.tokens, data.train_stream.tokens)
  no_eval = pretraining_data(spec, word_tok, batch_size=4, bptt=32, shift=16,
                             heldout_fraction=0)
  assert no_eval.eval_stream is None
  with pytest.raises(ValueError, match="no held-out split"):
    no_eval.eval_iterator()
