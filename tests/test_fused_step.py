"""The pretraining step with the fused Pallas kernels (interpret mode on the
CPU) equals the step with the reference ops on tiny configs, on one device
and on 8 (data 4 × fsdp 2, the kernels per shard); the kernels refuse the
options they do not compute."""
import functools

import jax
import numpy as np
import pytest

from glomo_jax import ModelConfig
from glomo_jax.models.pixel_glomo import PixelGLoMo
from glomo_jax.pretraining import GLoMoObjective
from glomo_jax.train import (batch_sharding, create_state, make_mesh, make_optimizer,
                             state_shardings, train_step)

T = 12


def batches(rows=2):
  rng = np.random.default_rng(0)
  batch = {"tokens": rng.integers(3, 50, (rows, T)).astype(np.int32),
           "mask": np.ones((rows, T), np.int32)}
  batch["mask"][1, 8:] = 0            # padding: neither sends nor receives weight
  return [batch]


def steps(config, batches, mesh=None):
  """SGD steps from the same initialisation: (params, [metrics]); with a
  mesh, under it (the loop's shardings)."""
  tx = make_optimizer("sgd", 1.0, momentum=0.2, clip_norm=0.25)
  objective = GLoMoObjective(config, T, tx)
  create = functools.partial(create_state, objective, tx)
  step = functools.partial(train_step, objective, tx)
  if mesh is not None:
    state_sh = state_shardings(mesh, jax.eval_shape(create, jax.random.PRNGKey(0)))
    create = jax.jit(create, out_shardings=state_sh)
    step = jax.jit(step, in_shardings=(state_sh, batch_sharding(mesh)),
                   out_shardings=(state_sh, None))
  state = jax.jit(create)(jax.random.PRNGKey(0))
  step = jax.jit(step)
  metrics = []
  for b in batches:
    state, m = step(state, b)
    metrics.append(jax.device_get(m))
  return jax.device_get(state.params), metrics


@functools.lru_cache(maxsize=2)
def reference_steps(config, rows):
  return steps(config, batches(rows))


def assert_same_step(fused_config, reference_config, rows=2, mesh=None):
  got, got_metrics = steps(fused_config, batches(rows), mesh)
  want, want_metrics = reference_steps(reference_config, rows)
  for a, b in zip(got_metrics, want_metrics):
    for key in ("loss", "loss_fw", "loss_bw", "grad_norm"):
      np.testing.assert_allclose(a[key], b[key], rtol=2e-5, err_msg=key)
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(got),
                          jax.tree_util.tree_leaves(want)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6,
                               err_msg=jax.tree_util.keystr(path))


# sampled start positions (the top layer's rows, repeats possible), GRU, the
# query threshold: the paper's kind of model, tiny; an embedding of 4,096
# values, so the fsdp rule splits it
PAPER_LIKE = ModelConfig.tiny(sample_positions=4, vocab_size=256)


def test_fused_kernels_train_as_the_reference_ops():
  assert_same_step(PAPER_LIKE.replace(kernels="fused"), PAPER_LIKE, rows=8)


def test_fused_kernels_per_shard_on_8_devices_train_as_the_reference_ops():
  # data 4 × fsdp 2: each kernel in shard_map on its device's row (the
  # table gathered, its gradient summed), against the one-device reference
  mesh = make_mesh(4, 2, jax.devices()[:8])
  with jax.set_mesh(mesh):
    assert_same_step(PAPER_LIKE.replace(kernels="fused"), PAPER_LIKE, rows=8, mesh=mesh)


def test_the_fused_loss_keeps_no_per_head_queries_or_keys_for_its_backward_pass():
  # the graph kernel's q and k (one head's: [rows, 1, T, H], padded) are
  # projected again in the backward pass (`graph_mix.RECOMPUTE_INPUTS`), not
  # kept, for no head; the reference keeps its q and k ([rows, 1, K, T, H]),
  # so the probe can see them
  rows, width = 8, PAPER_LIKE.head_dim
  rngs = {"dropout": jax.random.PRNGKey(1), "sample": jax.random.PRNGKey(2)}

  def kept(config):     # the residuals' shapes, traced (nothing runs)
    objective = GLoMoObjective(config, T, make_optimizer("sgd", 1.0))
    batch = {"tokens": np.full((rows, T), 5, np.int32), "mask": np.ones((rows, T), np.int32)}

    def residuals(batch):
      variables = objective.init_variables(jax.random.PRNGKey(0))
      loss = lambda params: objective.loss({**variables, "params": params}, batch, rngs)[0]
      return jax.tree_util.tree_leaves(jax.vjp(loss, variables["params"])[1])
    return [r.shape for r in jax.eval_shape(residuals, batch)
            if len(r.shape) >= 3 and r.shape[-1] == width and r.size >= rows * T * width]

  assert len(kept(PAPER_LIKE)) >= 4 * PAPER_LIKE.num_graph_layers   # q, k a layer and direction
  assert kept(PAPER_LIKE.replace(kernels="fused")) == []


def test_fused_graph_with_residual_composition_and_a_scalar_threshold():
  # the learned scalar θ: a constant threshold with a gradient ('zero' takes
  # the same branch without one; the kernel at θ = 0: test_pallas_graph_mix)
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
