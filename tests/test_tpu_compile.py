"""Every program a TPU user runs, compiled by the real TPU compiler (libtpu,
installed by the test extra through jax's `tpu` extra) for compile-only
devices of a slice: no TPU needed. What it shows that lowering cannot: the
programs fit the chips' HBM, the Pallas kernels' blocks fit their VMEM, a
program that does not fit is refused in one line (by the compile command
and by a run, before its first step), and the fused kernels hold less than
the reference ops. Sizes are cut where a test needs it; the paper model's
train step is compiled at its own sizes (V 100,000, batch 32 × 200).

The programs compile at the compiler's least execution-time optimisation
effort (`jax_exec_time_optimization_effort` -1, a test-suite setting like the
CPU's cheap compiles: its slowest programs 2–3× quicker, the same kernels and
shardings, a different schedule); the comparison of the fused and reference
steps' memory, which is the scheduler's result, compiles at the default.
`experiments.tpu_compile` keeps the default.
"""
import dataclasses
import functools
import importlib.util
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from experiments import compile_targets
from experiments.compile_report import Checker, jax_config
from experiments.configs import cifar as cifar_configs
from experiments.configs import imdb as imdb_configs
from experiments.configs import images_pretrain as image_configs
from experiments.configs import mnli as mnli_configs
from experiments.configs import paper as paper_configs
from experiments.configs import squad as squad_configs
from experiments.configs import demo as demo_configs
from experiments.configs import lstm_lm as lstm_configs
from experiments.configs import picking as picking_configs
from experiments.configs import wiki_cpu as wiki_configs
from experiments.lstm_control import LstmLmConfig
from glomo_jax.classification import ClassificationConfig
from glomo_jax.focused.config import PickingConfig
from glomo_jax.images.cifar import CifarConfig
from glomo_jax.pretraining import PretrainConfig
from glomo_jax.pretraining.pixels import ImagePretrainConfig
from glomo_jax.squad import SquadConfig
from glomo_jax.tpu import GENERATIONS, KERNEL_BLOCKS, GiB, MiB
from glomo_jax.train.memory import ProgramDoesNotFitError
from glomo_jax.train.tpu_slices import compile_devices, parse_slice

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None,
    reason="libtpu is not installed: pip install 'jax[tpu]' (x86-64 Linux; make test does)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAPH_KERNELS = ("graph_mix_tpu", "graph_mix_dq_tpu", "graph_mix_dkv_tpu")
LOSS_KERNELS = ("tied_softmax_rows_tpu", "tied_softmax_vocab_tpu")


@functools.lru_cache(maxsize=None)
def devices(name: str):
  return tuple(compile_devices(parse_slice(name)))


def effort(value: float):
  """The compiler's execution-time optimisation effort, -1 (least) to 1."""
  return jax_config("jax_exec_time_optimization_effort", value)


@pytest.fixture(autouse=True)
def quick_compiles():
  with effort(-1.0):
    yield


def checker(kind: str, name: str = "v5e-8", limit=None) -> Checker:
  return Checker(kind, parse_slice(name), devices(name), limit=limit)


def paper(**model) -> PretrainConfig:
  config = PretrainConfig.from_dict(paper_configs.get_config().to_dict())
  return config.replace(model=config.model.replace(**model))


def test_slice_names_map_to_the_compilers_devices():
  cases = {"v4-8": ("TPU v4", 4, "v4:2x2x1"), "v5p-8": ("TPU v5", 4, "v5p:2x2x1"),
           "v5e-8": ("TPU v5 lite", 8, "v5e:2x4"), "v5litepod-16": ("TPU v5 lite", 16, "v5e:4x4"),
           "v6e-8": ("TPU v6 lite", 8, "v6e:2x4"), "v5e-256": ("TPU v5 lite", 256, "v5e:16x16"),
           "v5e:2x4": ("TPU v5 lite", 8, "v5e:2x4")}
  for name, (kind, count, topology) in cases.items():
    tpu = parse_slice(name)
    assert (tpu.num_devices, tpu.topology) == (count, topology), name
    assert {d.device_kind for d in devices(name)} == {kind}, name
    assert len(devices(name)) == count
  two = compile_devices(parse_slice("v5e-8", num_slices=2))
  assert len(two) == 16 and [d.slice_index for d in two] == [0] * 8 + [1] * 8
  for bad, message in (("v5e-7", "no v5e slice of that size"), ("v9-8", "unknown TPU"),
                       ("v4-6", "no v4 slice"), ("tpu", "write it as")):
    with pytest.raises(ValueError, match=message):
      parse_slice(bad)


