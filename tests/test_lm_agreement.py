"""The pretrained model as a language model on verb number: GLoMo's next-token
log-probabilities, the verb-form probe and its reader."""
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import random_variables, write_jsonl
from fuzzing import damaged_jsonl, examples, read_or_input_error
from glomo_jax.classification.lm_agreement import (FORM_PAIRS, agreement_scores,
                                                   read_probe_examples, verb_form_log_probs)
from glomo_jax.classification.verb_number import SCORE_GROUPS
from glomo_jax.config import ModelConfig
from glomo_jax.data.tokenizer import train_tokenizer
from glomo_jax.errors import InputError
from glomo_jax.models.glomo import GLoMo

SENTENCES = ["the dog is here", "the dogs are here", "the key was old", "the keys were old",
             "the cat has a toy", "the cats have a toy", "a man is tall", "two men are tall"]


def test_next_token_log_probs_are_the_losss_first_step_and_causal():
  config = ModelConfig.tiny(context_length=1)
  model, variables = GLoMo(config), random_variables(config)
  tokens = jax.random.randint(jax.random.PRNGKey(1), (2, 9), 1, config.vocab_size)
  everywhere = jnp.arange(tokens.shape[1] - 1)
  _, metrics = model.apply(variables, tokens, train=False, positions=(everywhere, everywhere))
  next_log_probs = jax.jit(lambda t: model.apply(variables, t, method=GLoMo.next_token_log_probs))
  log_probs = next_log_probs(tokens)
  assert log_probs.shape == (2, 9, config.vocab_size)
  np.testing.assert_allclose(np.exp(log_probs).sum(-1), 1.0, rtol=1e-5)
  targets = np.asarray(tokens[:, 1:])
  picked = np.take_along_axis(np.asarray(log_probs[:, :-1]), targets[..., None], -1)
  np.testing.assert_allclose(-picked.mean(), float(metrics["loss_fw"]), rtol=1e-5)
  # row t reads only tokens <= t
  changed = next_log_probs(tokens.at[:, 6].set(tokens[:, 6] % 40 + 1))
  np.testing.assert_allclose(log_probs[:, :6], changed[:, :6], rtol=1e-6, atol=1e-6)
  assert not np.allclose(log_probs[:, 6], changed[:, 6])


@pytest.fixture(scope="module")
def word_model(tmp_path_factory):
  tokenizer = train_tokenizer(SENTENCES * 4, 64, str(tmp_path_factory.mktemp("tok")) + "/",
                              model_type="word")
  config = ModelConfig.tiny(vocab_size=tokenizer.vocab_size)
  return GLoMo(config), random_variables(config, seed=3), tokenizer


def test_verb_form_log_probs_sum_each_forms_pieces_after_the_prefix(word_model):
  model, variables, tokenizer = word_model
  examples = [{"words": s.split(), "verb": 2} for s in SENTENCES[:3]]
  examples.append({"words": "the big old cats have toys".split(), "verb": 4})
  got = verb_form_log_probs(model, variables, tokenizer, examples, batch_size=3, pad_multiple=8)
  pairs = [("is", "are"), ("is", "are"), ("was", "were"), ("has", "have")]
  piece = lambda form: tokenizer.encode(form)                               # noqa: E731
  assert all(len(piece(f)) == 1 for pair in pairs for f in pair)
  for ex, forms, row in zip(examples, pairs, got):
    prefix = tokenizer.encode(" ".join(ex["words"][:ex["verb"]]))
    lp = model.apply(variables, jnp.asarray([prefix], jnp.int32),
                     method=GLoMo.next_token_log_probs)[0, -1]
    np.testing.assert_allclose(row, [lp[piece(f)[0]] for f in forms], rtol=1e-5, atol=1e-6)
  # a form of two pieces: log p(first | prefix) + log p(second | prefix, first)
  two = [tokenizer.piece_to_id("▁the"), tokenizer.piece_to_id("▁dog")]
  prefix = tokenizer.encode("the cats")
  lp = model.apply(variables, jnp.asarray([prefix + two], jnp.int32),
                   method=GLoMo.next_token_log_probs)[0]
  expected = lp[len(prefix) - 1, two[0]] + lp[len(prefix), two[1]]
  with mock.patch("glomo_jax.classification.lm_agreement.form_pieces",
                  side_effect=lambda tok, form: two if form == "have" else piece(form)):
    got = verb_form_log_probs(model, variables, tokenizer, [{"words": "the cats have".split(),
                                                             "verb": 2}])
  np.testing.assert_allclose(got[0, 1], expected, rtol=1e-5)
  with pytest.raises(ValueError, match="'tall' is not one of"):
    verb_form_log_probs(model, variables, tokenizer, [{"words": SENTENCES[6].split(), "verb": 3}])


