"""Image datasets: uint8 arrays [N, H, W, 3] with optional integer labels.

Two sources, one spec (`ImageSource`):

* ``tfds``: a TFDS image dataset with features ``image`` (and ``label``),
  e.g. ``imagenet_resized/32x32`` (pretraining) or ``cifar10`` (transfer);
  read with the one TFDS reader (`glomo_jax.data.tfds_source`).
* ``npz``: a NumPy ``.npz`` file with ``images`` uint8 [N, H, W, 3] and,
  optionally, ``labels`` [N] (e.g. the Tiny ImageNet 32×32 and CIFAR-10
  arrays of ../shared/data). Read without pickle.

`downsample` box-averages images by an integer factor (the CPU-scale
pretraining reads 16×16 images); `carve_validation` holds out a random,
seeded subset.
"""
from __future__ import annotations

import dataclasses
import os
import struct
import zipfile
import zlib
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from glomo_jax.data.tfds_source import tfds_records
from glomo_jax.errors import InputError

SOURCES = ("tfds", "npz")


@dataclasses.dataclass(frozen=True)
class ImageSource:
  """Where a split's images come from.

  Attributes:
    source: 'tfds' or 'npz'.
    location: the TFDS dataset name, or the .npz path.
    split: the TFDS split (slicing allowed, e.g. 'train[:10%]'); not read for npz.
    data_dir: TFDS data directory (None: TFDS's default).
    reader: TFDS reader, 'auto' | 'data_source' | 'tf'.
  """
  source: str = "npz"
  location: str = ""
  split: str = "train"
  data_dir: str | None = None
  reader: str = "auto"

  def __post_init__(self):
    if self.source not in SOURCES:
      raise ValueError(f"image source {self.source!r} is not one of {list(SOURCES)}")

  def describe(self) -> str:
    if self.source == "npz":
      return self.location
    return f"tfds {self.location!r} split {self.split!r}"


@dataclasses.dataclass
class ImageSet:
  """images uint8 [N, H, W, 3]; labels int32 [N] or None."""
  images: np.ndarray
  labels: np.ndarray | None = None

  def __post_init__(self):
    check_image_array(self.images, "images")
    if self.labels is not None:
      self.labels = np.asarray(self.labels)
      if self.labels.shape != (len(self.images),) or \
          not np.issubdtype(self.labels.dtype, np.integer):
        raise ValueError(f"labels must be integers [{len(self.images)}], got "
                         f"{self.labels.dtype} {self.labels.shape}")
      self.labels = self.labels.astype(np.int32)

  def __len__(self) -> int:
    return len(self.images)

  @property
  def shape(self) -> tuple[int, int]:
    return tuple(self.images.shape[1:3])

  def subset(self, indices: Sequence[int]) -> "ImageSet":
    indices = np.asarray(indices, np.int64)
    return ImageSet(self.images[indices],
                    None if self.labels is None else self.labels[indices])


def check_image_array(images, where: str) -> None:
  """uint8 [N, H, W, 3] with N ≥ 1, or a ValueError naming `where`."""
  if not isinstance(images, np.ndarray) or images.dtype != np.uint8 or \
      images.ndim != 4 or images.shape[-1] != 3 or len(images) == 0:
    got = (f"{images.dtype} {images.shape}" if isinstance(images, np.ndarray)
           else type(images).__name__)
    raise ValueError(f"{where}: expected uint8 images [N, H, W, 3] with N >= 1, got {got}")


def read_npz_images(path: str) -> ImageSet:
  """`images` (and `labels` if present) of an .npz file.

  Raises:
    FileNotFoundError: no such file.
    InputError: not an .npz archive, damaged or cut short, without an
      `images` array, or arrays of the wrong type or shape.
  """
  if not os.path.exists(path):
    raise FileNotFoundError(f"image file {path} does not exist")
  try:
    data = np.load(path, allow_pickle=False)
    if not isinstance(data, np.lib.npyio.NpzFile):
      raise ValueError("a single .npy array, not an .npz archive of 'images' (and 'labels')")
    with data:
      if "images" not in data:
        raise ValueError(f"no 'images' array (it has {sorted(data.files)[:20]})")
      images = data["images"]
      labels = data["labels"] if "labels" in data else None
    return ImageSet(images, labels)
  except (OSError, ValueError, EOFError, NotImplementedError, struct.error,
          zipfile.BadZipFile, zlib.error) as e:
    if isinstance(e, FileNotFoundError):
      raise
    raise InputError(path, f"not a readable .npz of images: {e}") from None


def read_tfds_images(name: str, split: str, *, data_dir: str | None = None,
                     reader: str = "auto") -> ImageSet:
  """Every record's `image` (and `label`, if the records have one)."""
  images, labels = [], []
  for record in tfds_records(name, split, data_dir=data_dir, reader=reader):
    images.append(np.asarray(record["image"]))
    if "label" in record:
      labels.append(int(record["label"]))
  if not images:
    raise ValueError(f"tfds {name!r} split {split!r} has no images")
  stacked = np.stack(images)
  try:
    return ImageSet(stacked, np.asarray(labels, np.int32) if labels else None)
  except ValueError as e:
    raise ValueError(f"tfds {name!r} split {split!r}: {e}") from None


def read_images(source: ImageSource) -> ImageSet:
  """The images of `source` (`ImageSource`)."""
  if not source.location:
    raise ValueError("the image source needs a location: a TFDS name (e.g. "
                     "imagenet_resized/32x32) or an .npz path")
  if source.source == "npz":
    return read_npz_images(source.location)
  return read_tfds_images(source.location, source.split, data_dir=source.data_dir,
                          reader=source.reader)


def downsample(images, factor: int):
  """Box average over factor × factor blocks: [N, H, W, C] -> [N, H / factor,
  W / factor, C], rounded back to uint8 for uint8 input (float input stays
  float). numpy in, numpy out; a jax array (also under jit) gives a jax
  array. Factor 1 returns the input."""
  if factor == 1:
    return images
  n, h, w, c = images.shape
  if factor < 1 or h % factor or w % factor:
    raise ValueError(f"cannot downsample {h}×{w} images by {factor}: the factor must "
                     "divide both sides")
  xp = jnp if isinstance(images, jax.Array) else np
  blocks = images.reshape(n, h // factor, factor, w // factor, factor, c)
  mean = blocks.astype(xp.float32).mean(axis=(2, 4))
  return xp.rint(mean).astype(xp.uint8) if images.dtype == xp.uint8 else mean


def carve_validation(count: int, size: int, seed: int = 0
                     ) -> tuple[np.ndarray, np.ndarray]:
  """(train indices, validation indices) of `count` items: `size` drawn at
  random with `seed` for validation, the rest for training, each sorted."""
  if not 0 < size < count:
    raise ValueError(f"a validation set of {size} needs more than {size} images "
                     f"(have {count})")
  order = np.random.default_rng(seed).permutation(count)
  return np.sort(order[size:]), np.sort(order[:size])
