"""Every program a TPU user runs lowers for a TPU, sharded over 8 devices,
on this CPU host: `jax.export` of the program jitted with the loop's
shardings (data 4 × fsdp 2 of the 8 fake CPU devices) for platform 'tpu'
runs the whole lowering (Pallas' Mosaic lowering of the fused kernels' TPU
forms with their block shapes included) and records the shardings; 'cuda'
does the same with the Triton lowering of the GPU forms (for the programs
with Pallas kernels: the paper's steps and the export's predict). Nothing is
compiled or allocated: the states and batches are abstract
(`jax.eval_shape`), the configs those of experiments/configs at their
launch sizes (the paper model, V 100,000, batch 32 × 200).

A failure names the program and the platform. docs/tpu.md has the command.
"""
import functools
import re
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.export import DisabledSafetyCheck

from experiments.configs import cifar as cifar_configs
from experiments.configs import imdb as imdb_configs
from experiments.configs import images_pretrain as image_configs
from experiments.configs import paper as paper_configs
from experiments.configs import squad as squad_configs
from glomo_jax.export.predictor import ExportedGraphPredictor
from glomo_jax.images.cifar import CifarConfig, CifarTask
from glomo_jax.images.data import ImageSet
from glomo_jax.pretraining.pixels import ImagePretrainConfig, PixelPretrainingTask
from glomo_jax.models.pixel_glomo import PixelGLoMo
from glomo_jax.ops.pallas import KernelMode, batch_axes, kernel_mode, lowering_for
from glomo_jax.pretraining import GLoMoObjective, PretrainConfig
from glomo_jax.squad import SquadConfig
from glomo_jax.squad.run import build_reader
from glomo_jax.squad.task import SquadTask
from glomo_jax.classification import ClassificationConfig
from glomo_jax.classification.task import ClassificationTask
from glomo_jax.classification.run import build_model
from glomo_jax.train import batch_sharding, create_state, make_mesh, state_shardings, train_step
from glomo_jax.train.sharding import replicated

STEPS = 10_000            # a downstream run's length (its learning-rate schedule)
MOSAIC = "tpu_custom_call"
TRITON = "__gpu$xla.gpu.triton"
# kernel names (pallas_call names) of the fused pretraining step's kernels
GRAPH_KERNELS = {"tpu": ("graph_mix_tpu", "graph_mix_dq_tpu", "graph_mix_dkv_tpu"),
                 "cuda": ("graph_mix", "graph_mix_dq", "graph_mix_dkv")}
LOSS_KERNELS = {"tpu": ("tied_softmax_rows_tpu", "tied_softmax_vocab_tpu"),
                "cuda": ("tied_softmax_rows", "tied_softmax_vocab")}


@pytest.fixture(scope="module")
def mesh():
  return make_mesh(4, 2, jax.devices()[:8])


def abstract(tree, shardings):
  return jax.tree_util.tree_map(
      lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)


def exported(name, platform, fn, mesh, in_shardings, out_shardings, *args) -> str:
  """The module text of `jax.jit(fn, in_shardings, out_shardings)` exported
  for `platform` under `mesh` (the kernels take its form)."""
  checks = [DisabledSafetyCheck.custom_call(TRITON)] if platform == "cuda" else []
  with jax.set_mesh(mesh), lowering_for(platform):
    jitted = jax.jit(fn, in_shardings=in_shardings, out_shardings=out_shardings)
    try:
      out = jax.export.export(jitted, platforms=(platform,), disabled_checks=checks)(*args)
    except Exception as e:  # noqa: BLE001 - any lowering error, named
      raise AssertionError(f"{name} does not lower for {platform}: "
                           f"{type(e).__name__}: {str(e)[:2000]}") from e
  text = out.mlir_module()
  assert out.nr_devices == 8 and "mhlo.num_partitions = 8" in text, (name, platform)
  assert '"data"=4, "fsdp"=2' in text and "sdy.sharding" in text, (name, platform)
  return text


def kernel_calls(text: str) -> dict[str, int]:
  """{kernel name: custom calls} of the Pallas kernels in a module text."""
  names = re.findall(r'kernel_name = "([^"]+)"', text)                  # Mosaic
  names += re.findall(r'\bname = "([^"]+)", num_stages', text)        # Triton
  return {n: names.count(n) for n in set(names)}


