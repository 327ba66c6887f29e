"""CIFAR-10 transfer on the loop: every variant trains on a local .npz with a
pixel predictor export, results.json, exact resume, SGD + cosine, mistakes."""
import dataclasses
import json
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glomo_jax.config import ModelConfig
from glomo_jax.images.cifar import CifarConfig, run_cifar
from glomo_jax.images.data import ImageSource
from glomo_jax.pretraining.pixels import ImagePretrainConfig, pretrain_images
from glomo_jax.downstream.options import OptimOptions
from glomo_jax.train.config import DOWNSTREAM_LOOP, LoopOptions

ONE = jax.devices()[:1]   # in-process runs on one device: cheaper compiles
TWO = jax.devices()[:2]   # but every variant once on a mesh of 2 (sharded image runs)


def write_cifar(path, n=40, size=8):
  rng = np.random.default_rng(0)
  labels = np.arange(n) % 10
  r, c = np.indices((size, size))
  images = np.stack([np.stack([(r * (l + 1) * 9 + c * 7 + 30 * ch) % 256 for ch in range(3)],
                              -1) for l in labels]).astype(np.uint8)
  images = np.clip(images + rng.integers(0, 20, images.shape), 0, 255).astype(np.uint8)
  np.savez(path, images=images, labels=labels.astype(np.uint8))
  return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  root = tmp_path_factory.mktemp("cifar")
  path = write_cifar(root / "cifar.npz")
  model = ModelConfig.tiny(vocab_size=32, decoder_layers=1, sample_positions=4)
  pretrained = pretrain_images(ImagePretrainConfig(
      model=model, images=ImageSource("npz", path), downsample=2, heldout_images=8,
      batch_size=8, loop=LoopOptions(num_steps=2, eval_every=2, checkpoint_every=2,
                                     compile_fast=True)),
      str(root / "pretrain"), devices=ONE)
  return path, pretrained["export"]


def config_for(path, **changes):
  base = CifarConfig(train=ImageSource("npz", path), test=ImageSource("npz", path),
                     validation_images=8, depth=18, width=4,
                     optim=OptimOptions(optimizer="sgd", learning_rate=0.05, batch_size=8,
                                        eval_batch_size=8, weight_decay=5e-4,
                                        schedule="cosine"),
                     loop=dataclasses.replace(DOWNSTREAM_LOOP, num_steps=4, eval_every=2,
                                              log_every=1, compile_fast=True))
  return base.replace(**changes)


def check_results(results, workdir, variant):
  assert results["steps"] == 4 and results["images"] == {"train": 32, "validation": 8,
                                                          "test": 40}
  assert 0 <= results["validation_accuracy"] <= 1 and 0 <= results["test"] <= 1
  with open(workdir / "results.json") as f:
    assert json.load(f)["variant"] == variant


@pytest.mark.parametrize("variant", ["baseline", "uniform"])   # glomo: the resume test
def test_every_variant_trains_and_writes_results(files, tmp_path, variant):
  path, _ = files
  config = config_for(path, variant=variant, graph_downsample=2)
  check_results(run_cifar(config, str(tmp_path / variant), devices=TWO), tmp_path / variant,
                variant)


def test_a_resumed_run_equals_a_straight_one(files, tmp_path):
  path, export = files
  config = config_for(path, variant="glomo", predictor_export=export, graph_downsample=2)
  # a constant rate: a cosine over 2 steps is another schedule than over 4
  config = config.replace(optim=dataclasses.replace(config.optim, schedule="constant"))
  straight = run_cifar(config, str(tmp_path / "straight"), devices=TWO)
  check_results(straight, tmp_path / "straight", "glomo")
  run_cifar(config.replace(loop=dataclasses.replace(config.loop, num_steps=2)),
            str(tmp_path / "resumed"), devices=TWO)
  resumed = run_cifar(config, str(tmp_path / "resumed"), devices=TWO)
  assert [c["train_loss"] for c in resumed["curves"]] == \
      [c["train_loss"] for c in straight["curves"]]
  assert resumed["test"] == straight["test"]
  # a cosine run's steps cannot change on resume: test_trains_on_mock_tfds_cifar10


def test_sgd_with_weight_decay_and_cosine_schedule():
  o = OptimOptions(optimizer="sgd", learning_rate=0.1, momentum=0.9, weight_decay=0.5,
                   schedule="cosine")
  tx = o.optimizer_for(2)
  params = {"w": jnp.ones(2)}
  state = tx.init(params)
  step0, state = tx.update({"w": jnp.ones(2)}, state, params)
  g = 1.0 + 0.5                                   # gradient + L2 decay
  np.testing.assert_allclose(step0["w"], -0.1 * (g + 0.9 * g), rtol=1e-6)   # Nesterov
  step1, _ = tx.update({"w": jnp.ones(2)}, state, params)
  lr1 = 0.1 * 0.5 * (1 + np.cos(np.pi * 1 / 2))
  np.testing.assert_allclose(step1["w"], -lr1 * (g + 0.9 * (0.9 * g + g)), rtol=1e-6)