def test_paper_train_step_fused_fits_with_its_kernels_per_shard():
  # the paper's sizes on a v5e-8 (data 4 × fsdp 2): both kernels' 20 Mosaic
  # calls compile within their VMEM, the step within the HBM
  config = paper(kernels="fused")
  config = config.replace(loop=dataclasses.replace(config.loop, mesh_fsdp=2))
  row = checker("pretrain").compile_all(config, ("train",))[0]
  calls = row["mosaic_calls"]
  assert {k: calls.get(k) for k in GRAPH_KERNELS + LOSS_KERNELS} == {
      "graph_mix_tpu": 6, "graph_mix_dq_tpu": 6, "graph_mix_dkv_tpu": 6,
      "tied_softmax_rows_tpu": 1, "tied_softmax_vocab_tpu": 1}, calls
  memory = row["memory"]
  assert 0 < memory["argument"] - memory["alias"] < 2 ** 20    # the state is donated, not the batch
  assert memory["needed"] < 2 * GiB


def cut_pretraining(kernels: str) -> PretrainConfig:
  """The CPU preset's model (2 + 2 conv layers, 3 graph layers, a 1-layer
  decoder, d 128) at the paper's batch, windows and sampled positions and
  V 32,000, without the distance prior (the graph kernel has none)."""
  config = PretrainConfig.from_dict(wiki_configs.get_config().to_dict())
  return config.replace(vocab_size=32_000, batch_size=32, bptt=200, model=config.model.replace(
      kernels=kernels, vocab_size=32_000, distance_prior=0, sample_positions=20))


def test_pretraining_steps_reference_and_fused_the_fused_train_step_holds_less():
  # the train steps with both kernel forms on 8 v5e chips, at the default
  # effort: the fused one's heap of temporaries is smaller (at these sizes
  # 21 MiB against 90); the reference eval step too (the fused eval step:
  # the v4-8 test below)
  rows = {}
  for k in ("reference", "fused"):
    with effort(0.0):
      rows[k] = checker("pretrain").compile_all(cut_pretraining(k), ("train",))
  rows["reference"] += checker("pretrain").compile_all(cut_pretraining("reference"), ("eval",))
  fused, reference = rows["fused"], rows["reference"]
  assert sum(fused[0]["mosaic_calls"].values()) == 20
  assert not reference[0]["mosaic_calls"] and not reference[1]["mosaic_calls"]
  assert fused[0]["memory"]["temp"] < reference[0]["memory"]["temp"]
  for row in fused + reference:    # the compiler's peak: the arguments live at least
    assert row["memory"]["peak"] > row["memory"]["argument"], row
  # the compiler counts every matmul of the reference step, a loop's body
  # once (the decoder's GRU scan): within [0.6, 1] of the formula a device
  sys.path.insert(0, ROOT)
  from benchmarks.stepbench.flops import model_flops  # noqa: PLC0415
  config = cut_pretraining("reference")
  formula = model_flops(config.model, config.batch_size, config.bptt)["train"]
  ratio = reference[0]["flops"] / (formula / len(devices("v5e-8")))
  assert 0.6 < ratio <= 1.0, ratio


def test_the_fused_steps_compile_for_a_v4_8s_megacore_devices():
  # a v4-8's 4 megacore devices: the kernels' 20 Mosaic calls compile within
  # a v4's VMEM (its blocks), the eval step keeps the rows kernel alone
  train, evaluate = checker("pretrain", "v4-8").compile_all(cut_pretraining("fused"),
                                                            ("train", "eval"))
  assert sum(train["mosaic_calls"].values()) == 20
  assert evaluate["mosaic_calls"] == {"graph_mix_tpu": 6, "tied_softmax_rows_tpu": 1}
  for row in (train, evaluate):
    assert row["memory"]["argument"] < row["memory"]["peak"] < GENERATIONS["v4"].hbm_bytes


