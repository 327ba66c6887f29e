"""A train step on 8 fake CPU devices (data 4 × fsdp 2) equals one device."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glomo_jax import GLoMo, ModelConfig
from glomo_jax.train import (TrainConfig, TrainState, batch_sharding, make_mesh,
                             make_optimizer, state_shardings, train_step)
from glomo_jax.train.sharding import fsdp_spec, replicated
from glomo_jax.train import trainer
from glomo_jax.train.trainer import create_state, init_state


def run_steps(mesh, model, tx, config, batches):
  init = functools.partial(create_state, model, tx, config)
  abstract = jax.eval_shape(init, jax.random.PRNGKey(0))
  state_sh = state_shardings(mesh, abstract)
  state = jax.jit(init, out_shardings=state_sh)(jax.random.PRNGKey(0))
  bsh = batch_sharding(mesh)
  step = jax.jit(functools.partial(train_step, model, tx),
                 in_shardings=(state_sh, {"tokens": bsh, "mask": bsh}),
                 out_shardings=(state_sh, replicated(mesh)), donate_argnums=(0,))
  losses = []
  for b in batches:
    state, metrics = step(state, {k: jax.device_put(v, bsh) for k, v in b.items()})
    losses.append(float(metrics["loss"]))
  return state, losses


def test_eight_fake_devices_match_one_device():
  assert jax.device_count() >= 8, "run with XLA_FLAGS=--xla_force_host_platform_device_count=8"
  model_config = ModelConfig.tiny(dim=32, head_dim=8, vocab_size=256, sample_positions=4)
  config = TrainConfig(model=model_config, batch_size=8, bptt=12, shift=6)
  model = GLoMo(model_config)
  tx = make_optimizer("sgd", 1.0, 0.2, 0.25)
  rng = np.random.default_rng(0)
  batches = [{"tokens": rng.integers(3, 256, (8, 12)).astype(np.int32),
              "mask": np.ones((8, 12), np.int32)} for _ in range(3)]
  batches[1]["mask"][5, 9:] = 0
  one = make_mesh(devices=jax.devices()[:1])
  eight = make_mesh(data=4, fsdp=2, devices=jax.devices()[:8])
  s1, l1 = run_steps(one, model, tx, config, batches)
  s8, l8 = run_steps(eight, model, tx, config, batches)
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


def test_state_init_compiled_for_memory_gives_the_default_compile_bit_for_bit(monkeypatch):
  """init_state compiles the initialisation with XLA's older CPU emitters at
  -O1 (less compile memory); the parameters and optimiser state must be the
  ones XLA's default compile gives, with their shardings (eight devices)."""
  assert jax.default_backend() == "cpu"
  model_config = ModelConfig.tiny(dim=32, head_dim=8, vocab_size=256, sample_positions=4)
  config = TrainConfig(model=model_config, batch_size=8, bptt=12, shift=6)
  init = functools.partial(create_state, GLoMo(model_config), make_optimizer("sgd", 1.0, 0.2, 0.25),
                           config)
  rng = jax.random.PRNGKey(3)
  mesh = make_mesh(data=4, fsdp=2, devices=jax.devices()[:8])
  state_sh = state_shardings(mesh, jax.eval_shape(init, rng))
  got = init_state(init, rng, state_sh)
  want = jax.jit(init, out_shardings=state_sh)(rng)
  leaves = jax.tree_util.tree_leaves_with_path(want)
  assert len(leaves) > 20
  for (path, a), b in zip(leaves, jax.tree_util.tree_leaves(got)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=jax.tree_util.keystr(path))
    assert b.sharding == a.sharding, jax.tree_util.keystr(path)
  # The options really reach XLA: an unknown one is refused.
  monkeypatch.setattr(trainer, "INIT_CPU_COMPILER_OPTIONS", {"xla_no_such_option": True})
  with pytest.raises(Exception, match="xla_no_such_option"):
    init_state(init, rng)
