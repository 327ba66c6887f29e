"""What a resumed run reads must stay readable: the optimiser state's tree
layout is part of every checkpoint (pretraining keeps the bare optimiser
when nothing comes before it, a chain after clipping; downstream runs always
chain), and the fields a resumed run may change."""
import jax
import jax.numpy as jnp
import optax

from glomo_jax.downstream.options import OptimOptions
from glomo_jax.pretraining import PretrainConfig

PARAMS = {"w": jnp.zeros((2, 3)), "b": jnp.zeros(3)}


def structure(tx):
  return jax.tree_util.tree_structure(tx.init(PARAMS))


def test_checkpointed_optimizer_layouts_stay_as_they_were():
  sgd = optax.sgd(8.0, momentum=0.2)
  clip = optax.clip_by_global_norm(0.25)
  assert structure(PretrainConfig().build_optimizer()) == structure(optax.chain(clip, sgd))
  assert structure(PretrainConfig(clip_norm=0.0).build_optimizer()) == structure(sgd)
  adam = optax.adam(1e-3)
  assert structure(PretrainConfig(optimizer="adam", learning_rate=1e-3,
                                  clip_norm=0.0).build_optimizer()) == structure(adam)
  downstream = OptimOptions(clip_norm=None).optimizer_for(10)
  assert structure(downstream) == structure(optax.chain(optax.adam(1e-3)))


def test_a_resumed_run_may_change_how_the_transfer_applies_its_graphs():
  """`apply_as` computes the same numbers in another order: every task's
  path to it is among the fields a resumed run may change."""
  import dataclasses  # noqa: PLC0415
  from glomo_jax.images.cifar import CifarConfig  # noqa: PLC0415
  from glomo_jax.tasks import TransferConfig  # noqa: PLC0415
  from glomo_jax.train.run_config import changed_fields  # noqa: PLC0415
  cifar = CifarConfig()
  other = dataclasses.replace(cifar, transfer=dataclasses.replace(cifar.transfer,
                                                                  apply_as="candidates"))
  changed = changed_fields(cifar.to_dict(), other.to_dict())
  assert changed == ["transfer.apply_as"] and set(changed) <= set(other.resumable())
  text = TransferConfig()
  other = dataclasses.replace(text, model=dataclasses.replace(
      text.model, transfer=dataclasses.replace(text.model.transfer, apply_as="candidates")))
  changed = changed_fields(text.to_dict(), other.to_dict())
  assert changed == ["model.transfer.apply_as"] and set(changed) <= set(other.resumable())
