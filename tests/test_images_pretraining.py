"""Pixel pretraining on the loop: trains on an .npz, evaluates the held-out
loss, resumes exactly, refuses another config's workdir."""
import json
import logging
import os

import jax
import numpy as np
import pytest

from glomo_jax.config import ModelConfig
from glomo_jax.images.data import ImageSource
from glomo_jax.export import ExportedPixelGraphPredictor, load_graph_predictor
from glomo_jax.images import PixelGLoMo
from glomo_jax.pretraining.pixels import ImagePretrainConfig, pretrain_images
from glomo_jax.train.config import LoopOptions

ONE = jax.devices()[:1]   # in-process runs on one device: cheaper compiles
TWO = jax.devices()[:2]   # but the resumed run on a mesh of 2 (sharded checkpoints)
#                           and the mock TFDS run (the same programs)


def write_images(path, n=24, size=8):
  r, c = np.indices((size, size))
  rng = np.random.default_rng(0)
  images = np.stack([np.stack([(r * a + c * b + 40 * ch) % 256 for ch in range(3)], -1)
                     for a, b in rng.integers(5, 40, (n, 2))]).astype(np.uint8)
  np.savez(path, images=images, labels=np.arange(n) % 10)
  return str(path)


def config_for(path, steps=4, **changes):
  model = ModelConfig.tiny(vocab_size=32, decoder_layers=1, sample_positions=5)
  base = ImagePretrainConfig(model=model, images=ImageSource("npz", path), downsample=2,
                             heldout_images=8, batch_size=8, eval_batches=0,
                             loop=LoopOptions(num_steps=steps, log_every=1, eval_every=2,
                                              checkpoint_every=2, compile_fast=True))
  return base.replace(**changes)


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory):
  """(images path, summary) of a 4-step run on a mesh of 2 (sharded
  checkpoints) with its export: the resume and export tests read it."""
  root = tmp_path_factory.mktemp("images")
  path = write_images(root / "images.npz")
  return path, pretrain_images(config_for(path), str(root / "straight"), devices=TWO)


def test_trains_evaluates_and_resumes_exactly(straight_run, tmp_path, caplog):
  path, straight = straight_run
  assert straight["step"] == 4
  heldout = straight["eval"]["heldout"]
  h = w = 4                     # right, below-left, below, below-right targets in a 4×4 image
  assert heldout["values"] == 2 * 8 * 3 * (h * (w - 1) + 2 * (h - 1) * (w - 1) + (h - 1) * w)
  assert np.isfinite(heldout["loss"]) and heldout["bits_per_value"] == pytest.approx(
      heldout["loss"] / np.log(2))
  resumed_dir = str(tmp_path / "resumed")
  first = pretrain_images(config_for(path, steps=2), resumed_dir, devices=TWO)
  assert first["step"] == 2
  resumed = pretrain_images(config_for(path), resumed_dir, devices=TWO)
  assert resumed["first_step"] == 2 and resumed["step"] == 4
  assert resumed["eval"]["heldout"]["loss"] == heldout["loss"]
  with open(os.path.join(resumed_dir, "config.json")) as f:
    assert json.load(f)["downsample"] == 2
  caplog.set_level(logging.INFO, logger="glomo_jax.train")
  caplog.clear()
  with pytest.raises(ValueError, match="another config"):
    pretrain_images(config_for(path, steps=6, learning_rate=0.5), resumed_dir, devices=TWO)
  assert "compiled in" not in caplog.text         # named before anything compiles


def test_the_export_loads_in_one_call_for_any_image_size(straight_run):
  path, summary = straight_run
  predictor = load_graph_predictor(summary["export"])
  assert isinstance(predictor, ExportedPixelGraphPredictor)
  assert predictor.metadata["step"] == 4 and predictor.manifest["units"] == "pixels"
  images = np.asarray(np.load(path)["images"][:2])          # 8×8: not the trained 4×4
  graphs = np.asarray(predictor(images))
  L = predictor.config.num_graph_layers
  assert graphs.shape == (2, 2 * L, predictor.config.num_heads, 64, 64)
  expected = PixelGLoMo(predictor.config, (8, 8)).apply(
      predictor.variables, images, method=PixelGLoMo.graphs)
  np.testing.assert_allclose(graphs, expected, rtol=1e-4, atol=1e-5)   # jitted vs eager
  assert np.all(graphs[:, :L][..., ~np.tril(np.ones((64, 64), bool), -1)] == 0)
  assert set(predictor.variables["params"]) == {"embedding", "graph_fw", "graph_bw"}
  with pytest.raises(ValueError, match="uint8"):
    predictor(images.astype(np.float32))
  with pytest.raises(ValueError, match="takes no tokenizer"):
    load_graph_predictor(summary["export"], tokenizer=object())


def test_trains_on_mock_tfds_imagenet_resized(tmp_path):
  import tensorflow_datasets as tfds
  rng = np.random.default_rng(4)
  records = [{"image": rng.integers(0, 256, (8, 8, 3)).astype(np.uint8), "label": i}
             for i in range(24)]
  config = config_for("unused", images=ImageSource("tfds", "imagenet_resized/32x32",
                                                   "train", reader="data_source"),
                      steps=2, export=False)
  # on the straight run's mesh of 2: its programs, from the suite's compilation
  # cache (conftest), as only the source of the images differs
  with tfds.testing.mock_data(as_data_source_fn=lambda *a, **k: records):
    summary = pretrain_images(config, str(tmp_path / "run"), devices=TWO)
  assert summary["step"] == 2 and np.isfinite(summary["eval"]["heldout"]["loss"])


def test_too_few_heldout_images_is_a_clear_error(tmp_path):
  path = write_images(tmp_path / "images.npz")
  with pytest.raises(ValueError, match="make no batch of 8"):
    pretrain_images(config_for(path, heldout_images=3), str(tmp_path / "run"), devices=ONE)


@pytest.mark.parametrize("arg", ["", "cpu", "tiny"])
def test_presets_build_configs(arg):
  from experiments.configs import images_pretrain
  config = ImagePretrainConfig.from_dict(images_pretrain.get_config(arg).to_dict())
  assert config.model.vocab_size == 256 and config.model.dim % config.model.num_heads == 0
  with pytest.raises(ValueError, match="unknown images_pretrain preset"):
    images_pretrain.get_config("nonsense")


def test_entry_point_runs_the_tiny_preset_and_names_mistakes(tmp_path):
  from test_entry_point_errors import assert_one_line, run
  path = write_images(tmp_path / "images.npz", n=128, size=16)
  base = ["-m", "experiments.pretrain_images",
          "--config=experiments/configs/images_pretrain.py:tiny"]
  out = run(base + [f"--config.images.location={path}", f"--workdir={tmp_path / 'run'}"])
  assert out.returncode == 0, out.stderr[-3000:]
  assert json.loads(out.stdout)["step"] == 6
  assert_one_line(run(base + [f"--workdir={tmp_path / 'other'}"]), "needs a location")
  assert_one_line(run(base + [f"--config.images.location={tmp_path / 'no.npz'}",
                              f"--workdir={tmp_path / 'other'}"]), "does not exist")
