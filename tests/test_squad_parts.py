"""SQuAD pieces: span decoding, offsets, the official metrics, reading the
data (JSON and TFDS under mock_data), batches, and the reader's padding and
gradient guarantees."""
import gzip
import json
import lzma

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow_datasets as tfds

from glomo_jax.squad import (Paragraph, ReaderOptions, SquadReader, best_span, exact_match,
                             f1_score, normalize_answer, read_squad_json, read_squad_tfds,
                             squad_scores)
from glomo_jax.squad.batching import make_squad_batch
from glomo_jax.squad.data import carve_validation, paragraph_subset
from glomo_jax.text.words import Vocabulary, tokenize, tokenize_with_offsets
from glomo_jax.transfer.options import TransferOptions


# ---- a tiny SQuAD in the official layout ------------------------------------------
FACTS = [("Paris", "France", "2,100,000"), ("Rome", "Italy", "2,800,000"),
         ("Berlin", "Germany", "3,600,000"), ("Madrid", "Spain", "3,200,000"),
         ("Lisbon", "Portugal", "550,000"), ("Vienna", "Austria", "1,900,000")]


def squad_articles(facts=FACTS):
  """One article per fact, two paragraphs each, 2–3 questions a paragraph."""
  articles = []
  for n, (city, country, people) in enumerate(facts):
    one = (f"{city} is the capital of {country}. About {people} people live in {city}, "
           f"the largest city of {country}.")
    two = (f"The river of {city} is famous; visitors say \u201c{city} never sleeps\u201d. "
           f"In {1900 + n} a bridge was built.")
    qas_one = [{"id": f"{n}-0", "question": f"What is the capital of {country}?",
                "answers": [{"text": city, "answer_start": 0}]},
               {"id": f"{n}-1", "question": f"How many people live in {city}?",
                "answers": [{"text": f"About {people}", "answer_start": one.index("About")},
                            {"text": people, "answer_start": one.index(people)}]},
               {"id": f"{n}-2", "question": f"Which country has {city} as its largest city?",
                # wrong offset on purpose: the first occurrence is used
                "answers": [{"text": country, "answer_start": 3}]}]
    qas_two = [{"id": f"{n}-3", "question": "When was a bridge built?",
                "answers": [{"text": str(1900 + n), "answer_start": two.index(str(1900 + n))}]},
               {"id": f"{n}-4", "question": f"What do visitors say about {city}?",
                "answers": [{"text": f"{city} never sleeps",
                             "answer_start": two.index(f"{city} never")}]}]
    articles.append({"title": f"Article_{city}",
                     "paragraphs": [{"context": one, "qas": qas_one},
                                    {"context": two, "qas": qas_two}]})
  return articles


def write_squad(path, articles=None):
  """Writes the official layout (plain, .gz or .xz by suffix); returns the path."""
  text = json.dumps({"version": "1.1", "data": articles or squad_articles()})
  opener = gzip.open if str(path).endswith(".gz") else (
      lzma.open if str(path).endswith(".xz") else open)
  with opener(path, "wt", encoding="utf-8") as f:
    f.write(text)
  return str(path)


def tfds_squad_records(articles=None):
  """The articles as TFDS squad/v1.1 records (one per question, bytes)."""
  out = []
  for article in articles or squad_articles():
    for par in article["paragraphs"]:
      for qa in par["qas"]:
        out.append({"id": qa["id"].encode(), "title": article["title"].encode(),
                    "context": par["context"].encode(), "question": qa["question"].encode(),
                    "answers": {"text": np.array([a["text"].encode() for a in qa["answers"]],
                                                 object),
                                "answer_start": np.array([a["answer_start"]
                                                          for a in qa["answers"]], np.int32)}})
  return out


# ---- spans ------------------------------------------------------------------------
def brute_force_span(start, end, length, max_span):
  best, arg = -np.inf, (0, 0)
  for i in range(length):
    for j in range(i, min(length, i + max_span)):
      if start[i] + end[j] > best:
        best, arg = start[i] + end[j], (i, j)
  return arg, best


@pytest.mark.parametrize("max_span", [1, 3, 17])
def test_best_span_matches_a_brute_force_search(max_span):
  rng = np.random.default_rng(max_span)
  lengths = np.array([12, 1, 7, 12, 4, 9])
  start = rng.normal(size=(6, 12)).astype(np.float32)
  end = rng.normal(size=(6, 12)).astype(np.float32)
  mask = np.arange(12)[None] < lengths[:, None]
  first, last, score = jax.jit(best_span, static_argnums=3)(start, end, mask, max_span)
  for b, n in enumerate(lengths):
    (i, j), s = brute_force_span(start[b], end[b], n, max_span)
    assert (int(first[b]), int(last[b])) == (i, j)
    assert j >= i and j - i < max_span and j < n
    np.testing.assert_allclose(float(score[b]), s, rtol=1e-6)


