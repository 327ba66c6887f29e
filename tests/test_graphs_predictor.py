"""End to end with a real tiny exported predictor: word graphs, long inputs,
the dataset cache, and GraphTransfer on the result."""
import copy
import functools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glomo_jax import ModelConfig
from glomo_jax.data.tokenizer import train_tokenizer
from glomo_jax.export import export_graph_predictor, load_graph_predictor
from glomo_jax.graphs.task_graphs import TaskGraphs
from glomo_jax.graphs import cached_word_graphs, encode_word_lists, word_graphs
from glomo_jax.graphs import cache as cache_lib
from glomo_jax.transfer import GraphTransfer
from conftest import random_variables

SENTENCES = ["the cat sat on the mat .", "a dog ran in the park .",
             "the bird sang a song .", "my cat likes the dog .",
             "unbelievable things happened yesterday ."]
DATASET = [s.split() for s in SENTENCES] + [
    "the dog sang .".split(), "a cat".split(), ["park"],
    "the mat on the cat sat in the park with a dog and a bird .".split()]
W = 8


@pytest.fixture(scope="module")
def predictor(tmp_path_factory):
  """A GLoMo(tiny) graph predictor, exported and loaded back; a 30-piece
  unigram tokenizer splits most words into several pieces."""
  config = ModelConfig.tiny()
  root = tmp_path_factory.mktemp("transfer")
  tokenizer = train_tokenizer(SENTENCES, 30, str(root / "tok") + "/")
  path = export_graph_predictor(str(root / "export"), config, random_variables(config, graphs_only=True),
                                tokenizer)
  return load_graph_predictor(path)


def reference_word_graphs(predictor, word_lists, max_words, self_loops=False):
  """Piece graphs from predict, pooled to words with explicit loops."""
  tok = predictor.tokenizer
  tokens, piece_mask, unit, word_mask = encode_word_lists(tok, word_lists, max_words)
  pieces = np.asarray(predictor.predict(predictor.variables, tokens, piece_mask),
                      np.float64)
  out = np.zeros(pieces.shape[:3] + (max_words, max_words))
  for b in range(len(word_lists)):
    for u in range(max_words):
      rows = np.flatnonzero(unit[b] == u)
      if not rows.size:
        continue
      row = pieces[b, :, :, rows].mean(0)                      # [2L, K, P]
      for v in range(max_words):
        if v != u or self_loops:
          out[b, :, :, u, v] = row[..., unit[b] == v].sum(-1)
  total = out.sum(-1, keepdims=True)
  return np.where(total > 0, out / np.where(total > 0, total, 1), 0), word_mask


def test_word_graphs_follow_the_alignment_rule(predictor):
  words = DATASET[:4] + DATASET[-1:]
  graphs, mask = word_graphs(predictor, None, words, W)
  c = predictor.config
  assert graphs.shape == (5, 2 * c.num_graph_layers, c.num_heads, W, W)
  assert graphs.dtype == np.float32
  np.testing.assert_array_equal(mask.sum(1), [min(len(x), W) for x in words])
  expected, expected_mask = reference_word_graphs(predictor, words, W)
  np.testing.assert_array_equal(mask, expected_mask)
  np.testing.assert_allclose(graphs, expected, rtol=1e-5, atol=1e-6)
  with_loops, _ = word_graphs(predictor, None, words, W, self_loops=True)
  np.testing.assert_allclose(with_loops, reference_word_graphs(predictor, words, W, True)[0],
                             rtol=1e-5, atol=1e-6)
  assert np.trace(with_loops, axis1=-2, axis2=-1).max() > 0.01
  # several pieces per word really happen, and every head has weight
  _, _, unit, _ = encode_word_lists(predictor.tokenizer, words, W)
  assert np.bincount(unit[0][unit[0] >= 0]).max() > 1
  assert np.all(graphs.sum((-1, -2)) > 0)
  sums = graphs.sum(-1)
  assert np.all((np.abs(sums - 1) < 1e-5) | (sums == 0))
  pad = ~mask
  assert np.all(graphs.transpose(0, 3, 1, 2, 4)[pad] == 0)     # padding rows
  assert np.all(graphs.transpose(0, 4, 1, 2, 3)[pad] == 0)     # padding columns
  # forward layers read earlier words, backward later ones (no diagonal)
  L = c.num_graph_layers
  assert np.all(np.triu(graphs[:, :L]) == 0)
  assert np.all(np.tril(graphs[:, L:]) == 0)


