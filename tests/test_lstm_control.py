"""The LSTM control (experiments/lstm_control.py): its size, a
causal and padding-blind language model, a tiny run on the loop from a given
tokenizer (resumed, a changed config refused), and the verb-form probe on
the run's checkpoint."""
import dataclasses
import json
import os
import random
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import REPO
from glomo_jax.classification.lm_agreement import agreement_scores, verb_form_log_probs
from glomo_jax.classification.verb_number import SCORE_GROUPS
from glomo_jax.config import ModelConfig
from glomo_jax.data import Tokenizer, train_tokenizer
from glomo_jax.models.glomo import GLoMo
from glomo_jax.pretraining import PretrainConfig
from glomo_jax.train.config import LoopOptions

sys.path.insert(0, REPO)
from experiments.configs import lstm_lm as lstm_config  # noqa: E402
from experiments.configs import wiki_cpu  # noqa: E402
from experiments.lstm_control import (LstmLm, LstmLmConfig, LstmOptions,  # noqa: E402
                                      heldout_next_token_loss, is_lstm_run,
                                      lstm_parameter_count, restore_language_model,
                                      train_lstm_lm)

ONE = jax.devices()[:1]
TINY = LstmOptions(dim=12, hidden=16, num_layers=2, loss_chunk_size=64)
NOUNS = [("dog", "dogs"), ("cat", "cats"), ("key", "keys"), ("man", "men")]
VERBS = [("is", "are"), ("was", "were"), ("has", "have")]


def sentence(rng: random.Random) -> str:
  """'the dogs near the cat are here .': the verb agrees with the first noun."""
  number = rng.randrange(2)
  subject, attractor = rng.choice(NOUNS)[number], rng.choice(NOUNS)[rng.randrange(2)]
  return f"the {subject} near the {attractor} {rng.choice(VERBS)[number]} here ."


def write_corpus(directory) -> tuple[str, str]:
  """(JSON-lines corpus of 60 documents, a word tokenizer of its words)."""
  rng = random.Random(0)
  documents = [" ".join(sentence(rng) for _ in range(8)) for _ in range(60)]
  corpus = os.path.join(directory, "corpus.jsonl")
  with open(corpus, "w", encoding="utf-8") as f:
    f.writelines(json.dumps({"text": d}) + "\n" for d in documents)
  train_tokenizer(documents, 40, os.path.join(directory, "tok") + "/", model_type="word")
  return corpus, os.path.join(directory, "tok", "tokenizer.model")


def config_for(directory, steps: int = 4, **changes) -> LstmLmConfig:
  """A seconds-long LSTM run on `write_corpus`'s documents and tokenizer,
  evaluated and saved every 2 steps, reported every step."""
  corpus, tokenizer = write_corpus(str(directory))
  return LstmLmConfig(
      lstm=TINY, corpus={"source": "files", "pattern": corpus}, tokenizer_path=tokenizer,
      heldout_fraction=0.1, batch_size=4, bptt=12, shift=6, eval_batches=2,
      learning_rate=0.01,
      loop=LoopOptions(num_steps=steps, eval_every=2, checkpoint_every=2, log_every=1,
                       compile_fast=True), **changes)


@pytest.fixture(scope="module")
def lstm_run(tmp_path_factory):
  directory = tmp_path_factory.mktemp("lstm")
  config = config_for(directory)
  workdir = str(directory / "run")
  return config, workdir, train_lstm_lm(config, workdir, devices=ONE)


def n_params(tree) -> int:
  return sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(tree))


def init_shapes(model):
  """The model's params, traced (nothing compiled)."""
  return jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0),
                                           jnp.zeros((1, 5), jnp.int32)))["params"]


def test_parameter_count_formula_and_the_preset_is_glomos_size():
  for options in (TINY, LstmOptions(dim=16, hidden=16),
                  LstmOptions(dim=8, hidden=20, num_layers=3)):
    assert n_params(init_shapes(LstmLm(options, 50))) == lstm_parameter_count(50, options)
  assert n_params(init_shapes(LstmLm(TINY, 50))["projection"]) == 17 * 12
  assert "projection" not in init_shapes(LstmLm(LstmOptions(dim=16, hidden=16), 50))
  wiki = PretrainConfig.from_dict(wiki_cpu.get_config().to_dict())
  glomo_model, everywhere = GLoMo(wiki.model.replace(vocab_size=wiki.vocab_size)), jnp.arange(5)
  glomo = n_params(jax.eval_shape(lambda: glomo_model.init(
      jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32), train=False,
      positions=(everywhere, everywhere)))["params"])
  lstm = LstmLmConfig.from_dict(lstm_config.get_config().to_dict())
  assert glomo == 2_311_942 and lstm_parameter_count(wiki.vocab_size, lstm.lstm) == 2_298_528
  assert abs(2_298_528 / glomo - 1) < 0.03
  # the preset's data, windows, evaluation and loop are wiki_cpu's
  assert {k: v for k, v in lstm.to_dict().items() if k in lstm_config.SHARED} == {
      k: v for k, v in wiki.to_dict().items() if k in lstm_config.SHARED}