KINDS = {   # cut sizes: pixels 16 × 16 (the CPU preset), IMDB reviews of 128 words,
            # SQuAD passages of 200, CIFAR's ResNet-18 at width 16 (the CPU preset)
    "pixels": ("pretrain_images", ImagePretrainConfig, image_configs, "cpu", ("train", "predict")),
    "imdb": ("classify", ClassificationConfig, imdb_configs, "", ("train",)),
    "mnli": ("classify", ClassificationConfig, mnli_configs, "", ("train",)),
    "squad": ("squad", SquadConfig, squad_configs, "", ("train",)),
    "cifar": ("cifar", CifarConfig, cifar_configs, "cpu", ("train",)),
    "picking": ("picking", PickingConfig, picking_configs, "", ("train", "eval")),
    "lstm_lm": ("lstm_lm", LstmLmConfig, lstm_configs, "", ("train", "eval")),
}


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_run_kind_compiles_for_a_v5e_8(name):
  kind, config_class, module, preset, programs = KINDS[name]
  config = config_class.from_dict(module.get_config(preset).to_dict())
  if name == "imdb":            # the variant that reads a paper-size predictor's graphs
    config = config.replace(variant="rnn", predictor_export="runs/none", max_words=128)
  if name in ("squad", "cifar", "picking"):     # batches the 8 devices split
    config = config.replace(optim=dataclasses.replace(config.optim, batch_size=48,
                                                      eval_batch_size=96))
  if name == "squad":
    config = config.replace(max_context_words=200)
  rows = checker(kind).compile_all(config, programs)
  assert [r["program"] for r in rows] == [
      {"train": "train step", "eval": "eval step", "predict": "export's predict"}[p]
      for p in programs]
  for r in rows:
    assert 0 < r["memory"]["needed"] < 16 * GiB, r


def test_the_export_predict_of_the_paper_model():
  (row,) = checker("pretrain").compile_all(paper(), ("predict",))
  variables = compile_targets.target("pretrain", paper()).predict_args[0]
  size = sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(variables))
  assert row["memory"]["argument"] >= size > 250 * 2 ** 20    # the variables on every device


def test_a_batch_too_big_fails_in_one_line_in_the_command():
  out = subprocess.run(
      [sys.executable, "-m", "experiments.tpu_compile",
       "--config=experiments/configs/demo.py:tiny", "--topology=v5e-8",
       "--programs=train", "--config.batch_size=2097152"],
      cwd=ROOT, capture_output=True, text=True, timeout=600,
      env=dict(os.environ, JAX_EXEC_TIME_OPTIMIZATION_EFFORT="-1"))
  assert out.returncode == 1, out.stderr[-2000:]
  line = out.stderr.strip().splitlines()[-1]
  assert line.startswith("error: the train step does not fit on TPU v5 lite"), line
  assert "GiB of HBM per device" in line and "--config.batch_size" in line
  assert "or change the kernels (--config.model.kernels=reference|fused)" in line, line


def test_a_run_that_cannot_fit_stops_before_its_first_step(tmp_path):
  # the demo's tiny run at d 8,192 on a v5e-8's compile-only devices: the
  # loop's train step is compiled before the state exists, and refused
  from glomo_jax.pretraining import train_and_evaluate  # noqa: PLC0415
  config = PretrainConfig.from_dict(demo_configs.get_config("tiny").to_dict())
  config = config.replace(batch_size=8, export=False,
                          model=config.model.replace(dim=8192, head_dim=2048))
  with pytest.raises(ProgramDoesNotFitError, match=r"train step does not fit on TPU v5 lite "
                                                   r"\(v5e-8, 8 devices\): it needs [\d.]+ "
                                                   r"GiB of HBM"):
    train_and_evaluate(config, str(tmp_path / "run"), devices=devices("v5e-8"))
  assert os.listdir(tmp_path / "run" / "checkpoints") == []


def tied_softmax_loss_program(n: int, v: int, d: int, blocks: tuple[int, int], name="v5e-8"):
  """(the program of the tied softmax's gradient in the table at these
  blocks, on one device of the slice; its abstract table and batch)."""
  from glomo_jax.ops.pallas.tied_softmax import fused_tied_softmax_cross_entropy  # noqa: PLC0415
  from glomo_jax.train.programs import Program  # noqa: PLC0415
  from glomo_jax.train.sharding import make_mesh  # noqa: PLC0415
  mesh = make_mesh(1, 1, devices(name)[:1])
  loss = lambda table, batch: jax.grad(lambda t: fused_tied_softmax_cross_entropy(
      batch["hidden"], t, batch["targets"], batch["weights"], block_rows=blocks[0],
      block_vocab=blocks[1])[0])(table)
  batch = {"hidden": jax.ShapeDtypeStruct((n, d), jnp.float32),
           "targets": jax.ShapeDtypeStruct((n,), jnp.int32),
           "weights": jax.ShapeDtypeStruct((n,), jnp.float32)}
  return Program("loss", loss, mesh, None, None), jax.ShapeDtypeStruct((v, d), jnp.float32), batch