def test_best_span_hand_cases():
  # the best pair (3, 1) is invalid (end before start); (0, 4) is too long for 3
  start = jnp.array([[5.0, 0.0, 0.0, 9.0, 0.0, -50.0]])
  end = jnp.array([[0.0, 8.0, 0.0, 0.0, 6.0, 99.0]])
  mask = jnp.array([[True] * 5 + [False]])            # the 99 is padding
  first, last, score = best_span(start, end, mask, 3)
  assert (int(first[0]), int(last[0]), float(score[0])) == (3, 4, 15.0)
  first, last, _ = best_span(start, end, mask, 1)      # one word: start = end
  assert (int(first[0]), int(last[0])) == (3, 3)
  # ties: the smallest start, then the shortest span
  first, last, _ = best_span(jnp.zeros((1, 4)), jnp.zeros((1, 4)), jnp.ones((1, 4), bool), 4)
  assert (int(first[0]), int(last[0])) == (0, 0)
  with pytest.raises(ValueError, match="max_span"):
    best_span(start, end, mask, 0)


# ---- offsets ----------------------------------------------------------------------
TEXTS = ["Beyonc\u00e9\u2019s \u201cCrazy in Love\u201d (2003) sold 8.5 million copies \u2014 "
         "it's N\u00b01!", "  D\u00fcsseldorf's na\u00efve caf\u00e9s, \u0130stanbul & "
         "S\u00e3o Paulo... don't 'quote' me  ", "A<br />B \u4e2d\u6587 1,000\tx"]


@pytest.mark.parametrize("text", TEXTS)
def test_tokens_keep_their_character_offsets(text):
  words, spans = tokenize_with_offsets(text)
  assert words == tokenize(text) and len(words) == len(spans)
  covered = np.zeros(len(text), bool)
  for word, (s, e) in zip(words, spans):
    assert word == text[s:e].lower()
    assert not covered[s:e].any()
    covered[s:e] = True
  # every character outside the tokens is white space (or a <br /> tag)
  rest = "".join(ch for ch, c in zip(text, covered) if not c)
  assert rest.replace("<br />", "").strip() == ""


def test_answer_spans_map_back_to_the_exact_text():
  p = Paragraph.from_text("t", TEXTS[0])
  for answer in ("\u201cCrazy in Love\u201d", "Crazy in Love", "8.5 million", "N\u00b01"):
    s = TEXTS[0].index(answer)
    first, last = p.word_span(s, s + len(answer))
    assert p.text_of(first, last) == answer
  assert p.word_span(len(TEXTS[0]), len(TEXTS[0]) + 3) is None
  assert Paragraph.from_text("t", " <br /> ").text_of(0, 0) == ""   # no words: no answer


# ---- metrics ----------------------------------------------------------------------
def test_official_normalisation_and_scores():
  assert normalize_answer("The  Cat's, hat!") == "cats hat"
  assert normalize_answer("an apple and THE pear") == "apple and pear"
  assert normalize_answer("theory of a thing") == "theory of thing"   # whole words only
  assert exact_match("the Denver Broncos", "Denver Broncos!") == 1.0
  assert f1_score("the big red dog", "red dog barked") == pytest.approx(2 / 3)
  assert f1_score("dog dog", "dog") == pytest.approx(2 / 3)             # repeats count
  assert f1_score("", "dog") == 0.0 and exact_match("", "dog") == 0.0
  assert f1_score("cat", "dog") == 0.0
  answers = {"q1": ["Denver Broncos", "the Broncos", "Broncos"], "q2": ["1900"],
             "q3": ["red dog"]}
  scores = squad_scores({"q1": "Broncos", "q2": "in 1900 a", "q3": ""}, answers)
  assert scores["exact_match"] == pytest.approx(100 / 3)
  # q1 exact (1), q2 F1 = 2·(1/2·1)/(1/2+1) = 2/3 ("a" is dropped), q3 empty (0)
  assert scores["f1"] == pytest.approx(100 * (1 + 2 / 3 + 0) / 3)
  missing = squad_scores({"q1": "Broncos"}, answers)
  assert missing["missing"] == 2 and missing["exact_match"] == pytest.approx(100 / 3)


# ---- data -------------------------------------------------------------------------
@pytest.mark.parametrize("suffix", [".json", ".json.gz", ".json.xz"])
def test_read_official_json(tmp_path, suffix):
  split = read_squad_json(write_squad(tmp_path / f"squad{suffix}"))
  assert (len(split.paragraphs), len(split)) == (12, 30)
  for q in split.questions:
    p = split.paragraphs[q.paragraph]
    assert p.text_of(*q.span) == q.answers[0]
  q = next(q for q in split.questions if q.id == "0-2")     # wrong offset: first occurrence
  assert q.span == split.paragraphs[q.paragraph].word_span(24, 30)
  assert [a for a in next(q for q in split.questions if q.id == "0-1").answers] == [
      "About 2,100,000", "2,100,000"]


