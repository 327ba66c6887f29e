"""CIFAR ResNets: published parameter counts, shapes, BatchNorm in batch_stats."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glomo_jax.images.resnet import resnet


def count(tree):
  return sum(int(np.prod(leaf.shape)) for leaf in jax.tree_util.tree_leaves(tree))


@pytest.mark.parametrize("depth, params", [(18, 11_173_962), (34, 21_282_122)])
def test_parameter_counts_match_the_published_cifar_resnets(depth, params):
  model = resnet(depth)
  shapes = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0),
                                             jnp.zeros((1, 32, 32, 3)), train=False))
  assert count(shapes["params"]) == params
  assert set(shapes) == {"params", "batch_stats"}


def test_a_narrow_resnet_trains_on_a_wider_input():
  model = resnet(18, num_classes=10, width=8)
  x = np.random.default_rng(0).standard_normal((4, 16, 16, 7)).astype(np.float32)
  variables = model.init(jax.random.PRNGKey(0), x, train=False)
  logits, updates = model.apply(variables, x, train=True, mutable=["batch_stats"])
  assert logits.shape == (4, 10) and logits.dtype == jnp.float32
  before = jax.tree_util.tree_leaves(variables["batch_stats"])
  after = jax.tree_util.tree_leaves(updates["batch_stats"])
  assert any(np.abs(np.asarray(a) - np.asarray(b)).max() > 0 for a, b in zip(after, before))
  with pytest.raises(ValueError, match="depth 50"):
    resnet(50)
