"""SQuAD's focused passage encoder (docs/focused.md, "SQuAD"): the reader's
shapes and padding with Ke et al.'s encoder conditioned on the question,
the 'rnn' variant's transfer on its states, a gate trained by REINFORCE
alone, a tiny run on the loop with its gate openness, and the TPU compile
target's batch."""
import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from experiments import compile_targets
from experiments.compile_targets import without_data
from experiments.configs import squad as squad_configs
from glomo_jax.focused.config import GateObjective
from glomo_jax.squad import ReaderOptions, SquadConfig, SquadFiles, SquadReader, run_squad
from glomo_jax.squad.config import FocusedPassageOptions
from glomo_jax.squad.task import SquadTask
from glomo_jax.train.programs import RunPrograms, batch_spec
from glomo_jax.train.sharding import make_mesh
from glomo_jax.transfer.options import TransferOptions
from test_squad_parts import pad_more, reader_inputs, write_squad
from test_squad_run import ONE, TINY_LOOP, TINY_OPTIM, TINY_READER

HIDDEN = 5


def focused_reader(variant: str, test_gate: str = "threshold", kind: str = "fhe"
                   ) -> SquadReader:
  return SquadReader(vocab_size=30, num_chars=20, variant=variant, options=ReaderOptions(
      embed_dim=6, char_dim=3, char_filters=4, hidden=HIDDEN, dense=6,
      transfer=TransferOptions(num_layers=2, features=3), passage_encoder="focused",
      focused=FocusedPassageOptions(kind=kind, gate_hidden=4, test_gate=test_gate)))


def test_focused_reader_shapes_padding_and_the_transfer_on_its_states():
  rng = np.random.default_rng(0)
  model = focused_reader("rnn")
  inputs = reader_inputs(rng, 3, 9, 5, [9, 4, 6], [5, 2, 3])
  variables = jax.jit(model.init)(jax.random.key(0), **inputs)
  assert {"encoder", "focused", "transfer"} <= set(variables["params"])
  captured = jax.jit(lambda v, x: model.apply(
      v, **x, method="read", mutable=["intermediates"],
      capture_intermediates=lambda m, _: m.name in ("transfer", "focused")))
  read = lambda v, x: captured(v, x)[0]  # noqa: E731
  reading, state = captured(variables, inputs)
  mask = inputs["context_mask"]
  for a in reading:
    assert a.shape == (3, 9) and np.isfinite(np.asarray(a)[mask]).all()
  np.testing.assert_array_equal(reading.gates, (np.asarray(reading.gate_logits) >= 0) & mask)
  assert (np.asarray(reading.start)[~mask] == -1e30).all()

  # more padding, holding garbage, changes no real score or gate (threshold)
  more = read(variables, pad_more(inputs, 6, rng))
  for a, b in zip(reading, more):
    np.testing.assert_allclose(np.where(mask, a, 0), np.where(mask, np.asarray(b)[:, :9], 0),
                               rtol=2e-5, atol=2e-6)
  assert not np.asarray(more.gates)[:, 9:].any()

  # 'rnn': the transfer's passage call reads [h^l ; h^u] of the focused encoder
  # (its output is [input ; gated]), after the question's
  encoded = state["intermediates"]["focused"]["__call__"][0]
  question, passage = state["intermediates"]["transfer"]["__call__"]
  assert question.shape == (3, 5, 2 * HIDDEN + 3) and passage.shape == (3, 9, 2 * HIDDEN + 3)
  np.testing.assert_allclose(
      passage[..., :2 * HIDDEN],
      np.concatenate([encoded.lower, encoded.states], -1) * mask[..., None], rtol=1e-6)
  np.testing.assert_array_equal(encoded.readable, reading.gates)
  # the passage's graphs reach the scores
  other = dict(inputs, context_graphs=inputs["context_graphs"][:, ::-1])
  assert not np.allclose(read(variables, other).start, reading.start)

  # sampled gates (training: dropout too, the same keys) ignore what padding holds
  train = jax.jit(lambda v, x: model.apply(v, **x, method="read", train=True, rngs={
      "gate": jax.random.key(7), "dropout": jax.random.key(8)}))
  pad = ~mask
  garbage = dict(inputs, context=np.where(pad, 11, inputs["context"]),
                 context_chars=np.where(pad[..., None], 5, inputs["context_chars"]),
                 context_graphs=inputs["context_graphs"] + 0.3 * ~(
                     mask[:, None, None, :, None] & mask[:, None, None, None, :]))
  sampled = train(variables, inputs)
  for a, b in zip(sampled, train(variables, garbage)):
    np.testing.assert_array_equal(a, b)
  assert not np.asarray(sampled.gates)[pad].any() and np.asarray(sampled.gates).any()


