"""The fused kernels' GPU form lowers for CUDA, sharded over 8 devices, on
this CPU host: `jax.export` of the paper model's train step jitted with the
loop's shardings (data 4 × fsdp 2 of the 8 fake CPU devices) for platform
'cuda' runs Pallas' Triton lowering of the kernels (no GPU compiler runs
here: shared-memory limits show only on a GPU) and records the shardings.
The TPU programs are compiled by the TPU compiler itself
(tests/test_tpu_compile.py); what stays here for a TPU is the choice of the
kernels' form. The configs are those of experiments/configs at their launch
sizes (the paper model, V 100,000, batch 32 × 200), built as the compile
check builds them (`experiments.compile_targets`).

A failure names the program and the platform.
"""
import functools
import re

import jax
import pytest
from jax.export import DisabledSafetyCheck

from experiments import compile_targets
from experiments.configs import paper as paper_configs
from glomo_jax.ops.pallas import KernelMode, batch_axes, kernel_mode, lowering_for
from glomo_jax.pretraining import PretrainConfig
from glomo_jax.train import batch_sharding, create_state, make_mesh, state_shardings, train_step
from glomo_jax.train.sharding import replicated

TRITON = "__gpu$xla.gpu.triton"
GRAPH_KERNELS = ("graph_mix", "graph_mix_dq", "graph_mix_dkv")
LOSS_KERNELS = ("tied_softmax_rows", "tied_softmax_vocab")


@pytest.fixture(scope="module")
def mesh():
  return make_mesh(4, 2, jax.devices()[:8])


def abstract(tree, shardings):
  return jax.tree_util.tree_map(
      lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)


def exported(name, fn, mesh, in_shardings, out_shardings, *args) -> str:
  """The module text of `jax.jit(fn, in_shardings, out_shardings)` exported
  for CUDA under `mesh` (the kernels take its form)."""
  checks = [DisabledSafetyCheck.custom_call(TRITON)]
  with jax.set_mesh(mesh), lowering_for("cuda"):
    jitted = jax.jit(fn, in_shardings=in_shardings, out_shardings=out_shardings)
    try:
      out = jax.export.export(jitted, platforms=("cuda",), disabled_checks=checks)(*args)
    except Exception as e:  # noqa: BLE001 - any lowering error, named
      raise AssertionError(f"{name} does not lower for cuda: "
                           f"{type(e).__name__}: {str(e)[:2000]}") from e
  text = out.mlir_module()
  assert out.nr_devices == 8 and "mhlo.num_partitions = 8" in text, name
  assert '"data"=4, "fsdp"=2' in text and "sdy.sharding" in text, name
  return text


def kernel_calls(text: str) -> dict[str, int]:
  """{kernel name: custom calls} of the Triton kernels in a module text."""
  names = re.findall(r'\bname = "([^"]+)", num_stages', text)
  return {n: names.count(n) for n in set(names)}


def paper_target(kernels: str):
  config = PretrainConfig.from_dict(paper_configs.get_config().to_dict())
  return compile_targets.target("pretrain", config.replace(
      model=config.model.replace(kernels=kernels)))


def train_step_text(target, mesh) -> str:
  task = target.task
  state = jax.eval_shape(functools.partial(create_state, task, task.tx), jax.random.PRNGKey(0))
  state_sh = state_shardings(mesh, state)
  batch_sh = {k: batch_sharding(mesh, len(v.shape)) for k, v in target.train.items()}
  return exported(f"{target.name} train step", functools.partial(train_step, task, task.tx),
                  mesh, (state_sh, batch_sh), (state_sh, replicated(mesh)),
                  abstract(state, state_sh), abstract(target.train, batch_sh))


# ---- the tests ----------------------------------------------------------------------------
def test_the_kernel_form_follows_the_target_not_the_host(mesh):
  assert kernel_mode() == KernelMode("gpu", True)            # this CPU host: interpreted
  tpu = jax.sharding.AbstractMesh((4, 2), ("data", "fsdp"), abstract_device=(
      jax.sharding.AbstractDevice(device_kind="TPU v5 lite", num_cores=None, platform="tpu")))
  with jax.sharding.use_abstract_mesh(tpu):                  # a TPU mesh's devices
    assert kernel_mode() == KernelMode("tpu", False)
    assert batch_axes(16) == ("data", "fsdp") and batch_axes(12) is None
  with jax.set_mesh(mesh):                                   # a CPU mesh
    assert kernel_mode() == KernelMode("gpu", True)
    with lowering_for("cuda"):                               # cross-lowering wins
      assert kernel_mode() == KernelMode("gpu", False)
    with lowering_for("tpu"):
      assert kernel_mode() == KernelMode("tpu", False)


def test_paper_pretraining_step_fused_holds_both_kernels_for_cuda(mesh):
  text = train_step_text(paper_target("fused"), mesh)
  counts = kernel_calls(text)
  for name in GRAPH_KERNELS + LOSS_KERNELS:
    assert counts.get(name), f"no {name} call in the cuda module: {counts}"
  assert "sdy.manual_computation" in text          # shard_map: the kernels per shard


def test_paper_pretraining_step_reference_for_cuda(mesh):
  assert TRITON not in train_step_text(paper_target("reference"), mesh)


def test_export_predict_for_cuda(mesh):
  target = paper_target("reference")
  variables, tokens, mask = target.predict_args
  sh = jax.tree_util.tree_map(lambda _: replicated(mesh), variables)
  batch = jax.ShapeDtypeStruct(tokens.shape, tokens.dtype, sharding=batch_sharding(mesh))
  exported("the export's predict", target.predict, mesh,
           (sh, batch_sharding(mesh), batch_sharding(mesh)), batch_sharding(mesh, 5),
           abstract(variables, sh), batch, batch)