def test_kernel_blocks_over_the_scoped_vmem_compile_with_a_raised_limit():
  # blocks (1024, 1024) at d 512: each kernel needs more VMEM than a v5e's
  # scoped 16 MiB (the rows kernel ~27 MiB by the compiler's count); each
  # call's limit is raised to 1.25 × its estimate, within the 128 MiB
  program, table, batch = tied_softmax_loss_program(4096, 8192, 512, (1024, 1024))
  with jax.set_mesh(program.mesh):
    text = jax.jit(program.fn).lower(table, batch).as_text()
    program.compile(table, batch)
  limits = [int(x) for x in re.findall(r"scoped_memory_configs\\22: \[\{\\22memory_space"
                                       r"\\22:1, \\22offset\\22: 0, \\22size\\22: (\d+)", text)]
  assert len(limits) == 2 and all(16 * MiB < x < 128 * MiB for x in limits), limits


def test_kernel_blocks_over_the_vmem_limit_fail_naming_the_kernel():
  # a v4's VMEM is its scoped limit (16 MiB): blocks of (1,024, 2,048) at d
  # 512 need more (a logits tile of 8 MiB, twice), and the compile fails
  # naming the kernel
  program, table, batch = tied_softmax_loss_program(2048, 8192, 512, (1024, 2048), "v4-8")
  with jax.set_mesh(program.mesh), pytest.raises(
      ProgramDoesNotFitError, match=r"TPU v4 \(v4-2, 1 device\): the Pallas kernel tied_softmax_(rows|vocab)_tpu needs "
                                    r"[\d.]+ MiB of VMEM, its limit is 16.0 MiB"):
    program.compile(table, batch)


def test_slice_devices_give_the_kernels_their_generation():
  # a mesh of a slice's compile-only devices: the kernels' TPU generation
  # (its blocks and VMEM) is the slice's
  from glomo_jax.ops.pallas import kernel_mode, tpu_blocks, tpu_generation  # noqa: PLC0415
  from glomo_jax.train.sharding import make_mesh  # noqa: PLC0415
  for name, generation, count in (("v4-8", "v4", 4), ("v6e-8", "v6e", 8), ("v5p-8", "v5p", 4)):
    mesh = make_mesh(count, 1, devices(name))
    with jax.set_mesh(mesh):
      assert tpu_generation() is GENERATIONS[generation], name
      assert tpu_blocks("tied_softmax") == KERNEL_BLOCKS[generation]["tied_softmax"]
      assert kernel_mode().form == "tpu"


def test_find_batch_predicts_then_checks_the_largest_batch(monkeypatch):
  # the search on stand-ins for the compile: 1 MiB a row within a 1 GiB
  # limit (the line through the first two probes predicts 1,000 rows, checked
  # with 1,008), one whose limit is 600 rows though the bytes stay linear
  # (the prediction fails: bisection), one where nothing fits; one real
  # probe of the tiny model
  config = PretrainConfig.from_dict(demo_configs.get_config("tiny").to_dict())
  check = checker("pretrain", limit=GiB)
  fits, used = check.fits(config.replace(batch_size=8))
  assert fits and used == check.rows[8]["memory"]["needed"] > 0
  probes = []

  def stand_in(fits):
    return lambda self, c: (probes.append(c.batch_size) or (fits(c.batch_size),
                                                            c.batch_size * 2 ** 20))
  monkeypatch.setattr(Checker, "fits", stand_in(lambda b: b <= 1000))
  found = check.find_batch(config.replace(batch_size=24), log=lambda _: None)
  assert (found["batch"], found["next"], probes) == (1000, 1008, [24, 48, 1000, 1008])
  assert check.find_batch(config.replace(batch_size=2048), log=lambda _: None)["batch"] == 1000
  monkeypatch.setattr(Checker, "fits", stand_in(lambda b: b <= 600))
  found = check.find_batch(config.replace(batch_size=24), log=lambda _: None)
  assert (found["batch"], found["next"]) == (600, 608)
  # near the limit the compiler may pack a larger batch into fewer bytes: the
  # line from the smallest that fits, not a leap to the search's ceiling
  probes.clear()
  monkeypatch.setattr(Checker, "fits", lambda self, c: (
      probes.append(c.batch_size) or (c.batch_size <= 1000,
                                      (c.batch_size - (600 if c.batch_size >= 960 else 0)) << 20)))
  found = check.find_batch(config.replace(batch_size=480), log=lambda _: None)
  assert (found["batch"], found["next"]) == (1000, 1008) and max(probes) < 2000, probes
  monkeypatch.setattr(Checker, "fits", lambda self, c: (False, None))
  assert check.find_batch(config.replace(batch_size=8), log=lambda _: None)["batch"] is None
