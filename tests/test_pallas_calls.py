"""Every Pallas call of the fused kernels states its cost and, in its TPU
form, its VMEM: the cost estimates against hand counts, every call of the
fused train step carrying one (recorded as traced, and in the TPU module's
Mosaic calls), the TPU generation taken from the target mesh, its blocks,
and the VMEM limit's rule. Tracing and lowering only: nothing runs a kernel."""
import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.sharding import AbstractDevice, AbstractMesh

from glomo_jax import ModelConfig
from glomo_jax.ops.pallas import (KernelMode, lowering_for, pallas_call, tpu_compiler_params,
                                  tpu_generation, tpu_vmem, vmem_bytes, vmem_limit)
from glomo_jax.ops.pallas.graph_mix_tiles import Plan as GraphPlan, tile_count
from glomo_jax.ops.pallas.tied_softmax import fused_tied_softmax_cross_entropy
from glomo_jax.pretraining import GLoMoObjective
from glomo_jax.tpu import DEFAULT, GENERATIONS, KERNEL_BLOCKS, GiB, MiB
from glomo_jax.train import create_state, make_optimizer, train_step

# the paper-like tiny model of tests/test_fused_step.py
PAPER_LIKE = ModelConfig.tiny(sample_positions=4, vocab_size=256, kernels="fused")
T = 12
KERNELS = {"gpu": {"graph_mix", "graph_mix_dq", "graph_mix_dkv", "tied_softmax_rows",
                   "tied_softmax_vocab"}}
KERNELS["tpu"] = {name + "_tpu" for name in KERNELS["gpu"]}


@pytest.fixture
def calls(monkeypatch):
  """Each `pl.pallas_call` traced meanwhile: {name: [its arguments]}."""
  seen = {}
  original = pl.pallas_call

  def record(kernel, **kwargs):
    seen.setdefault(kwargs.get("name"), []).append(kwargs)
    return original(kernel, **kwargs)

  monkeypatch.setattr(pl, "pallas_call", record)
  return seen


def tpu_mesh(kind: str):
  """An abstract mesh of one TPU device of this kind."""
  device = AbstractDevice(device_kind=kind, num_cores=None, platform="tpu")
  return AbstractMesh((1,), ("data",), abstract_device=device)


def loss_and_grads(n, v, d, **options):
  """The fused loss and its gradients traced on abstract [n, d] rows and a
  [v, d] table (float32)."""
  f = jax.value_and_grad(lambda h, t: fused_tied_softmax_cross_entropy(
      h, t, jnp.zeros((n,), jnp.int32), jnp.ones((n,)), **options)[0], argnums=(0, 1))
  return jax.eval_shape(f, jax.ShapeDtypeStruct((n, d), jnp.float32),
                        jax.ShapeDtypeStruct((v, d), jnp.float32))


@pytest.mark.parametrize("form", ["gpu", "tpu"])
def test_tied_softmax_costs_are_the_hand_counts(calls, form):
  # 40 rows in 5 blocks of 8, d 12, V 45 in 3 tiles of 16 (48 scored), the
  # rows kernel's V in 2 splits of 2 tiles (64 scored: the 4th tile is padding)
  loss_and_grads(40, 45, 12, block_rows=8, block_vocab=16, vocab_splits=2, form=form)
  suffix = "_tpu" if form == "tpu" else ""
  (rows,) = [c["cost_estimate"] for c in calls["tied_softmax_rows" + suffix]]
  (vocab,) = [c["cost_estimate"] for c in calls["tied_softmax_vocab" + suffix]]
  # rows: logits and u = p·E, 2 flops a multiply-add each; exp of each logit
  # and of each row's rescale per tile; hidden (12 floats) and the target per
  # row (GPU: once per split), 64 table rows per row block, out: max, sum,
  # target logit and u (12) per split and row
  row_reads = 2 if form == "gpu" else 1
  assert rows == pl.CostEstimate(
      flops=2 * (2 * 40 * 64 * 12), transcendentals=40 * 64 + 40 * 4,
      bytes_accessed=row_reads * 40 * (12 * 4 + 4) + 5 * 64 * 12 * 4 + 2 * 40 * 15 * 4)
  # vocab: logits recomputed and dE; hidden, target, weight and lse per row
  # once per V tile; the table's 48 rows read and their gradient written
  assert vocab == pl.CostEstimate(
      flops=2 * (2 * 40 * 48 * 12), transcendentals=40 * 48,
      bytes_accessed=48 * 12 * 4 + 3 * 40 * (12 * 4 + 4 + 4 + 4) + 48 * 12 * 4)


