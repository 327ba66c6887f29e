"""A write that fails (no space, no permission) during a checkpoint, an
export, a graph cache or results.json is one OSError naming the file and
what was kept; what was written before stays intact and the next run uses
it. The failures are made by patching the writers: orbax's JSON item (a
save fails after its arrays are written), the `open` of one module (its
files take half a write, then the disk is full; or the open is refused) and
`os.replace`."""
import builtins
import errno
import json
import os
import sys

import jax
import pytest

from conftest import REPO
from glomo_jax import io as glomo_io
from glomo_jax.export import format as export_format
from glomo_jax.export import load_graph_predictor
from glomo_jax.pretraining import PretrainConfig, train_and_evaluate
from glomo_jax.classification import run_classification
from glomo_jax.graphs import cache_stores, cached_word_graphs
from test_non_finite_runs import with_steps
from test_classification_task import imdb_config
from test_graphs_predictor import DATASET, W

ONE = jax.devices()[:1]
NO_SPACE = OSError(errno.ENOSPC, "No space left on device")


class _HalfWritten:
  """A file opened for writing whose writes take half their bytes, then fail."""

  def __init__(self, file):
    self._file = file

  def write(self, data):
    self._file.write(data[:len(data) // 2])
    self._file.flush()
    raise OSError(errno.ENOSPC, "No space left on device")

  def __getattr__(self, name):
    return getattr(self._file, name)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self._file.close()


def full_disk(monkeypatch, module, at="write", only=""):
  """`module`'s `open` for writing (of files whose name starts with `only`)
  fails `at` 'open' (permission) or 'write' (no space, after half the bytes)."""
  def fake_open(path, mode="r", *args, **kwargs):
    if not any(c in mode for c in "wax") or not os.path.basename(path).startswith(only):
      return builtins.open(path, mode, *args, **kwargs)
    if at == "open":
      raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
    return _HalfWritten(builtins.open(path, mode, *args, **kwargs))
  monkeypatch.setattr(module, "open", fake_open, raising=False)


def snapshot(workdir) -> dict[str, bytes]:
  """Every file a run wrote that must survive a later failure."""
  out = {}
  for root, _, names in os.walk(workdir):
    for name in names:
      path = os.path.join(root, name)
      if any(part in path for part in ("/checkpoints/", "/best/", "/export/")) or \
          name == "results.json":
        with open(path, "rb") as f:
          out[os.path.relpath(path, workdir)] = f.read()
  return out


def leftovers(directory) -> list[str]:
  """Temporary files or directories of an unfinished write."""
  return [n for n in os.listdir(directory) if ".tmp" in n]


@pytest.mark.parametrize("at", ["open", "write", "replace"])
def test_an_atomic_write_that_fails_changes_nothing(tmp_path, monkeypatch, at):
  path = tmp_path / "results.json"
  glomo_io.write_json(path, {"accuracy": 0.5})
  before = path.read_bytes()
  if at == "replace":
    monkeypatch.setattr(glomo_io.os, "replace", lambda *a: (_ for _ in ()).throw(NO_SPACE))
  else:
    full_disk(monkeypatch, glomo_io, at)
  with pytest.raises(OSError) as error:
    glomo_io.write_json(path, {"accuracy": 0.9})
  message = str(error.value)
  assert f"cannot write {path}" in message and "previous file is unchanged" in message
  assert error.value.errno == (errno.EACCES if at == "open" else errno.ENOSPC)
  assert "\n" not in message and path.read_bytes() == before and not leftovers(tmp_path)


def export_files(workdir) -> dict[str, bytes]:
  return {k: v for k, v in snapshot(workdir).items() if k.startswith("export")}


def test_a_pretraining_run_on_a_full_disk_loses_no_checkpoint_or_export(tmp_path,
                                                                       monkeypatch):
  from orbax.checkpoint._src.handlers import json_checkpoint_handler  # noqa: PLC0415
  sys.path.insert(0, REPO)
  from experiments.configs import demo  # noqa: PLC0415
  cfg = demo.get_config("tiny")
  cfg.loop.num_steps, cfg.loop.checkpoint_every, cfg.loop.eval_every, cfg.loop.log_every = 2, 1, 100, 1
  workdir = str(tmp_path / "run")
  checkpoints = os.path.join(workdir, "checkpoints")

  def run(steps):
    cfg.loop.num_steps = steps
    return train_and_evaluate(PretrainConfig.from_dict(cfg.to_dict()), workdir, devices=ONE)
  run(2)
  export = export_files(workdir)
  assert export and sorted(os.listdir(checkpoints)) == ["1", "2"]

  async def no_space(*args):                       # the JSON item of every save
    raise NO_SPACE
  with monkeypatch.context() as patch:
    patch.setattr(json_checkpoint_handler.JsonCheckpointHandler, "_save_fn", no_space)
    with pytest.raises(OSError) as error:
      run(4)
  assert f"cannot write {checkpoints}" in str(error.value)
  assert "kept (last: step 2)" in str(error.value) and "\n" not in str(error.value)
  assert [d for d in sorted(os.listdir(checkpoints)) if d.isdigit()] == ["1", "2"]
  assert export_files(workdir) == export

  with monkeypatch.context() as patch:             # training ends; the export fails
    full_disk(patch, export_format)
    with pytest.raises(OSError) as error:
      run(4)
  assert f"cannot write {os.path.join(workdir, 'export')}" in str(error.value)
  assert "the export already there is unchanged" in str(error.value)
  assert export_files(workdir) == export and not leftovers(workdir)
  assert load_graph_predictor(os.path.join(workdir, "export")).metadata["step"] == 2

  summary = run(4)                                 # the next run: nothing lost or redone
  assert summary["first_step"] == 4 and summary["step"] == 4
  assert load_graph_predictor(os.path.join(workdir, "export")).metadata["step"] == 4


def test_results_json_on_a_full_disk(tmp_path, monkeypatch):
  config = imdb_config(tmp_path)
  config = with_steps(config, 2)
  workdir = str(tmp_path / "run")
  results = os.path.join(workdir, "results.json")
  run_classification(config, workdir, devices=ONE)
  before = snapshot(workdir)
  with monkeypatch.context() as patch:
    full_disk(patch, glomo_io, only="results.json")
    with pytest.raises(OSError) as error:          # the finished run, evaluated again
      run_classification(config, workdir, devices=ONE)
  assert f"cannot write {results}" in str(error.value)
  assert "previous file is unchanged" in str(error.value)
  assert snapshot(workdir) == before and not leftovers(workdir)
  again = run_classification(config, workdir, devices=ONE)   # the next run writes it
  with open(results, encoding="utf-8") as f:
    assert json.load(f)["wall_time_s"] == again["wall_time_s"]


def test_a_graph_cache_build_on_a_full_disk(tmp_path, monkeypatch, tiny_export):
  predictor = load_graph_predictor(tiny_export)
  root = str(tmp_path / "caches")
  other = cached_word_graphs(root, predictor, DATASET, W, dtype="float32")
  other_bytes = {n: open(os.path.join(other.path, n), "rb").read()
                 for n in os.listdir(other.path)}
  calls = []

  def put(self, i, block):
    calls.append(i)
    if len(calls) == 3:
      raise NO_SPACE
    return original(self, i, block)
  original = cache_stores.DenseStore.put
  with monkeypatch.context() as patch:
    patch.setattr(cache_stores.DenseStore, "put", put)
    with pytest.raises(OSError) as error:
      cached_word_graphs(root, predictor, DATASET, W)
  assert "cannot write" in str(error.value) and "no partial cache was left" in str(error.value)
  assert sorted(os.listdir(root)) == [os.path.basename(other.path)]   # no partial cache
  assert {n: open(os.path.join(other.path, n), "rb").read()
          for n in os.listdir(other.path)} == other_bytes
  built = cached_word_graphs(root, predictor, DATASET, W)   # the next run builds it
  assert len(built) == len(DATASET) and built.get(range(len(DATASET)))[0].any()