def test_the_gate_learns_by_reinforce_alone():
  """The span loss's gradient is 0 for the gate (and the projection of the
  question only it reads); the objective's, without the entropy term, is
  REINFORCE's and is not; the layers above the gate get the span loss's
  gradient alone."""
  rng = np.random.default_rng(2)
  gate = GateObjective(beta=0.5, gamma=0.2, beta_warmup=10, entropy_weight=0.0)
  model = focused_reader("baseline")
  model = model.clone(options=dataclasses.replace(
      model.options, focused=FocusedPassageOptions(gate_hidden=4, gate=gate)))
  config = SquadConfig(model=model.options)
  task = without_data(SquadTask, model=model, config=config)
  assert task.rng_streams == ("dropout", "gate") and "openness" in task.log_metrics
  inputs = reader_inputs(rng, 4, 9, 5, [9, 4, 6, 7], [5, 2, 3, 4], graphs=False)
  batch = dict(inputs, start=np.array([1, 0, 2, 3]), end=np.array([2, 1, 4, 3]),
               weight=np.ones(4, np.float32), step=np.full(4, 5, np.int32))
  variables = dict(jax.jit(model.init)(jax.random.key(0), **inputs), batch_stats={})
  rngs = {"dropout": jax.random.key(3), "gate": jax.random.key(4)}

  def terms(params):              # (objective, span loss), metrics
    loss, metrics, _ = task.loss({"params": params, "batch_stats": {}}, batch, rngs)
    return jnp.stack([loss, metrics["loss"]]), metrics

  @jax.jit
  def gradients(params):          # one backward pass for both terms
    grads, metrics = jax.jacrev(terms, has_aux=True)(params)
    d_objective, d_span = jax.tree.map(lambda g: g[0], grads), jax.tree.map(lambda g: g[1], grads)
    reading = task._read(params, batch, True, rngs)
    ce = (optax.softmax_cross_entropy_with_integer_labels(reading.start, batch["start"]) +
          optax.softmax_cross_entropy_with_integer_labels(reading.end, batch["end"]))
    return metrics["objective"], metrics, d_objective, d_span, ce.mean()

  objective, metrics, d_objective, d_span, span_loss = gradients(variables["params"])
  np.testing.assert_allclose(metrics["loss"], span_loss, rtol=1e-6)
  assert 0 < metrics["openness"] < 1 and objective != metrics["loss"]
  for name in ("gate", "question"):            # only the gate reads the question vector
    leaves = jax.tree.leaves(d_span["focused"][name])
    assert not any(np.asarray(g).any() for g in leaves), name
    assert any(np.asarray(g).any() for g in jax.tree.leaves(d_objective["focused"][name]))
  for part in (("focused", "upper"), ("start",), ("end",), ("bi_attention",)):
    a, b = d_span, d_objective
    for key in part:
      a, b = a[key], b[key]
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-8), a, b)
  assert np.asarray(d_span["focused"]["lower"]["hidden"]).any()


def test_the_gateless_control_opens_every_word_and_has_no_reinforce():
  """focused.kind 'lstm2': the same two LSTMs, every real word opening the
  upper one; no gate parameters, the objective the span loss alone."""
  rng = np.random.default_rng(5)
  model = focused_reader("baseline", kind="lstm2")
  task = without_data(SquadTask, model=model, config=SquadConfig(model=model.options))
  inputs = reader_inputs(rng, 3, 9, 5, [9, 4, 6], [5, 2, 3], graphs=False)
  batch = dict(inputs, start=np.array([1, 0, 2]), end=np.array([2, 1, 4]),
               weight=np.ones(3, np.float32), step=np.full(3, 5, np.int32))
  variables = dict(jax.jit(model.init)(jax.random.key(0), **inputs), batch_stats={})
  assert set(variables["params"]["focused"]) == {"lower", "upper"}
  rngs = {"dropout": jax.random.key(3), "gate": jax.random.key(4)}
  reading = jax.jit(lambda p: task._read(p, batch, True, rngs))(variables["params"])
  np.testing.assert_array_equal(reading.gates, inputs["context_mask"])
  assert reading.gate_logits is None
  loss, metrics, _ = jax.jit(lambda v: task.loss(v, batch, rngs))(variables)
  assert loss == metrics["loss"] and metrics["openness"] == 1.0 and "reward" not in metrics