def test_causal_and_blind_to_padding_and_the_loss_is_the_log_probs_mean():
  model = LstmLm(TINY, 30)
  variables = jax.jit(model.init)(jax.random.PRNGKey(1), jnp.zeros((1, 5), jnp.int32))
  log_probs = jax.jit(lambda t, m: model.apply(variables, t, m,
                                               method=LstmLm.next_token_log_probs))
  tokens = jax.random.randint(jax.random.PRNGKey(2), (2, 9), 3, 30)
  real = jnp.ones(tokens.shape, jnp.int32)
  base = np.asarray(log_probs(tokens, real))
  assert base.shape == (2, 9, 30)
  np.testing.assert_allclose(np.exp(base).sum(-1), 1.0, rtol=1e-5)
  changed = np.asarray(log_probs(tokens.at[:, 6].set(tokens[:, 6] % 20 + 4), real))
  np.testing.assert_array_equal(base[:, :6], changed[:, :6])        # row t reads tokens <= t
  assert not np.allclose(base[:, 6], changed[:, 6])
  # padding (mask 0, any token) inside and after the real tokens changes no real row
  padded = jnp.concatenate([tokens[:, :4], jnp.full((2, 2), 7), tokens[:, 4:],
                            jnp.full((2, 3), 0)], axis=1)
  mask = jnp.asarray([1] * 4 + [0] * 2 + [1] * 5 + [0] * 3)[None].repeat(2, 0)
  rows = np.flatnonzero(np.asarray(mask[0]))
  np.testing.assert_allclose(np.asarray(log_probs(padded, mask))[:, rows], base,
                             rtol=1e-5, atol=1e-6)
  # the loss: mean -log p(next token) over the real targets (tail padding)
  mask = jnp.asarray([[1] * 9, [1] * 6 + [0] * 3])
  loss, metrics = jax.jit(lambda t, m: model.apply(variables, t, m))(tokens, mask)
  picked = np.take_along_axis(base[:, :-1], np.asarray(tokens[:, 1:])[..., None], -1)[..., 0]
  targets = np.asarray(mask[:, 1:], bool)
  assert float(metrics["tokens"]) == 8 + 5
  np.testing.assert_allclose(float(loss), -picked[targets].mean(), rtol=1e-5)


def test_a_tiny_run_on_the_loop_reads_the_given_tokenizer_and_resumes(lstm_run, tmp_path):
  config, workdir, out = lstm_run
  assert out["step"] == 4 and [h["step"] for h in out["history"]] == [2, 4]
  losses = [h["heldout"]["loss"] for h in out["history"]]
  assert losses[1] < losses[0] < np.log(40) + 0.5 and out["history"][0]["heldout"]["tokens"] > 0
  assert Tokenizer.load(os.path.join(workdir, "tokenizer.model")) == Tokenizer.load(
      config.tokenizer_path)
  with open(os.path.join(workdir, "config.json"), encoding="utf-8") as f:
    recorded = json.load(f)
  assert is_lstm_run(recorded) and LstmLmConfig.from_dict(recorded) == config
  assert not is_lstm_run(PretrainConfig(model=ModelConfig.tiny()).to_dict())
  resumed = str(tmp_path / "resumed")
  first = train_lstm_lm(config.replace(loop=dataclasses.replace(config.loop, num_steps=2)),
                        resumed, devices=ONE)
  longer = train_lstm_lm(config, resumed, devices=ONE)
  assert (first["step"], longer["first_step"], longer["step"]) == (2, 2, 4)
  np.testing.assert_allclose(longer["history"][-1]["heldout"]["loss"], losses[1], rtol=1e-5)
  with pytest.raises(ValueError, match=r"another config \(changed: lstm.hidden\)"):
    train_lstm_lm(config.replace(lstm=TINY.replace(hidden=20)), resumed, devices=ONE)


def test_the_verb_form_probe_and_the_heldout_loss_of_the_run(lstm_run):
  _, workdir, out = lstm_run
  config, model, variables, tokenizer, step = restore_language_model(workdir)
  assert isinstance(model, LstmLm) and step == 4
  heldout = heldout_next_token_loss(config, model, variables, workdir)   # from the log-probs
  np.testing.assert_allclose(heldout["loss"], out["eval"]["heldout"]["loss"], rtol=1e-5)
  assert heldout["tokens"] == out["eval"]["heldout"]["tokens"]
  examples = [{"words": "the dogs near the cat are here .".split(), "verb": 5, "label": 1,
               "subject": 1, "attractors": 1},
              {"words": "the man was here .".split(), "verb": 2, "label": 0, "subject": 1,
               "attractors": 0}]
  got = verb_form_log_probs(model, variables, tokenizer, examples, batch_size=4)
  for ex, row, forms in zip(examples, got, [("is", "are"), ("was", "were")]):
    prefix = tokenizer.encode(" ".join(ex["words"][:ex["verb"]]))
    lp = model.apply(variables, jnp.asarray([prefix], jnp.int32),
                     method=LstmLm.next_token_log_probs)[0, -1]
    np.testing.assert_allclose(row, [lp[tokenizer.piece_to_id("▁" + f)] for f in forms],
                               rtol=1e-5, atol=1e-6)
  assert agreement_scores(examples, got, SCORE_GROUPS)["examples"] == 2