class Program(types.SimpleNamespace):
  """A task's train step (and eval step) on abstract state and batch."""

  def lower(self, mesh, platform, which="train"):
    task, tx = self.task, self.tx
    state = jax.eval_shape(functools.partial(create_state, task, tx), jax.random.PRNGKey(0))
    state_sh = state_shardings(mesh, state)
    batch_sh = {k: batch_sharding(mesh, len(v.shape)) for k, v in self.batch.items()}
    batch = abstract(self.batch, batch_sh)
    if which == "train":
      fn = functools.partial(train_step, task, tx)
      return exported(f"{self.name} train step", platform, fn, mesh, (state_sh, batch_sh),
                      (state_sh, replicated(mesh)), abstract(state, state_sh), batch)
    variables_sh = {"params": state_sh.params, "batch_stats": state_sh.batch_stats}
    variables = abstract({"params": state.params, "batch_stats": state.batch_stats},
                         variables_sh)
    return exported(f"{self.name} eval step", platform, task.eval_step, mesh,
                    (variables_sh, batch_sh), replicated(mesh), variables, batch)


def shapes(**entries):
  return {k: jax.ShapeDtypeStruct(shape, dtype) for k, (shape, dtype) in entries.items()}


def without_data(cls, **attributes):
  """A task of `cls` holding only what its model methods read (no data)."""
  task = object.__new__(cls)
  task.__dict__.update(attributes)
  return task


# ---- the programs -------------------------------------------------------------------------
def pretraining(kernels: str) -> Program:
  config = PretrainConfig.from_dict(paper_configs.get_config().to_dict())
  model = config.model.replace(vocab_size=config.vocab_size, kernels=kernels)
  task = GLoMoObjective(model, config.bptt, config.build_optimizer())
  b, t = config.batch_size, config.bptt
  return Program(name=f"paper pretraining ({kernels})", task=task, tx=task.tx,
                 batch=shapes(tokens=((b, t), jnp.int32), mask=((b, t), jnp.int32)))


def pixel_pretraining() -> Program:
  config = ImagePretrainConfig.from_dict(image_configs.get_config().to_dict())
  size = (32, 32)
  task = without_data(PixelPretrainingTask, config=config, image_shape=size,
                      model=PixelGLoMo(config.model, size))
  return Program(name="pixel pretraining", task=task, tx=task.optimizer(),
                 batch=shapes(images=((config.batch_size, *size, 3), jnp.uint8)))


def text_classification() -> Program:
  """IMDB with the 'rnn' variant: word graphs of a paper-size predictor
  (2L 6, K 8) read from the batch."""
  config = ClassificationConfig.from_dict(imdb_configs.get_config().to_dict())
  config = config.replace(variant="rnn", predictor_export="abstract")
  vocab, b, w = 30_000, config.optim.batch_size, config.max_words
  data = types.SimpleNamespace(num_classes=2, text_fields=("text",))
  model = build_model(config, data, vocab, np.zeros((vocab, config.model.embed_dim),
                                                    np.float32), 3)
  task = without_data(ClassificationTask, model=model, fields=("text",), config=config,
                      graphs=types.SimpleNamespace(graph_prefix=(6, 8)))
  return Program(name="IMDB classification (rnn)", task=task, tx=config.optim.optimizer_for(STEPS),
                 batch=shapes(text=((b, w), jnp.int32), text_mask=((b, w), jnp.bool_),
                              text_graphs=((b, 6, 8, w, w), jnp.float32),
                              label=((b,), jnp.int32), weight=((b,), jnp.float32)))


def squad() -> Program:
  """The SQuAD reader (baseline); its batch of 45 rounded up to 48 for 8
  devices; 400 context words, 40 question words."""
  config = SquadConfig.from_dict(squad_configs.get_config().to_dict())
  b, c, q, chars = 48, 400, 40, config.max_word_chars
  model = build_reader(config, 30_000, 300)
  task = without_data(SquadTask, model=model, config=config, graphs=None)
  return Program(name="SQuAD reader", task=task, tx=config.optim.optimizer_for(STEPS),
                 batch=shapes(context=((b, c), jnp.int32), context_mask=((b, c), jnp.bool_),
                              context_chars=((b, c, chars), jnp.int32),
                              question=((b, q), jnp.int32), question_mask=((b, q), jnp.bool_),
                              question_chars=((b, q, chars), jnp.int32),
                              start=((b,), jnp.int32), end=((b,), jnp.int32),
                              weight=((b,), jnp.float32)))