def test_graph_mix_counts_the_tiles_a_causal_call_computes():
  mode = KernelMode("tpu", True)
  assert tile_count(GraphPlan(8, 8, False, mode), 3, 3) == 9
  assert tile_count(GraphPlan(8, 8, True, mode), 3, 3) == 1 + 2 + 3        # the diagonal's
  # rows 0-7 and 8-15 read source block 0 (sources 0-15), rows 16-31 both
  assert tile_count(GraphPlan(8, 16, True, mode), 4, 2) == 1 + 1 + 2 + 2


def test_a_pallas_call_without_a_cost_is_refused():
  with pytest.raises(TypeError, match="the Pallas call k needs a pl.CostEstimate"):
    pallas_call(lambda r, o: None, name="k", cost=None,
                out_shape=jax.ShapeDtypeStruct((8,), jnp.float32))


def paper_like_step():
  """The fused train step of the paper-like tiny model and its abstract
  state and batch."""
  tx = make_optimizer("sgd", 1.0, momentum=0.2, clip_norm=0.25)
  objective = GLoMoObjective(PAPER_LIKE, T, tx)
  state = jax.eval_shape(functools.partial(create_state, objective, tx), jax.random.PRNGKey(0))
  batch = {k: jax.ShapeDtypeStruct((8, T), jnp.int32) for k in ("tokens", "mask")}
  return functools.partial(train_step, objective, tx), state, batch


@pytest.mark.parametrize("platform", ["tpu", "cuda"])
def test_every_call_of_the_fused_train_step_states_its_cost(calls, platform):
  step, state, batch = paper_like_step()
  calls.clear()                             # the initialisation's, for this host
  with lowering_for(platform):
    jax.eval_shape(step, state, batch)
  form = "tpu" if platform == "tpu" else "gpu"
  assert set(calls) == KERNELS[form]
  for name, kwargs in calls.items():
    for c in kwargs:
      cost = c["cost_estimate"]
      assert cost.flops > 0 and cost.bytes_accessed > 0, (name, cost)
      assert (cost.transcendentals > 0) == name.startswith("tied_softmax"), (name, cost)
      if form == "tpu":
        assert c["compiler_params"].dimension_semantics[-1] == "arbitrary", name


def test_the_tpu_module_of_the_fused_train_step_carries_every_estimate():
  # Mosaic keeps the estimate in each custom call's configuration, for XLA
  step, state, batch = paper_like_step()
  with lowering_for("tpu"):
    text = jax.export.export(jax.jit(step), platforms=("tpu",))(state, batch).mlir_module()
  calls = [line for line in text.splitlines() if "tpu_custom_call" in line]
  names = {re.search(r'kernel_name = "(\w+)"', line).group(1) for line in calls}
  assert names == KERNELS["tpu"]
  for line in calls:
    cost = re.search(r'cost_estimate\\22: \{\\0A\\22bytes_accessed\\22:(\d+),\\0A\\22flops'
                     r'\\22:(\d+),.*?transcendentals\\22:(\d+)', line)
    assert cost and int(cost.group(1)) > 0 and int(cost.group(2)) > 0, line[-300:]


def test_the_tpu_generation_is_the_target_meshs():
  assert tpu_generation() is DEFAULT                      # a CPU host, no mesh
  for name, generation in GENERATIONS.items():
    with jax.sharding.use_abstract_mesh(tpu_mesh(generation.device_kind)):
      assert tpu_generation() is generation, name
  with jax.sharding.use_abstract_mesh(tpu_mesh("TPU v9 lite")):
    assert tpu_generation() is DEFAULT                    # a kind the table lacks
  cpu = AbstractMesh((1,), ("data",), abstract_device=AbstractDevice(
      device_kind="cpu", num_cores=None, platform="cpu"))
  with jax.sharding.use_abstract_mesh(cpu), lowering_for("tpu"):
    assert tpu_generation() is DEFAULT