def test_json_mistakes_are_named(tmp_path):
  bad = tmp_path / "bad.json"
  bad.write_text('{"version": "1.1"}')
  with pytest.raises(ValueError, match="not the SQuAD JSON layout"):
    read_squad_json(str(bad))
  bad.write_text("{")
  with pytest.raises(ValueError, match="not JSON"):
    read_squad_json(str(bad))


def test_unfound_answer_has_no_span(tmp_path):
  articles = squad_articles(FACTS[:1])
  articles[0]["paragraphs"][0]["qas"][0]["answers"] = [{"text": "Lyon", "answer_start": 0}]
  split = read_squad_json(write_squad(tmp_path / "s.json", articles))
  assert split.questions[0].span is None
  assert len(split.trainable()) == len(split) - 1
  # a cap leaves out the questions answered beyond it
  assert all(q.span[1] < 4 for q in split.trainable(4).questions)


def test_tfds_reading_path_under_mock_data(tmp_path):
  records = tfds_squad_records()
  with tfds.testing.mock_data(as_data_source_fn=lambda *a, **k: records):
    split = read_squad_tfds("train", reader="data_source")
  reference = read_squad_json(write_squad(tmp_path / "s.json"))
  assert [q.id for q in split.questions] == [q.id for q in reference.questions]
  assert [q.span for q in split.questions] == [q.span for q in reference.questions]
  assert [p.context for p in split.paragraphs] == [p.context for p in reference.paragraphs]


def test_validation_by_article_and_paragraph_subsets(tmp_path):
  split = read_squad_json(write_squad(tmp_path / "s.json"))
  train, val = carve_validation(split, 6, seed=3)
  titles = lambda s: {p.title for p in s.paragraphs}  # noqa: E731
  assert not titles(train) & titles(val) and len(val) >= 6
  assert len(train) + len(val) == len(split)
  assert carve_validation(split, 6, seed=3)[1].questions == val.questions
  sub = paragraph_subset(train, 7, seed=0)
  assert 7 <= len(sub) <= 9 and all(sub.paragraphs[q.paragraph].context in
                                    {p.context for p in train.paragraphs}
                                    for q in sub.questions)
  with pytest.raises(ValueError, match="leaves no training article"):
    carve_validation(split, 10_000)


def test_batches_cut_and_pad(tmp_path):
  split = read_squad_json(write_squad(tmp_path / "s.json"))
  words = Vocabulary.build([p.words for p in split.paragraphs])
  chars = Vocabulary.build([list(t) for p in split.paragraphs for t in p.tokens()])
  batch = make_squad_batch(split, [0, 3], words, chars, max_word_chars=4,
                           max_context_words=10, length_multiple=8, batch_size=3)
  assert batch["context"].shape == (3, 10) and batch["context_chars"].shape == (3, 10, 4)
  # question 3's answer (word 16) lies beyond the cut: no loss on it; row 2 is padding
  assert batch["question"].shape[1] % 8 == 0 and batch["weight"].tolist() == [1, 0, 0]
  assert (batch["start"][1], batch["end"][1]) == (0, 0)
  assert batch["index"].tolist() == [0, 3, -1] and batch["paragraph"].tolist() == [0, 1, -1]
  # 'Paris' as written (capital P) in the characters
  assert chars.decode(batch["context_chars"][0, 0]) == list("Pari")
  assert not batch["context_mask"][2].any() and not batch["context_chars"][2].any()


# ---- the reader -------------------------------------------------------------------
def reader_inputs(rng, b, tc, tq, lengths_c, lengths_q, graphs=True):
  inputs = {}
  for f, t, lengths in (("context", tc, lengths_c), ("question", tq, lengths_q)):
    mask = np.arange(t)[None] < np.asarray(lengths)[:, None]
    inputs[f] = np.where(mask, rng.integers(2, 30, (b, t)), 0).astype(np.int32)
    inputs[f + "_mask"] = mask
    inputs[f + "_chars"] = np.where(mask[..., None], rng.integers(1, 20, (b, t, 5)), 0
                                    ).astype(np.int32)
    if graphs:
      g = rng.random((b, 4, 2, t, t)).astype(np.float32)
      g *= mask[:, None, None, :, None] & mask[:, None, None, None, :]
      inputs[f + "_graphs"] = g / np.maximum(g.sum(-1, keepdims=True), 1e-9)
  return inputs


