"""The pretraining step with the fused Pallas kernels (interpret mode on the
CPU) equals the step with the reference ops on tiny configs; the kernels
refuse the options they do not compute."""
import functools

import jax
import numpy as np
import pytest

from glomo_jax import ModelConfig
from glomo_jax.models.pixel_glomo import PixelGLoMo
from glomo_jax.pretraining import GLoMoObjective
from glomo_jax.train import create_state, make_optimizer, train_step

T = 12


def batches():
  rng = np.random.default_rng(0)
  batch = {"tokens": rng.integers(3, 50, (2, T)).astype(np.int32),
           "mask": np.ones((2, T), np.int32)}
  batch["mask"][1, 8:] = 0            # padding: neither sends nor receives weight
  return [batch]


def steps(config, batches):
  """SGD steps from the same initialisation: (params, [metrics])."""
  tx = make_optimizer("sgd", 1.0, momentum=0.2, clip_norm=0.25)
  objective = GLoMoObjective(config, T, tx)
  state = jax.jit(functools.partial(create_state, objective, tx))(jax.random.PRNGKey(0))
  step = jax.jit(functools.partial(train_step, objective, tx))
  metrics = []
  for b in batches:
    state, m = step(state, b)
    metrics.append(jax.device_get(m))
  return state.params, metrics


def assert_same_step(fused_config, reference_config):
  data = batches()
  got, got_metrics = steps(fused_config, data)
  want, want_metrics = steps(reference_config, data)
  for a, b in zip(got_metrics, want_metrics):
    for key in ("loss", "loss_fw", "loss_bw", "grad_norm"):
      np.testing.assert_allclose(a[key], b[key], rtol=2e-5, err_msg=key)
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(got),
                          jax.tree_util.tree_leaves(want)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6,
                               err_msg=jax.tree_util.keystr(path))


def test_fused_kernels_train_as_the_reference_ops():
  # sampled start positions (the top layer's rows, repeats possible), GRU,
  # the query threshold: the paper's kind of model, tiny
  config = ModelConfig.tiny(sample_positions=4)
  assert_same_step(config.replace(kernels="fused"), config)


def test_fused_graph_with_residual_composition_and_scalar_threshold():
  config = ModelConfig.tiny(composition="residual", threshold="scalar")
  assert_same_step(config.replace(kernels="fused_graph"), config)


@pytest.mark.parametrize("changes,message", [
    ({"sparsity": "softmax"}, "sparsity='softmax'"),
    ({"decoupled": False}, "coupled predictor"),
    ({"objective": "sentence"}, "objective='sentence'"),
])
def test_the_fused_graph_kernel_refuses_what_it_does_not_compute(changes, message):
  for kernels in ("fused", "fused_graph"):
    with pytest.raises(ValueError, match=message):
      ModelConfig.tiny(kernels=kernels, **changes)
  ModelConfig.tiny(kernels="fused_loss", **changes)      # the loss kernel computes them
  with pytest.raises(ValueError, match="kernels"):
    ModelConfig.tiny(kernels="triton")


def test_pixel_models_run_the_reference_ops():
  model = PixelGLoMo(ModelConfig.tiny(kernels="fused_loss"), (4, 4))
  with pytest.raises(ValueError, match="reference ops"):
    model.init(jax.random.PRNGKey(0), np.zeros((1, 4, 4, 3), np.uint8))