def test_the_tpu_forms_default_blocks_are_the_generations(calls):
  # v6e's blocks are larger (its 256-wide MXU): the rows and table tiles of
  # the tied softmax's calls are its KERNEL_BLOCKS
  assert KERNEL_BLOCKS["v6e"]["tied_softmax"] != KERNEL_BLOCKS["v5e"]["tied_softmax"]
  for name in ("v5e", "v6e"):
    calls.clear()
    with jax.sharding.use_abstract_mesh(tpu_mesh(GENERATIONS[name].device_kind)):
      loss_and_grads(2048, 4096, 128)
    h, e = calls["tied_softmax_rows_tpu"][0]["in_specs"][:2]
    assert (h.block_shape[0], e.block_shape[0]) == KERNEL_BLOCKS[name]["tied_softmax"]


def test_vmem_estimate_and_limit_by_hand():
  # Mosaic's tiles: 8 sublanes of 32 bits (16 of bfloat16) × 128 lanes
  assert vmem_bytes((256, 1), jnp.float32) == 256 * 128 * 4        # a column
  assert vmem_bytes((10, 100), jnp.bfloat16) == 16 * 128 * 2
  assert vmem_bytes((3,), jnp.int32) == 8 * 128 * 4
  assert vmem_bytes((2, 16, 256), jnp.float32) == 2 * 16 * 256 * 4
  block = ((8, 128), jnp.float32)                                   # 4 KiB
  assert tpu_vmem([block] * 3, [block], [block], [block] * 2) == (2 * 4 + 1 + 2) * 4096
  v4, v5e, v6e = GENERATIONS["v4"], GENERATIONS["v5e"], GENERATIONS["v6e"]
  assert vmem_limit(16 * MiB, v5e) is None                          # the scoped default
  assert vmem_limit(16 * MiB + 1, v5e) == 21 * MiB                  # 1.25 ×, whole MiB
  assert vmem_limit(100 * MiB, v5e) == 125 * MiB
  assert vmem_limit(110 * MiB, v5e) == 128 * MiB                    # at most the VMEM
  assert vmem_limit(500 * MiB, v5e) == 128 * MiB
  assert vmem_limit(20 * MiB, v6e) is None                          # scoped 32 MiB
  assert vmem_limit(30 * MiB, v4) == 16 * MiB                       # 16 MiB in all
  with jax.sharding.use_abstract_mesh(tpu_mesh(v5e.device_kind)):
    params = tpu_compiler_params(("parallel", "arbitrary"), 20 * MiB)
    assert params.vmem_limit_bytes == 25 * MiB
    assert params.dimension_semantics == ("parallel", "arbitrary")
  with jax.sharding.use_abstract_mesh(tpu_mesh(v6e.device_kind)):
    assert tpu_compiler_params(("parallel",), 20 * MiB).vmem_limit_bytes is None