def test_agreement_scores_by_hand():
  examples = [{"label": 0, "verb": 3, "subject": 2, "attractors": 0},
              {"label": 1, "verb": 5, "subject": 1, "attractors": 2},
              {"label": 1, "verb": 4, "subject": 1, "attractors": 0},
              {"label": 0, "verb": 6, "subject": 1, "attractors": 1}]
  # [singular, plural]: right, wrong, a tie (wrong), right
  log_probs = np.log(np.asarray([[0.6, 0.1], [0.5, 0.2], [0.3, 0.3], [0.4, 0.2]]))
  scores = agreement_scores(examples, log_probs, SCORE_GROUPS)
  assert scores["accuracy"] == 0.5 and scores["examples"] == 4
  assert scores["accuracy/attractors_0"] == 0.5 and scores["examples/attractors_0"] == 2
  assert scores["accuracy/attractors_1+"] == 0.5 and scores["examples/attractors_1+"] == 2
  assert scores["accuracy/distance_1"] == 1.0 and scores["accuracy/distance_4+"] == 0.5
  assert scores["accuracy/distance_2-3"] == 0.0


def test_reader_checks_each_line(tmp_path):
  good = {"words": "the keys to the cabinet are here".split(), "verb": 5, "label": "plural",
          "subject": 1, "attractors": 1}
  examples = read_probe_examples(write_jsonl(tmp_path / "a.jsonl", [good]))
  assert examples == [{"words": good["words"], "verb": 5, "label": 1, "subject": 1,
                       "attractors": 1}]
  walks = {"words": "the dog walks".split(), "verb": 2, "label": "singular"}
  path = write_jsonl(tmp_path / "b.jsonl", [good, walks])
  with pytest.raises(InputError, match=r"b.jsonl:2: the verb 'walks' is not one of"):
    read_probe_examples(path)
  with pytest.raises(InputError, match="c.jsonl:1: missing"):
    read_probe_examples(write_jsonl(tmp_path / "c.jsonl", [{"words": ["a", "is"], "verb": 1}]))
  assert len(read_probe_examples(write_jsonl(tmp_path / "d.jsonl", [good] * 5), limit=2)) == 2


@settings(max_examples=examples(30))
@given(suffix=st.sampled_from(["", ".gz", ".xz"]), data=st.data())
def test_fuzzed_probe_files(tmp_path, suffix, data):
  records = [{"words": "the keys to the cabinet are here".split(), "verb": 5, "label": "plural",
              "subject": 1, "attractors": 1},
             {"words": "the dog has a toy".split(), "verb": 2, "label": 0}]
  raw = data.draw(damaged_jsonl(records, suffix))
  path = tmp_path / f"probe.jsonl{suffix}"
  path.write_bytes(raw)
  read = read_or_input_error(lambda: read_probe_examples(str(path)), str(path))
  for ex in read or []:
    assert ex["words"][ex["verb"]].lower() in FORM_PAIRS and ex["label"] in (0, 1)
    assert -1 <= ex["subject"] < ex["verb"]
