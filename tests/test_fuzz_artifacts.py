"""Property-based fuzzing of what runs write and read back (tests/fuzzing.py):
export directories, checkpoints and graph caches, damaged as a failing disk
or copy damages them (cut short, bytes overwritten, a file missing, the
manifest tampered with or of another format version, foreign arrays).
Each is read back exactly as written, or refused with a one-line error
naming it; a checkpoint falls back to the step before, a graph cache is
built again."""
import gc
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzzing import damaged_bytes, damaged_json, examples, json_bytes, read_or_input_error
from glomo_jax.export import load_graph_predictor
from glomo_jax.export.format import MANIFEST_FILENAME
from glomo_jax.train import Checkpointer, UnrestorableCheckpointError
from glomo_jax.graphs import WordGraphCache, cached_word_graphs
from test_graphs_predictor import DATASET, W


def files_under(root) -> list[str]:
  return sorted(os.path.relpath(os.path.join(d, f), root)
                for d, _, names in os.walk(root) for f in names)


@st.composite
def damage_a_file(draw, root, json_names=()):
  """Damages one file under `root` (cut, overwritten, removed, ...; a JSON
  file in `json_names` may instead get one field wrong); returns its name."""
  name = draw(st.sampled_from(files_under(root)))
  path = os.path.join(root, name)
  with open(path, "rb") as f:
    data = f.read()
  kind = draw(st.sampled_from(["bytes", "remove", "json"] if name in json_names
                              else ["bytes", "remove"]))
  if kind == "remove":
    os.remove(path)
    return name
  if kind == "json":
    import json  # noqa: PLC0415
    new = json_bytes(draw(damaged_json(json.loads(data))))
  else:
    new = draw(damaged_bytes(data, text=name.endswith(".json")))
  with open(path, "wb") as f:
    f.write(new)
  return name


def fresh_copy(source, target) -> str:
  shutil.rmtree(target, ignore_errors=True)
  shutil.copytree(source, target)
  return str(target)


def assert_same_tree(a, b) -> None:
  assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# ---- exports -------------------------------------------------------------------------
@settings(max_examples=examples(25))
@given(data=st.data())
def test_export_directories(tmp_path, tiny_export, data):
  reference = load_graph_predictor(tiny_export)
  export = fresh_copy(tiny_export, tmp_path / "export")
  name = data.draw(damage_a_file(export, json_names=(MANIFEST_FILENAME,)))

  def load():
    try:
      return load_graph_predictor(export)
    except FileNotFoundError as e:          # a file removed: named in one line
      assert not os.path.exists(os.path.join(export, name)) and name in str(e), str(e)
      assert "\n" not in str(e)
      return None
  loaded = read_or_input_error(load, export)
  if loaded is not None:
    assert loaded.config == reference.config and loaded.tokenizer == reference.tokenizer
    assert_same_tree(loaded.variables, reference.variables)


# ---- checkpoints ---------------------------------------------------------------------
def small_state(step: int, width: int = 3) -> dict:
  """A state of small arrays (stored inline) and one of 16 KiB (a chunk file)."""
  return {"params": {"w": jnp.arange(2 * width, dtype=jnp.float32).reshape(2, width) * step,
                     "b": jnp.full((width,), step, jnp.int32),
                     "big": jnp.sin(jnp.arange(4096, dtype=jnp.float32) * step)},
          "step": jnp.int32(step)}


def abstract(state) -> dict:
  return jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
  """Checkpoints of steps 1 and 2 of `small_state`, saved synchronously."""
  root = str(tmp_path_factory.mktemp("ckpt") / "checkpoints")
  ckpt = Checkpointer(root, keep=5, async_save=False)
  for step in (1, 2):
    ckpt.save(step, small_state(step), {"data": step})
  ckpt.close()
  return root


# orbax leaves its reads of damaged files as coroutines never awaited, and its
# event loop may close under a pending callback; collected before each example
# ends (below), Python's reports of them fall under these filters: noise here.
# They are young, so collecting generations 0 and 1 finds them; a full
# collection would walk the worker's whole heap of traced programs each time.
@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning",
                            "ignore::pytest.PytestUnraisableExceptionWarning")
@settings(max_examples=examples(15))
@given(data=st.data())
def test_checkpoints(tmp_path, checkpoints, data):
  """A damaged newest step restores exactly, or the step before it is used
  (and the damaged one moved aside); checkpoints of another state's arrays
  are an error naming them."""
  root = fresh_copy(checkpoints, tmp_path / "checkpoints")
  shutil.rmtree(root + "-unreadable", ignore_errors=True)
  foreign = data.draw(st.booleans()) and data.draw(st.booleans())
  if foreign:                      # the steps saved from a state of other shapes
    shutil.rmtree(root)
    other = Checkpointer(root, keep=5, async_save=False)
    for step in (1, 2):
      other.save(step, small_state(step, width=4), {"data": step})
    other.close()
  else:
    data.draw(damage_a_file(os.path.join(root, "2"), json_names=(
        "_CHECKPOINT_METADATA", "extra/metadata", "state/_METADATA", "state/_sharding")))
  ckpt = Checkpointer(root, keep=5, async_save=False)
  try:
    restored = ckpt.restore_latest(abstract(small_state(0)))
  except UnrestorableCheckpointError as e:
    assert foreign and "params/" in str(e) and "\n" not in str(e), str(e)
    return
  finally:
    ckpt.close()
    gc.collect(1)
  assert not foreign, "a checkpoint of other shapes was restored"
  state, extra, step = restored
  assert_same_tree(state, small_state(step))
  assert extra == {"data": step}
  if step == 1:
    assert os.listdir(root + "-unreadable") == ["2"]


# ---- graph caches ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def predictor(tiny_export):
  return load_graph_predictor(tiny_export)


CACHE_OPTIONS = {"dense": dict(dtype="float16"), "sparse": dict(dtype="uint8", top_k=2)}


@pytest.fixture(scope="module")
def caches(tmp_path_factory, predictor):
  """{kind: (root, the cache's graphs)} of DATASET for each of CACHE_OPTIONS."""
  out = {}
  for kind, options in CACHE_OPTIONS.items():
    root = str(tmp_path_factory.mktemp(f"cache_{kind}"))
    cache = cached_word_graphs(root, predictor, DATASET, W, **options)
    out[kind] = root, cache.get(range(len(DATASET)))[0]
  return out


@settings(max_examples=examples(25))
@given(kind=st.sampled_from(sorted(CACHE_OPTIONS)), data=st.data())
def test_graph_caches(tmp_path, predictor, caches, kind, data):
  """A damaged cache is refused when opened or when the damaged example is
  read (then removed); `cached_word_graphs` builds it again. Whatever is
  read equals what was written."""
  source, expected = caches[kind]
  root = fresh_copy(source, tmp_path / "caches")
  (key,) = os.listdir(root)
  path = os.path.join(root, key)
  data.draw(damage_a_file(path, json_names=("meta.json",)))
  graphs = read_or_input_error(lambda: WordGraphCache(path).get(range(len(DATASET)))[0], path)
  if graphs is not None:
    np.testing.assert_array_equal(graphs, expected)
  for _ in range(2):               # opened (rebuilt if found damaged), then read
    cache = cached_word_graphs(root, predictor, DATASET, W, **CACHE_OPTIONS[kind])
    graphs = read_or_input_error(lambda: cache.get(range(len(DATASET)))[0], path)
    if graphs is not None:
      break
  np.testing.assert_array_equal(graphs, expected)
