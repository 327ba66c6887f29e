"""A train step on 8 fake CPU devices (data 4 × fsdp 2) equals one device."""
import dataclasses
import functools
import sys

import jax
import numpy as np
import pytest

from glomo_jax import ModelConfig, tuning
from glomo_jax.pretraining import GLoMoObjective, PretrainConfig, train_and_evaluate
from glomo_jax.train import (batch_sharding, create_state, init_state, make_mesh,
                             make_optimizer, state_creator, state_shardings, train_step)
from glomo_jax.train.sharding import fsdp_spec, replicated
from conftest import REPO

sys.path.insert(0, REPO)
from experiments.configs import demo  # noqa: E402


def run_steps(mesh, objective, tx, batches):
  """The loop's programs by hand, compiled cheaply (the same options for
  both meshes)."""
  init = functools.partial(create_state, objective, tx)
  abstract = jax.eval_shape(init, jax.random.PRNGKey(0))
  state_sh = state_shardings(mesh, abstract)
  state = jax.jit(init, out_shardings=state_sh)(jax.random.PRNGKey(0))
  bsh = batch_sharding(mesh)
  placed = [{k: jax.device_put(v, bsh) for k, v in b.items()} for b in batches]
  step = jax.jit(functools.partial(train_step, objective, tx),
                 in_shardings=(state_sh, {"tokens": bsh, "mask": bsh}),
                 out_shardings=(state_sh, replicated(mesh)), donate_argnums=(0,)
                 ).lower(state, placed[0]).compile(tuning.FAST_COMPILE_OPTIONS)
  losses = []
  for b in placed:
    state, metrics = step(state, b)
    losses.append(float(metrics["loss"]))
  return state, losses


def test_eight_fake_devices_match_one_device():
  assert jax.device_count() >= 8, "run with XLA_FLAGS=--xla_force_host_platform_device_count=8"
  model_config = ModelConfig.tiny(dim=32, head_dim=8, vocab_size=256, sample_positions=4)
  tx = make_optimizer("sgd", 1.0, momentum=0.2, clip_norm=0.25)
  objective = GLoMoObjective(model_config, 12, tx)
  rng = np.random.default_rng(0)
  batches = [{"tokens": rng.integers(3, 256, (8, 12)).astype(np.int32),
              "mask": np.ones((8, 12), np.int32)} for _ in range(3)]
  batches[1]["mask"][5, 9:] = 0
  one = make_mesh(devices=jax.devices()[:1])
  eight = make_mesh(data=4, fsdp=2, devices=jax.devices()[:8])
  s1, l1 = run_steps(one, objective, tx, batches)
  s8, l8 = run_steps(eight, objective, tx, batches)
  np.testing.assert_allclose(l1, l8, rtol=1e-5)
  flat1 = jax.tree_util.tree_leaves_with_path(s1.params)
  flat8 = dict(jax.tree_util.tree_leaves_with_path(s8.params))
  for path, a in flat1:
    np.testing.assert_allclose(np.asarray(a), np.asarray(flat8[path]), rtol=1e-4, atol=1e-6,
                               err_msg=jax.tree_util.keystr(path))
  # fsdp really shards: the embedding [256, 32] is split over the fsdp axis
  emb = s8.params["embedding"]
  assert emb.sharding.spec == jax.sharding.PartitionSpec("fsdp", None) or \
      emb.sharding.spec == jax.sharding.PartitionSpec(None, "fsdp")
  assert len({d for d in emb.sharding.device_set}) == 8


def test_fsdp_rule_and_mesh_errors():
  assert fsdp_spec((4096, 512), 2) == jax.sharding.PartitionSpec("fsdp", None)
  assert fsdp_spec((3, 3), 2) == jax.sharding.PartitionSpec()
  assert fsdp_spec((5, 4099), 2) == jax.sharding.PartitionSpec()
  with pytest.raises(ValueError, match="divide"):
    make_mesh(fsdp=3, devices=jax.devices()[:8])
  with pytest.raises(ValueError, match="must equal"):
    make_mesh(data=3, fsdp=2, devices=jax.devices()[:8])


def test_state_init_compiled_for_memory_gives_the_default_compile_bit_for_bit(monkeypatch,
                                                                              tmp_path):
  """With the CPU tuning on, the loop compiles the initialisation with XLA's
  older CPU emitters at -O1 (less compile memory); the parameters and
  optimiser state must be the ones XLA's default compile gives, with their
  shardings (eight devices). Off (the default), no option is passed."""
  assert jax.default_backend() == "cpu"
  monkeypatch.delenv(tuning.ENV_VAR, raising=False)
  assert tuning.compiler_options("cpu", one_off=True) is None
  monkeypatch.setenv(tuning.ENV_VAR, "1")
  options = tuning.compiler_options("cpu", one_off=True)
  assert options == tuning.ONE_OFF_CPU_OPTIONS
  assert tuning.compiler_options("gpu", one_off=True) is None
  model_config = ModelConfig.tiny(dim=32, head_dim=8, vocab_size=256, sample_positions=4)
  tx = make_optimizer("sgd", 1.0, momentum=0.2, clip_norm=0.25)
  objective = GLoMoObjective(model_config, 12, tx)
  rng = jax.random.PRNGKey(3)
  mesh = make_mesh(data=4, fsdp=2, devices=jax.devices()[:8])
  init = functools.partial(create_state, objective, tx)
  state_sh = state_shardings(mesh, jax.eval_shape(init, rng))
  got = init_state(state_creator(objective, tx), rng, state_sh, options)
  # XLA's defaults (the suite compiles cheaply: conftest)
  want = jax.jit(init, out_shardings=state_sh).lower(rng).compile(compiler_options={
      "xla_backend_optimization_level": 3, "xla_cpu_use_fusion_emitters": True})(rng)
  leaves = jax.tree_util.tree_leaves_with_path(want)
  assert len(leaves) > 20
  for (path, a), b in zip(leaves, jax.tree_util.tree_leaves(got)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=jax.tree_util.keystr(path))
    assert b.sharding == a.sharding, jax.tree_util.keystr(path)
  # The options really reach XLA through the loop's own path: an unknown one
  # is refused when a pretraining run builds its state.
  monkeypatch.setattr(tuning, "ONE_OFF_CPU_OPTIONS", {"xla_no_such_option": True})
  config = PretrainConfig.from_dict(demo.get_config("tiny").to_dict())
  config = config.replace(loop=dataclasses.replace(config.loop, compile_fast=False,
                                                   num_steps=1))
  with pytest.raises(Exception, match="xla_no_such_option"):
    train_and_evaluate(config, str(tmp_path), devices=jax.devices()[:1])