def test_mistakes_are_named(files, tmp_path):
  path, _ = files
  with pytest.raises(ValueError, match="needs --config.predictor_export"):
    CifarConfig(variant="glomo")
  with pytest.raises(ValueError, match="unknown variant"):
    CifarConfig(variant="pixels")
  unlabelled = tmp_path / "u.npz"
  np.savez(unlabelled, images=np.zeros((20, 8, 8, 3), np.uint8))
  with pytest.raises(ValueError, match="has no labels"):
    run_cifar(config_for(str(unlabelled), test=None), str(tmp_path / "u"), devices=ONE)
  with pytest.raises(ValueError, match="must be labelled 8×8 images"):
    run_cifar(config_for(path, test=ImageSource("npz", str(unlabelled))), str(tmp_path / "t"),
              devices=ONE)


@pytest.mark.parametrize("arg", ["", "cpu", "tiny"])
def test_presets_build_configs(arg):
  from experiments.configs import cifar
  config = CifarConfig.from_dict(cifar.get_config(arg).to_dict())
  assert config.depth == 18 and config.optim.optimizer == "sgd"
  assert (config.test is None) == (arg != "")
  with pytest.raises(ValueError, match="unknown cifar preset"):
    cifar.get_config("nonsense")


def test_the_grid_runs_the_tiny_preset_and_tabulates(files, tmp_path):
  from test_entry_point_errors import run
  path, export = files
  out = run(["-m", "experiments.classify_grid", "--entry=cifar",
             "--config=experiments/configs/cifar.py:tiny", f"--root={tmp_path}",
             "--variants=baseline,glomo", "--seeds=0", "--",
             f"--config.train.location={path}", f"--config.predictor_export={export}",
             "--config.validation_images=8"])
  assert out.returncode == 0, out.stderr[-3000:]
  assert "| variant | seeds | validation |" in out.stdout
  assert "| baseline | 0 |" in out.stdout and "| glomo | 0 |" in out.stdout
  assert "python -m experiments.cifar" in out.stdout


def test_pixel_edges_are_graph_rows_and_the_figure_is_drawn(files, tmp_path):
  from glomo_jax.images.pixel_edges import pixel_edges
  from test_entry_point_errors import assert_one_line, run
  rng = np.random.default_rng(0)
  graphs = rng.uniform(0, 1, (4, 2, 12, 12))
  edges = pixel_edges(graphs, (1, 2), (3, 4))
  assert edges.shape == (4, 2, 3, 4)
  np.testing.assert_array_equal(edges[3, 1].reshape(-1), graphs[3, 1, 1 * 4 + 2])
  with pytest.raises(ValueError, match="outside the 3×4 image"):
    pixel_edges(graphs, (3, 0), (3, 4))
  path, export = files
  out_png = tmp_path / "edges.png"
  base = ["-m", "experiments.plot_pixel_edges", f"--export={export}", f"--images={path}",
          "--index=3", "--downsample=2"]
  out = run(base + ["--pixel=2,1", f"--out={out_png}"])
  assert out.returncode == 0, out.stderr[-3000:]
  assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert_one_line(run(base + ["--pixel=2"]), "--pixel must be row,column")


def test_trains_on_mock_tfds_cifar10(tmp_path, caplog):
  import tensorflow_datasets as tfds
  rng = np.random.default_rng(5)
  records = [{"image": rng.integers(0, 256, (8, 8, 3)).astype(np.uint8), "label": i % 10,
              "id": str(i)} for i in range(24)]
  config = config_for("unused", train=ImageSource("tfds", "cifar10", "train",
                                                  reader="data_source"),
                      test=ImageSource("tfds", "cifar10", "test", reader="data_source"))
  cosine = config.replace(loop=dataclasses.replace(config.loop, num_steps=2))
  assert cosine.optim.schedule == "cosine"
  with tfds.testing.mock_data(as_data_source_fn=lambda *a, **k: records):
    results = run_cifar(cosine, str(tmp_path / "run"), devices=ONE)
    assert results["steps"] == 2 and results["images"] == {"train": 16, "validation": 8,
                                                            "test": 24}
    # a cosine over 2 steps is another schedule than over 4: its steps cannot
    # change on resume (a constant rate's can: test_a_resumed_run_equals_a_straight_one)
    caplog.set_level(logging.INFO, logger="glomo_jax.train")
    caplog.clear()
    with pytest.raises(ValueError, match="another config.*loop.num_steps"):
      run_cifar(config, str(tmp_path / "run"), devices=ONE)
  assert "compiled in" not in caplog.text         # named before anything compiles
