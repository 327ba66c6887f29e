"""Image datasets: .npz and TFDS (under mock_data) give the same ImageSet;
downsampling, validation carving and clear errors."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow_datasets as tfds

from glomo_jax.images.data import (ImageSet, ImageSource, carve_validation, downsample,
                                   read_images, read_npz_images)


def some_images(n=6, size=4):
  rng = np.random.default_rng(0)
  return rng.integers(0, 256, (n, size, size, 3)).astype(np.uint8), rng.integers(0, 10, n)


def test_npz_and_tfds_give_the_same_images(tmp_path):
  images, labels = some_images()
  path = tmp_path / "x.npz"
  np.savez_compressed(path, images=images, labels=labels.astype(np.uint8))
  local = read_images(ImageSource("npz", str(path)))
  records = [{"image": im, "label": lb, "id": str(i)}
             for i, (im, lb) in enumerate(zip(images, labels))]
  with tfds.testing.mock_data(as_data_source_fn=lambda *a, **k: records):
    remote = read_images(ImageSource("tfds", "cifar10", split="train", reader="data_source"))
  for got in (local, remote):
    np.testing.assert_array_equal(got.images, images)
    np.testing.assert_array_equal(got.labels, labels)
    assert got.labels.dtype == np.int32 and got.shape == (4, 4)
  unlabelled = tmp_path / "u.npz"
  np.savez(unlabelled, images=images)
  assert read_npz_images(str(unlabelled)).labels is None
  sub = local.subset([4, 1])
  np.testing.assert_array_equal(sub.images, images[[4, 1]])
  np.testing.assert_array_equal(sub.labels, labels[[4, 1]])


def test_downsample_is_the_rounded_block_mean():
  images = np.arange(2 * 4 * 4 * 3, dtype=np.uint8).reshape(2, 4, 4, 3)
  small = downsample(images, 2)
  assert small.shape == (2, 2, 2, 3) and small.dtype == np.uint8
  block = images[1, 2:4, 0:2, 1].astype(float)
  assert small[1, 1, 0, 1] == np.rint(block.mean())
  assert downsample(images, 1) is images
  on_device = jax.jit(lambda x: downsample(x, 2))(jnp.asarray(images))
  np.testing.assert_array_equal(on_device, small)
  floats = downsample(images.astype(np.float32), 2)
  assert floats.dtype == np.float32 and floats[1, 1, 0, 1] == block.mean()
  with pytest.raises(ValueError, match="must divide"):
    downsample(images, 3)


def test_validation_is_a_seeded_disjoint_subset():
  train, val = carve_validation(20, 4, seed=1)
  assert len(val) == 4 and len(train) == 16
  assert not set(train) & set(val) and set(train) | set(val) == set(range(20))
  np.testing.assert_array_equal(carve_validation(20, 4, seed=1)[1], val)
  assert not np.array_equal(carve_validation(20, 4, seed=2)[1], val)
  with pytest.raises(ValueError, match="validation set of 20"):
    carve_validation(20, 20)


def test_bad_files_and_arrays_are_named(tmp_path):
  with pytest.raises(FileNotFoundError, match="does not exist"):
    read_npz_images(str(tmp_path / "missing.npz"))
  np.savez(tmp_path / "k.npz", pixels=np.zeros((1, 2, 2, 3), np.uint8))
  with pytest.raises(ValueError, match="no 'images' array"):
    read_npz_images(str(tmp_path / "k.npz"))
  np.savez(tmp_path / "f.npz", images=np.zeros((1, 2, 2, 3), np.float32))
  with pytest.raises(ValueError, match="f.npz: .*images: expected uint8"):
    read_npz_images(str(tmp_path / "f.npz"))
  (tmp_path / "t.npz").write_text("not a zip")
  with pytest.raises(ValueError, match="not a readable .npz"):
    read_npz_images(str(tmp_path / "t.npz"))
  with pytest.raises(ValueError, match="labels must be integers"):
    ImageSet(np.zeros((2, 2, 2, 3), np.uint8), np.zeros(3, np.int64))
  with pytest.raises(ValueError, match="needs a location"):
    read_images(ImageSource("npz", ""))
  with pytest.raises(ValueError, match="not one of"):
    ImageSource("png", "x")