def test_a_large_explicit_block_raises_its_calls_vmem_limit(calls):
  # the default blocks stay within v5e's scoped 16 MiB; blocks of (1024, 1024)
  # at d 512 need more: the limit is raised to 1.25 × the estimate
  with jax.sharding.use_abstract_mesh(tpu_mesh("TPU v5 lite")):
    loss_and_grads(4096, 8192, 512)
    defaults = {n: c[0]["compiler_params"].vmem_limit_bytes for n, c in calls.items()}
    calls.clear()
    loss_and_grads(4096, 8192, 512, block_rows=1024, block_vocab=1024)
  assert defaults == {"tied_softmax_rows_tpu": None, "tied_softmax_vocab_tpu": None}
  f32 = np.dtype(np.float32)
  scratch = [((1024, 1), f32)] * 3 + [((1024, 512), f32)]                     # m, l, t, u
  rows = tpu_vmem(
      [((1024, 512), f32), ((1024, 512), f32), ((1024, 1), np.int32)],          # h, E, y
      scratch,                                                                  # the outputs
      scratch, [((1024, 1024), f32)] * 2 + [((1024, 512), f32)] + scratch)      # logits, E, updates
  assert rows == 2 * (4.5 + 3.5) * MiB + 3.5 * MiB + (8 + 2 + 3.5) * MiB
  assert calls["tied_softmax_rows_tpu"][0]["compiler_params"].vmem_limit_bytes == (
      -(-int(1.25 * rows) // MiB) * MiB)


def test_the_advice_names_the_kernels_only_where_the_task_has_a_choice():
  from glomo_jax.train.memory import does_not_fit  # noqa: PLC0415
  text = "RESOURCE_EXHAUSTED: Ran out of memory on HBM (25.81G) exceeds available HBM (15.75G)"
  downstream = str(does_not_fit("train step", "TPU v4 (v4-8, 4 devices)", RuntimeError(text),
                                "--config.optim.batch_size"))
  assert downstream == (
      "the train step does not fit on TPU v4 (v4-8, 4 devices): it needs 25.81 GiB of HBM per "
      "device, 15.75 GiB are available; lower the batch (--config.optim.batch_size) or split "
      "the parameters and optimiser state over more devices (--config.loop.mesh_fsdp=N)")
  pretraining = str(does_not_fit("train step", "TPU v4 (v4-8, 4 devices)", RuntimeError(text),
                                 "--config.batch_size", "--config.model.kernels"))
  assert pretraining.endswith(", split the parameters and optimiser state over more devices "
                              "(--config.loop.mesh_fsdp=N) or change the kernels "
                              "(--config.model.kernels=reference|fused)")


def test_both_of_the_compilers_hbm_refusals_are_read():
  # the heap simulator's words (the fused step on a v5e-256 at 73,728 rows,
  # abridged) as well as the temporaries' check's (above)
  from glomo_jax.train.memory import does_not_fit  # noqa: PLC0415
  text = ("RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: XLA:TPU compile permanent error. Ran "
          "out of memory in memory space hbm. Used 15.84G of 15.75G hbm. Exceeded hbm capacity "
          "by 94.57M. Total hbm usage >= 16.09G: reserved 258.12M program 15.76G arguments "
          "84.46M")
  error = does_not_fit("train step", "TPU v5 lite (v5e-256, 256 devices)", RuntimeError(text))
  assert str(error).startswith("the train step does not fit on TPU v5 lite (v5e-256, 256 "
                               "devices): it needs 15.84 GiB of HBM per device, 15.75 GiB are "
                               "available; lower the batch"), str(error)
  assert (error.memory, error.needed) == ("HBM", int(15.84 * GiB))


def test_a_kernel_short_of_the_whole_vmem_is_named_in_one_line():
  # the compiler's words (abridged) when a call's limit is the whole VMEM
  from glomo_jax.train.memory import does_not_fit  # noqa: PLC0415
  label = ("XLA label: jvp_tied_softmax_vocab_tpu_.1 = custom-call(table.1, h.1, ...(+1)), "
           'custom_call_target="tpu_custom_call", operand_layout_constraints={}')
  head = ("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory "
          "space vmem. Used 135.82M of 128.00M vmem. Exceeded vmem capacity by 7.82M. "
          "Largest program allocations in vmem: ")
  spill = ("1. Size: 81.67M XLA label: register allocator spill slots in HLO :: "
           "jvp_tied_softmax_rows_tpu_.1 Allocation type: scoped 2. Size: 4.00M ")
  for text, kernel in ((head + "1. Size: 64.00M " + label, "tied_softmax_vocab_tpu"),
                       (head + spill + label.replace("vocab", "rows"), "tied_softmax_rows_tpu")):
    error = does_not_fit("loss", "TPU v5 lite (1 device)", RuntimeError(text))
    assert str(error).startswith(
        f"the loss does not fit on TPU v5 lite (1 device): the Pallas kernel {kernel} needs "
        "135.8 MiB of VMEM, its limit is 128.0 MiB; "), str(error)
    assert (error.memory, error.available) == ("VMEM", 128 * MiB)


def test_what_a_program_needs_is_the_compilers_peak_not_its_heap():
  # the fused v5p-8 step at 8,064 rows (MiB): the compiler accepted it
  # against 95.74 GiB though its heap's sum is 102,649.5; its peak + code is
  # what it needs; without a peak (a backend that reports none), the sum
  from glomo_jax.train.memory import ProgramMemory  # noqa: PLC0415
  m = ProgramMemory(argument=670, output=667, alias=667, temp=101_905, code=75, peak=92_721)
  assert (m.total, m.needed) == (670 + 101_905 + 75, 92_721 + 75)
  assert m.to_dict()["needed"] == m.needed
  assert ProgramMemory(argument=670, output=700, alias=667, temp=900, code=75).needed == (
      670 + 33 + 900 + 75)