def cifar() -> Program:
  config = CifarConfig.from_dict(cifar_configs.get_config().to_dict())
  b = config.optim.batch_size
  images = ImageSet(np.zeros((b, 32, 32, 3), np.uint8), np.zeros(b, np.int32))
  task = CifarTask(config, {"train": images})
  return Program(name=f"CIFAR-10 ResNet-{config.depth}", task=task, tx=task.optimizer(),
                 batch=shapes(images=((b, 32, 32, 3), jnp.uint8), label=((b,), jnp.int32),
                              weight=((b,), jnp.float32)))


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


@pytest.mark.parametrize("platform", ["tpu", "cuda"])
def test_paper_pretraining_step_fused_holds_both_kernels(mesh, platform):
  text = pretraining("fused").lower(mesh, platform)
  counts = kernel_calls(text)
  for name in GRAPH_KERNELS[platform] + LOSS_KERNELS[platform]:
    assert counts.get(name), f"no {name} call in the {platform} module: {counts}"
  assert "sdy.manual_computation" in text          # shard_map: the kernels per shard


@pytest.mark.parametrize("platform", ["tpu", "cuda"])
def test_paper_pretraining_step_reference(mesh, platform):
  text = pretraining("reference").lower(mesh, platform)
  assert MOSAIC not in text and TRITON not in text


def test_paper_eval_steps(mesh):
  fused = kernel_calls(pretraining("fused").lower(mesh, "tpu", "eval"))
  assert fused.get("graph_mix_tpu") and fused.get("tied_softmax_rows_tpu"), fused
  assert MOSAIC not in pretraining("reference").lower(mesh, "tpu", "eval")


# TPU only: these steps hold no Pallas kernel, so a GPU lowers them as it
# lowers the paper's reference step above (XLA's own ops, the same shardings)
@pytest.mark.parametrize("program", [pixel_pretraining, text_classification, squad, cifar],
                         ids=["pixels", "classification", "squad", "cifar"])
def test_downstream_and_pixel_train_steps_lower_for_tpu(mesh, program):
  program().lower(mesh, "tpu")


@pytest.mark.parametrize("platform", ["tpu", "cuda"])
def test_export_predict(mesh, platform):
  config = PretrainConfig.from_dict(paper_configs.get_config().to_dict()).model.replace(
      vocab_size=100_000)
  predictor = ExportedGraphPredictor(config, None)
  variables = jax.eval_shape(lambda: ExportedGraphPredictor.untrained(config).variables)
  sh = state_shardings(mesh, variables)
  tokens = jax.ShapeDtypeStruct((32, 200), jnp.int32, sharding=batch_sharding(mesh))
  exported("the export's predict", platform, predictor.predict, mesh,
           (sh, batch_sharding(mesh), batch_sharding(mesh)), batch_sharding(mesh, 5),
           abstract(variables, sh), tokens, tokens)


def test_per_device_bytes_as_xla_counts_them(mesh):
  # docs/tpu.md's table (experiments/tpu_memory.py): the fsdp rule's
  # per-device bytes = a sharded program's argument bytes on one device
  from experiments.tpu_memory import batch_bytes, device_bytes, paper_state, table  # noqa: PLC0415
  tree = {"table": jax.ShapeDtypeStruct((256, 16), jnp.float32),     # 4,096: split
          "bias": jax.ShapeDtypeStruct((16,), jnp.float32)}          # replicated
  batch = shapes(tokens=((32, 20), jnp.int32))
  sh = state_shardings(mesh, tree)
  bsh = {"tokens": batch_sharding(mesh)}
  compiled = jax.jit(lambda t, b: (t, b["tokens"].sum()), in_shardings=(sh, bsh)).lower(
      abstract(tree, sh), abstract(batch, bsh)).compile()
  assert device_bytes(tree, 2) == 256 * 16 * 4 // 2 + 16 * 4
  assert compiled.memory_analysis().argument_size_in_bytes == (
      device_bytes(tree, 2) + batch_bytes(batch, 8))
  state, paper_batch = paper_state()
  rows = table(state, paper_batch)
  assert [(r["slice"], r["mesh"]) for r in rows[:2]] == [("v4-8", "4 × 1"), ("v4-8", "1 × 4")]
  assert rows[0]["opt_state"] == device_bytes(state.params, 1)     # SGD momentum: one trace
  assert rows[1]["params"] < rows[0]["params"] / 3                  # fsdp 4 splits nearly all
  assert rows[0]["batch"] == 32 * 200 * 4 * 2 // 4