def test_long_input_runs_and_is_causal(predictor):
  """The predictor has no position embeddings: it runs past the authors'
  200-token pretraining windows. Forward graphs are causal, so the first words
  of a long text get the same forward graphs as those words alone."""
  rng = np.random.default_rng(0)
  vocab = sorted({w for s in SENTENCES for w in s.split()})
  long_words = [vocab[i] for i in rng.integers(0, len(vocab), 160)]
  tokens, _, _, _ = encode_word_lists(predictor.tokenizer, [long_words], 160)
  assert tokens.shape[1] > 200
  graphs, mask = word_graphs(predictor, None, [long_words], 160)
  assert mask.all() and np.isfinite(graphs).all()
  sums = graphs.sum(-1)
  assert np.all((np.abs(sums - 1) < 1e-5) | (sums == 0))
  assert np.count_nonzero(sums[..., 100:]) > 0
  L, n = predictor.config.num_graph_layers, 10
  prefix, _ = word_graphs(predictor, None, [long_words[:n]], n)
  np.testing.assert_allclose(graphs[:, :L, :, :n, :n], prefix[:, :L], rtol=1e-4,
                             atol=1e-5)


def test_cache_float32_equals_on_the_fly_and_is_reused(predictor, tmp_path,
                                                       monkeypatch):
  batch = 4
  cache = cached_word_graphs(str(tmp_path), predictor, DATASET, W, dtype="float32",
                             batch_size=batch)
  assert len(cache) == len(DATASET)
  for start in range(0, len(DATASET), batch):
    fly, fly_mask = word_graphs(predictor, None, DATASET[start:start + batch], W)
    got, got_mask = cache.get(range(start, min(start + batch, len(DATASET))))
    np.testing.assert_allclose(got, fly, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(got_mask, fly_mask)
  last, _ = cache.get([len(DATASET) - 1])
  np.testing.assert_array_equal(cache.get([-1])[0], last)
  np.testing.assert_array_equal(cache.get(slice(-1, None))[0], last)
  with pytest.raises(IndexError):
    cache.get([len(DATASET)])
  # a batch's own length: the same graphs, only that much allocated
  short = [i for i, x in enumerate(DATASET) if len(x) <= 3]
  cut, cut_mask = cache.get(short, length=3)
  full, full_mask = cache.get(short)
  np.testing.assert_array_equal(cut, full[..., :3, :3])
  assert not full[..., 3:, :].any() and not full_mask[:, 3:].any()
  with pytest.raises(ValueError, match="shorter than an example"):
    cache.get(range(len(DATASET)), length=1)
  # only the real words' blocks are stored
  per = 2 * predictor.config.num_graph_layers * predictor.config.num_heads
  assert cache.meta["total_values"] == per * sum(min(len(x), W) ** 2 for x in DATASET)

  def no_build(*args, **kwargs):
    raise AssertionError("an existing cache was rebuilt")
  monkeypatch.setattr(cache_lib, "build_cache", no_build)
  again = cached_word_graphs(str(tmp_path), predictor, DATASET, W, dtype="float32")
  assert again.path == cache.path


def test_accelerator_batch_shapes_give_the_graphs_of_the_cpu_shapes(predictor, tmp_path,
                                                                    monkeypatch):
  """On an accelerator the build pads pieces and words to multiples of 128
  (few shapes to compile); the graphs are those of a CPU's tight shapes."""
  from glomo_jax.graphs import cache_build, encode, shapes as shape_policy  # noqa: PLC0415
  assert shape_policy.piece_multiple("cpu") == 16
  assert shape_policy.piece_multiple("gpu") == shape_policy.piece_multiple("tpu") == 128
  assert [shape_policy.unit_width(n, 40, 32, "cpu") for n in (1, 32, 33, 41)] == [32, 32, 40, 40]
  assert [shape_policy.unit_width(n, 400, 32, "gpu") for n in (3, 130, 401)] == [128, 256, 400]
  shapes = []
  dispatch = cache_build.device_unit_graphs

  def recording(predictor, arrays, num_units, *args, **kwargs):
    shapes.append((len(arrays[0]), arrays[0].shape[1], num_units))      # (B, P, W)
    return dispatch(predictor, arrays, num_units, *args, **kwargs)
  monkeypatch.setattr(cache_build, "device_unit_graphs", recording)
  cpu = cached_word_graphs(str(tmp_path / "cpu"), predictor, DATASET, 200, dtype="float32",
                           batch_size=3)
  cpu_shapes, shapes[:] = set(shapes), []
  on_cpu = shape_policy.piece_multiple
  monkeypatch.setattr(encode, "piece_multiple", lambda backend=None: on_cpu("gpu"))
  monkeypatch.setattr(shape_policy, "unit_width", functools.partial(shape_policy.unit_width,
                                                                    backend="gpu"))
  accelerator = cached_word_graphs(str(tmp_path / "gpu"), predictor, DATASET, 200,
                                   dtype="float32", batch_size=3)
  assert len(cpu_shapes) > 1 and all(p % 16 == 0 and w == 32 for _, p, w in cpu_shapes)
  assert set(shapes) == {(3, 128, 128)}
  np.testing.assert_allclose(accelerator.get(range(len(DATASET)))[0],
                             cpu.get(range(len(DATASET)))[0], rtol=1e-6, atol=1e-7)


def test_cache_float16_within_half_precision(predictor, tmp_path, monkeypatch, caplog):
  from glomo_jax.graphs import cache_build  # noqa: PLC0415
  monkeypatch.setattr(cache_lib, "build_cache",
                      functools.partial(cache_build.build_cache, progress_every_s=0))
  with caplog.at_level("INFO", logger=cache_build.__name__):
    cache = cached_word_graphs(str(tmp_path), predictor, DATASET, W, batch_size=4)
  batches = -(-len(DATASET) // 4)  # a progress line after every batch but the last
  progress = [r.getMessage() for r in caplog.records if "examples/s" in r.getMessage()]
  assert len(progress) == batches - 1 and f"4/{len(DATASET)} examples" in progress[0]
  assert cache.meta["dtype"] == "float16"
  fly, _ = word_graphs(predictor, None, DATASET[:4], W)
  got, _ = cache.get(range(4))
  assert not np.array_equal(got, fly)                          # it is rounded
  np.testing.assert_allclose(got, fly, rtol=2.0 ** -11, atol=2.0 ** -25)
  stored, _ = cache.get(range(4), dtype="float16")               # as stored, not converted
  assert stored.dtype == np.float16
  np.testing.assert_array_equal(stored.astype(np.float32), got)
  np.testing.assert_array_equal(stored, fly.astype(np.float16))  # rounded on the device


def test_stale_caches_are_never_reused(predictor, tmp_path):
  base = cached_word_graphs(str(tmp_path), predictor, DATASET[:3], W, dtype="float32")
  other_data = cached_word_graphs(str(tmp_path), predictor,
                                  DATASET[:2] + [DATASET[3]], W, dtype="float32")
  other_width = cached_word_graphs(str(tmp_path), predictor, DATASET[:3], W + 1,
                                   dtype="float32")
  other_export = copy.copy(predictor)
  other_export.manifest = dict(predictor.manifest, content_sha256="0" * 64)
  other_model = cached_word_graphs(str(tmp_path), other_export, DATASET[:3], W,
                                   dtype="float32")
  paths = {base.path, other_data.path, other_width.path, other_model.path}
  assert len(paths) == 4
  np.testing.assert_array_equal(other_data.get([2])[0],
                                word_graphs(predictor, None, [DATASET[3]], W)[0])
  # a cache whose manifest does not match the request (its name) is built again
  expected = base.get(range(3))[0]
  meta_path = os.path.join(base.path, "meta.json")
  with open(meta_path) as f:
    meta = json.load(f)
  meta["content_sha256"] = "f" * 64
  with open(meta_path, "w") as f:
    json.dump(meta, f)
  again = cached_word_graphs(str(tmp_path), predictor, DATASET[:3], W, dtype="float32")
  assert again.meta["content_sha256"] == predictor.manifest["content_sha256"]
  np.testing.assert_array_equal(again.get(range(3))[0], expected)
  unkeyed = copy.copy(predictor)
  unkeyed.manifest = {}
  with pytest.raises(ValueError, match="content_sha256"):
    cached_word_graphs(str(tmp_path), unkeyed, DATASET[:3], W)


def test_graph_transfer_on_word_graphs(predictor):
  words = DATASET[:4]
  graphs, mask = word_graphs(predictor, None, words, W)
  vocab = {w: i for i, w in enumerate(sorted({w for s in words for w in s}))}
  ids = np.zeros((len(words), W), np.int32)
  for b, s in enumerate(words):
    ids[b, :len(s)] = [vocab[w] for w in s[:W]]
  table = np.random.default_rng(0).standard_normal((len(vocab), 6)).astype(np.float32)
  h = jnp.asarray(table)[ids]
  module = GraphTransfer(num_layers=predictor.config.num_graph_layers)
  variables = jax.jit(module.init)(jax.random.PRNGKey(0), h, graphs, mask)
  out = np.asarray(jax.jit(module.apply)(variables, h, graphs, mask))
  assert out.shape == (len(words), W, 12) and np.isfinite(out).all()
  np.testing.assert_array_equal(out[..., :6], h)
  # the transferred graphs matter: other graphs give other outputs at real words
  shuffled = np.asarray(jax.jit(module.apply)(variables, h, graphs[::-1], mask[::-1]))
  assert np.abs(shuffled - out)[mask & mask[::-1]].max() > 1e-4


def test_a_foreign_tokenizer_is_refused(predictor, tmp_path):
  other = train_tokenizer(SENTENCES[::-1] + ["zebra"], 28, str(tmp_path) + "/")
  assert other.fingerprint != predictor.tokenizer.fingerprint
  with pytest.raises(ValueError, match="vocabulary mismatch"):
    word_graphs(predictor, other, DATASET[:2], W)


def test_cache_of_raw_texts_equals_text_graphs(predictor, tmp_path):
  """The predictor reads raw texts (case, spacing, punctuation as written);
  its pieces go to the task's words by characters; words after max_words
  are cut with the text after them."""
  from glomo_jax.text.words import tokenize_with_offsets  # noqa: PLC0415
  from glomo_jax.graphs import encode_texts, text_graphs  # noqa: PLC0415
  texts = ["The cat sat on the mat.", "A dog  ran, in the Park!", "Unbelievable things."]
  words, spans = zip(*(tokenize_with_offsets(t) for t in texts))
  spans = [np.asarray(s) for s in spans]
  cache = cached_word_graphs(str(tmp_path), predictor, words, 5, dtype="float32",
                             texts=texts, word_spans=spans)
  fly, mask = text_graphs(predictor, None, texts, spans, 5)
  np.testing.assert_allclose(cache.get(range(3))[0], fly, rtol=1e-6, atol=1e-7)
  assert cache.meta["text_fingerprint"] and mask.sum(1).tolist() == [5, 5, 3]
  by_words = cached_word_graphs(str(tmp_path), predictor, words, 5, dtype="float32")
  assert by_words.path != cache.path and by_words.meta["text_fingerprint"] is None
  assert not np.allclose(by_words.get(range(3))[0], fly, atol=1e-3)   # case, spacing
  # the text is cut after the 5th word ("the"): its pieces end there
  tokens, _, unit, _ = encode_texts(predictor.tokenizer, texts[:1], spans[:1], 5)
  assert predictor.tokenizer.decode(tokens[0]).endswith("he cat sat on the")  # "T": unk
  assert unit[0][tokens[0] != predictor.tokenizer.pad_id].max() == 4
  with pytest.raises(ValueError, match="both texts and word_spans"):
    cached_word_graphs(str(tmp_path), predictor, words, 5, texts=texts)
  with pytest.raises(ValueError, match="2 words but 3 spans"):
    cached_word_graphs(str(tmp_path), predictor, [["a", "b"]], 5, texts=["a b c"],
                       word_spans=[np.array([[0, 1], [2, 3], [4, 5]])])


def test_sparse_cache_equals_dense_where_k_covers_the_nonzeros(predictor, tmp_path):
  dense = cached_word_graphs(str(tmp_path), predictor, DATASET, W)
  full, mask = dense.get(range(len(DATASET)))
  k = int(np.count_nonzero(full, axis=-1).max())
  assert 1 < k < W
  sparse = cached_word_graphs(str(tmp_path), predictor, DATASET, W, top_k=k)
  assert sparse.path != dense.path and "top_k" not in dense.meta
  got, got_mask = sparse.get(range(len(DATASET)))
  np.testing.assert_array_equal(got, full)                      # bit for bit
  np.testing.assert_array_equal(sparse.get(range(len(DATASET)), dtype="float16")[0],
                                dense.get(range(len(DATASET)), dtype="float16")[0])
  np.testing.assert_array_equal(got_mask, mask)
  assert sparse.meta["mass_kept"]["mean"] == 1 and sparse.meta["mass_kept"]["min"] == 1
  rows = int(np.prod(sparse.graph_prefix)) * sum(min(len(w), W) for w in DATASET)
  assert sparse.meta["total_values"] == np.count_nonzero(full)   # only nonzero sources
  assert sparse.nbytes == sparse.meta["total_values"] * 3 + rows  # float16 + uint8, a count
  # the same mixtures and fused features
  h = jnp.asarray(np.random.default_rng(1).standard_normal((len(DATASET), W, 6)), jnp.float32)
  module = GraphTransfer(num_layers=predictor.config.num_graph_layers)
  variables = module.init(jax.random.PRNGKey(0), h, full, mask)
  np.testing.assert_array_equal(module.apply(variables, h, got, got_mask),
                                module.apply(variables, h, full, mask))


def test_sparse_cache_keeps_each_rows_top_k_and_reports_what_it_dropped(predictor, tmp_path):
  dense = cached_word_graphs(str(tmp_path), predictor, DATASET, W, dtype="float32")
  full, _ = dense.get(range(len(DATASET)))
  sparse = cached_word_graphs(str(tmp_path), predictor, DATASET, W, top_k=2,
                              dtype="float32")
  got, _ = sparse.get(range(len(DATASET)))
  want = np.zeros_like(full)
  kept = []
  for index in np.ndindex(full.shape[:-1]):
    row = full[index]
    if not row.any():
      continue
    top = np.argsort(-row, kind="stable")[:2]
    share = row[top].sum() / row.sum()
    want[index][top] = row[top] / (row[top].sum() if np.count_nonzero(row) > 2 else 1)
    kept.append(share if np.count_nonzero(row) > 2 else 1.0)
  ties = np.count_nonzero(got, axis=-1) != np.count_nonzero(want, axis=-1)
  assert not ties.any()
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
  assert min(kept) < 1
  np.testing.assert_allclose(sparse.meta["mass_kept"]["mean"], np.mean(kept), rtol=1e-5)
  np.testing.assert_allclose(sparse.meta["mass_kept"]["min"], min(kept), rtol=1e-5)
  assert sparse.meta["mass_kept"]["rows"] == len(kept)
  with pytest.raises(ValueError, match="top_k"):
    cached_word_graphs(str(tmp_path), predictor, DATASET, W, top_k=0)


def test_uint8_cache_reads_back_rows_of_levels(predictor, tmp_path):
  exact = cached_word_graphs(str(tmp_path), predictor, DATASET, W, top_k=3, dtype="float32")
  levels = cached_word_graphs(str(tmp_path), predictor, DATASET, W, top_k=3, dtype="uint8")
  assert levels.path != exact.path and levels.meta["format_version"] == 2
  want, mask = exact.get(range(len(DATASET)))
  got, got_mask = levels.get(range(len(DATASET)))
  np.testing.assert_array_equal(got_mask, mask)
  assert levels.nbytes == levels.meta["total_values"] * 2 + levels.row_offsets[-1]
  top = want.max(-1, keepdims=True)
  # each weight within max / 510 before the renormalisation q / Σq: ≤ 3 · max / 510 after
  assert (np.abs(got - want) <= 3 * top / 510 + 1e-7).all()
  assert not np.array_equal(got, want)
  sums = got.sum(-1)
  np.testing.assert_allclose(sums[want.sum(-1) > 0], 1, rtol=1e-6)
  assert (sums[want.sum(-1) == 0] == 0).all()
  assert levels.meta["mass_kept"]["mean"] <= exact.meta["mass_kept"]["mean"]
  # a task's batches read the levels as float16, padding rows zero
  batch = TaskGraphs({"train": {"text": levels}}).batch(
      "train", "text", np.array([1, -1]), np.array([mask[1].sum(), 0]), W)
  assert batch.dtype == np.float16 and not batch[1].any()
  np.testing.assert_array_equal(batch[0], got[1].astype(np.float16))
  with pytest.raises(ValueError, match="read as floats"):
    levels.get([0], dtype="uint8")
  with pytest.raises(ValueError, match="'uint8' with top_k"):
    cached_word_graphs(str(tmp_path), predictor, DATASET, W, dtype="uint8")


def test_a_damaged_cache_is_found_and_built_again(predictor, tmp_path, caplog):
  from glomo_jax.errors import InputError  # noqa: PLC0415
  cache = cached_word_graphs(str(tmp_path), predictor, DATASET, W, dtype="float32")
  expected = cache.get(range(len(DATASET)))[0]
  graphs = os.path.join(cache.path, "graphs.npy")
  size = os.path.getsize(graphs)
  with open(graphs, "r+b") as f:                  # cut short: found when opened
    f.truncate(size - 7)
  with caplog.at_level("WARNING", logger=cache_lib.__name__):
    again = cached_word_graphs(str(tmp_path), predictor, DATASET, W, dtype="float32")
  assert "damaged graph cache" in caplog.text and "cut short" in caplog.text
  np.testing.assert_array_equal(again.get(range(len(DATASET)))[0], expected)
  with open(graphs, "r+b") as f:                  # a byte changed: found when read
    f.seek(size - 5)
    byte = f.read(1)
    f.seek(size - 5)
    f.write(bytes([byte[0] ^ 0x40]))
  opened = cached_word_graphs(str(tmp_path), predictor, DATASET, W, dtype="float32")
  opened.get(range(len(DATASET) - 1))              # the other examples read fine
  with pytest.raises(InputError, match=rf"{cache.path}: damaged graph cache: .*example 8"):
    opened.get([len(DATASET) - 1])
  assert not os.path.exists(cache.path)           # removed: the next run builds it
  rebuilt = cached_word_graphs(str(tmp_path), predictor, DATASET, W, dtype="float32")
  np.testing.assert_array_equal(rebuilt.get(range(len(DATASET)))[0], expected)
  meta_path = os.path.join(rebuilt.path, "meta.json")   # made before the records
  with open(meta_path) as f:
    meta = json.load(f)
  del meta["files"]
  with open(meta_path, "w") as f:
    json.dump(meta, f)
  with pytest.raises(InputError, match="no integrity record"):
    cache_lib.WordGraphCache(rebuilt.path)
  assert "files" in cached_word_graphs(str(tmp_path), predictor, DATASET, W,
                                       dtype="float32").meta
