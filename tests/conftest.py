"""Shared fixtures. Tests run on CPU; XLA_FLAGS (set by the Makefile) gives 8
fake devices for sharding tests."""
import json
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
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


def random_variables(config, seed=0, graphs_only=False):
  """Variables of `GLoMo(config)` without compiling its init: the init's tree
  (traced abstractly; with graphs_only, the subset `GLoMo.graphs` uses) filled
  from numpy, BatchNorm variances positive, thresholds lowered by 2 so that
  every layer's graph carries weight."""
  method = GLoMo.graphs if graphs_only else None
  shapes = jax.eval_shape(lambda: GLoMo(config).init(
      jax.random.PRNGKey(0), jnp.ones((1, 6), jnp.int32), method=method))
  rng = np.random.default_rng(seed)

  def fill(path, spec):
    name = jax.tree_util.keystr(path)
    if "'var'" in name:
      return jnp.asarray(rng.uniform(0.5, 1.5, spec.shape), spec.dtype)
    value = 0.3 * rng.standard_normal(spec.shape) - (2.0 if "threshold_bias" in name else 0.0)
    return jnp.asarray(value, spec.dtype)
  return jax.tree_util.tree_map_with_path(fill, dict(shapes))


def write_jsonl(path, records):
  """Writes records as JSON lines; returns the path as a string."""
  with open(path, "w", encoding="utf-8") as f:
    for r in records:
      f.write(json.dumps(r) + "\n")
  return str(path)
