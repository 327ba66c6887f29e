"""Shared fixtures. Tests run on CPU; XLA_FLAGS (set by the Makefile) gives 8
fake devices for sharding tests."""
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402
import pytest  # noqa: E402

from glomo_jax import GLoMo, ModelConfig  # noqa: E402


@pytest.fixture
def tiny_config():
  return ModelConfig.tiny()


def init_model(config, batch=2, length=10, seed=0):
  """Returns (model, variables, tokens [batch, length])."""
  model = GLoMo(config)
  tokens = jax.random.randint(jax.random.PRNGKey(seed + 100), (batch, length), 1,
                              config.vocab_size)
  variables = model.init(jax.random.PRNGKey(seed), tokens)
  return model, variables, tokens