def pad_more(inputs, extra, rng):
  """The same batch with `extra` more padding positions holding garbage."""
  out = {}
  for k, v in inputs.items():
    if k.endswith("_graphs"):
      pad = [(0, 0)] * 3 + [(0, extra), (0, extra)]
      out[k] = np.pad(v, pad) + np.pad(np.zeros_like(v), pad, constant_values=0.3)
    elif k.endswith("_mask"):
      out[k] = np.pad(v, [(0, 0), (0, extra)])
    else:
      pad = [(0, 0), (0, extra)] + [(0, 0)] * (v.ndim - 2)
      out[k] = np.pad(v, pad, constant_values=7)
  return out


@pytest.mark.parametrize("variant", ["embeddings", "rnn", "baseline"])
def test_padding_never_reaches_real_scores(variant):
  rng = np.random.default_rng(0)
  model = SquadReader(vocab_size=30, num_chars=20, variant=variant, options=ReaderOptions(
      embed_dim=6, char_dim=3, char_filters=4, hidden=5, dense=6,
      transfer=TransferOptions(num_layers=2, features=3)))
  inputs = reader_inputs(rng, 3, 9, 5, [9, 4, 6], [5, 2, 3], graphs=variant != "baseline")
  variables = model.init(jax.random.key(0), **inputs)
  apply = jax.jit(lambda v, x: model.apply(v, **x))
  start, end = apply(variables, inputs)
  more = pad_more(inputs, 6, rng)
  start2, end2 = apply(variables, more)
  mask = inputs["context_mask"]
  np.testing.assert_allclose(np.where(mask, start, 0), np.where(mask, start2[:, :9], 0),
                             rtol=2e-5, atol=2e-6)
  np.testing.assert_allclose(np.where(mask, end, 0), np.where(mask, end2[:, :9], 0),
                             rtol=2e-5, atol=2e-6)
  assert (np.asarray(start2)[~more["context_mask"]] == -1e30).all()


@pytest.mark.parametrize("variant", ["embeddings", "uniform"])
def test_the_transfer_mixes_the_word_vectors_alone(variant):
  """As the authors' reader (squad/model_t.py): the graphs mix, and the gate
  reads, the word vectors; the characters join afterwards, so the encoder
  reads [words ; chars ; gated] and no character reaches the transfer."""
  rng = np.random.default_rng(2)
  model = SquadReader(vocab_size=30, num_chars=20, variant=variant, options=ReaderOptions(
      embed_dim=6, char_dim=3, char_filters=4, hidden=5, dense=6,
      transfer=TransferOptions(num_layers=2, features=3)))
  inputs = reader_inputs(rng, 2, 7, 4, [7, 5], [4, 3], graphs=variant == "embeddings")
  variables = model.init(jax.random.key(0), **inputs)
  assert variables["params"]["encoder"]["forward_input"]["kernel"].shape[0] == 6 + 4 + 3

  def transfer_and_start(x):
    start, state = model.apply(variables, **x, mutable=["intermediates"],
                               capture_intermediates=lambda mdl, _: mdl.name == "transfer")
    return state["intermediates"]["transfer"]["__call__"], start

  (passage, question), start = transfer_and_start(inputs)
  assert passage.shape == (2, 7, 6 + 3) and question.shape == (2, 4, 6 + 3)
  other = dict(inputs)
  for name in ("context_chars", "question_chars"):   # new characters, same padding
    other[name] = np.where(inputs[name] > 0, rng.integers(1, 20, inputs[name].shape), 0)
  (passage2, question2), start2 = transfer_and_start(other)
  np.testing.assert_array_equal(passage, passage2)
  np.testing.assert_array_equal(question, question2)
  assert not np.allclose(start, start2)     # the characters do reach the encoder


def test_graphs_and_word_vectors_get_no_gradient():
  rng = np.random.default_rng(1)
  model = SquadReader(vocab_size=30, num_chars=20, variant="embeddings", options=ReaderOptions(
      embed_dim=6, char_dim=3, char_filters=4, hidden=5, dense=6,
      transfer=TransferOptions(num_layers=2)))
  inputs = reader_inputs(rng, 2, 7, 4, [7, 5], [4, 3])
  variables = model.init(jax.random.key(0), **inputs)

  def loss(params, context_graphs, question_graphs):
    start, end = model.apply({"params": params}, **{
        **inputs, "context_graphs": context_graphs, "question_graphs": question_graphs})
    return jax.nn.log_softmax(start)[:, 1].sum() + jax.nn.log_softmax(end)[:, 2].sum()

  grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(
      variables["params"], inputs["context_graphs"], inputs["question_graphs"])
  assert not np.asarray(grads[1]).any() and not np.asarray(grads[2]).any()
  assert not np.asarray(grads[0]["embed"]["embedding"]).any()       # fixed GloVe table
  assert np.asarray(grads[0]["transfer"]["fusion"]["gate"]["kernel"]).any()
  assert np.asarray(grads[0]["chars"]["conv"]["kernel"]).any()
