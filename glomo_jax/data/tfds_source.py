"""The one TFDS reader: records of a (shard of a) prepared TFDS split.

Used by the pretraining corpus (`data.corpus`) and the downstream tasks
(`text.readers`). Two readers: ``data_source`` (`builder.as_data_source`:
random access, needs the ArrayRecord file format, no TensorFlow) and ``tf``
(`builder.as_dataset` + `tfds.as_numpy`: any file format, needs TensorFlow);
``auto`` picks ``data_source`` when the prepared dataset is ArrayRecord.
Shard k of n is ``tfds.even_splits(split, n)[k]`` with the tf reader and the
same contiguous block of records with the data-source reader.
"""
from __future__ import annotations

import importlib
from typing import Any, Iterable, Mapping

READERS = ("auto", "data_source", "tf")


def tfds_records(name: str, split: str, *, data_dir: str | None = None,
                 reader: str = "auto", download: bool = False, shard_index: int = 0,
                 num_shards: int = 1) -> Iterable[Mapping[str, Any]]:
  """Records (dicts of numpy values or str) of shard `shard_index` of
  `num_shards` of a TFDS split, in order.

  Args:
    name: dataset name with config / version if needed ('glue/mnli').
    split: TFDS split (slicing syntax allowed).
    data_dir: TFDS data directory (None: TFDS's default).
    reader: 'auto', 'data_source' or 'tf'.
    download: call `download_and_prepare` first (default: expect a prepared
      dataset; prepare it in a separate step).

  Raises:
    ValueError: an unknown reader. ImportError: the tf reader without TensorFlow.
  """
  if reader not in READERS:
    raise ValueError(f"unknown TFDS reader {reader!r}; choose one of {READERS}")
  import tensorflow_datasets as tfds  # heavy; only for this source

  builder = tfds.builder(name, data_dir=data_dir)
  if download:
    builder.download_and_prepare()
  if reader == "auto":
    fmt = getattr(builder.info, "file_format", None)
    reader = "data_source" if getattr(fmt, "value", fmt) == "array_record" else "tf"
  if reader == "data_source":
    source = builder.as_data_source(split=split)
    n = len(source)
    start, stop = n * shard_index // num_shards, n * (shard_index + 1) // num_shards
    return (source[i] for i in range(start, stop))
  try:
    importlib.import_module("tensorflow")  # tfds's tf.data reader needs it
  except ImportError as e:
    raise ImportError(
        f"reading tfds {name!r} with the 'tf' reader (its file format is "
        f"{getattr(builder.info, 'file_format', '?')}) needs TensorFlow: install "
        "tensorflow-cpu (the 'tf' extra), or prepare the dataset with "
        "file_format='array_record' and use the 'data_source' reader") from e
  if num_shards > 1:
    split = tfds.even_splits(split, num_shards)[shard_index]
  return tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False))