def test_tiny_focused_run_with_rnn_graphs_reports_openness(tiny_export, tmp_path):
  train = write_squad(tmp_path / "train.json")
  model = dataclasses.replace(TINY_READER, passage_encoder="focused",
                              focused=FocusedPassageOptions(gate_hidden=4, gate=GateObjective(
                                  beta_warmup=2)))
  config = SquadConfig(files=SquadFiles(train=train), val_questions=5,
                       max_context_words=21, length_multiple=8, model=model, variant="rnn",
                       predictor_export=tiny_export, graphs_on_the_fly=True,
                       optim=TINY_OPTIM, loop=dataclasses.replace(TINY_LOOP, eval_every=4))
  workdir = tmp_path / "run"
  results = run_squad(config, str(workdir), devices=ONE)
  with open(workdir / "results.json", encoding="utf-8") as f:
    assert json.load(f)["validation"] == results["validation"]
  assert results["steps"] == 4
  assert 0.0 <= results["validation"]["openness"] <= 1.0
  assert 0.0 <= results["validation"]["f1"] <= 100.0
  (curve,) = results["curves"]
  assert 0.0 <= curve["train_openness"] <= 1.0 and 0.0 <= curve["validation_openness"] <= 1.0


def test_the_option_in_the_presets_and_its_mistakes():
  for preset in ("", "cpu", "tiny"):      # the presets read with the BiGRU
    config = squad_configs.get_config(preset)
    assert config.model.passage_encoder == "bigru"
    config.model.passage_encoder = "focused"          # --config.model.passage_encoder=focused
    config.model.focused.gate.gamma = 0.3
    model = SquadConfig.from_dict(config.to_dict()).model
    assert model.is_focused and model.focused.gate.gamma == 0.3
  for options, message in (
      (ReaderOptions(passage_encoder="lstm"), "unknown model.passage_encoder 'lstm'"),
      (ReaderOptions(focused=FocusedPassageOptions(kind="lstm1")),
       "unknown model.focused.kind 'lstm1'"),
      (ReaderOptions(focused=FocusedPassageOptions(test_gate="max")),
       "unknown model.focused.test_gate 'max'"),
      (ReaderOptions(focused=FocusedPassageOptions(gate=GateObjective(gamma=2.0))),
       "model.focused.gate: .* gamma in"),
      (ReaderOptions(focused=FocusedPassageOptions(gate=GateObjective(samples=2))),
       "model.focused.gate.samples: the SQuAD reader draws one")):
    with pytest.raises(ValueError, match=message):
      SquadConfig(model=options, files=SquadFiles(train="train.json")).check()


def test_the_compile_target_carries_the_step_the_warm_up_reads():
  """`experiments.tpu_compile`'s SQuAD target of the focused reader with
  'rnn' graphs: its train batch has each row's step, and the loop's train
  step traces on it. (Its compile for a v5e-8, `Checker('squad', ...)
  .compile_all(config, ('train',))` as test_tpu_compile does for the BiGRU,
  costs minutes on a shared CPU: traced here only.)"""
  config = SquadConfig.from_dict(squad_configs.get_config("tiny").to_dict())
  config = config.replace(variant="rnn", model=dataclasses.replace(
      config.model, passage_encoder="focused"))
  target = compile_targets.target("squad", config, compile_targets.Sizes(graphs=(4, 2)))
  assert target.name == "squad (rnn, focused)" and "step" not in target.eval
  assert target.train["step"].shape == (config.optim.batch_size,)
  mesh = make_mesh(1, 1, jax.devices()[:1])
  with jax.set_mesh(mesh):
    sums = RunPrograms(target.task, mesh).zero_sums(batch_spec(target.train, mesh),
                                                    abstract=True)
  assert {"loss", "objective", "openness", "reward", "sparsity"} <= set(sums)
