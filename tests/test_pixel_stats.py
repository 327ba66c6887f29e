"""glomo_jax.eval.pixel_stats on hand-built graphs between pixels, and the
experiments.graph_stats entry point on a pixel export."""
import math

import jax
import numpy as np
import pytest

from glomo_jax.eval.pixel_stats import pixel_graph_statistics

ONE = jax.devices()[:1]   # in-process runs on one device: cheaper compiles


def left_or_above(h, w):
  """[T, T] forward graph: each pixel reads the pixel to its left (the one
  above in column 0); the first pixel reads nothing."""
  g = np.zeros((h * w, h * w))
  for t in range(1, h * w):
    g[t, t - 1 if t % w else t - w] = 1
  return g


def uniform(h, w, forward):
  allowed = np.tril(np.ones((h * w, h * w)), -1) if forward else np.triu(np.ones((h * w,) * 2), 1)
  return allowed / np.maximum(allowed.sum(-1, keepdims=True), 1)


def test_a_neighbour_graph_is_local_and_peaked():
  h, w = 3, 4
  fw = left_or_above(h, w)
  bw = fw[::-1, ::-1]                          # the 180° rotation: right / below neighbours
  graphs = np.stack([fw, bw])[None, :, None]   # [B=1, 2L=2, K=1, T, T]
  assert np.allclose(bw.sum(-1)[:-1], 1) and bw[-1].sum() == 0 and np.all(np.tril(bw) == 0)
  for stats in pixel_graph_statistics(graphs, (h, w)):
    assert stats["empty"] == pytest.approx(1 / (h * w)) and stats["dead_heads"] == 0
    assert stats["entropy"] == 0 and stats["distance"] == 1 and stats["neighbours"] == 1
    counts = np.arange(1, h * w)               # earlier (later) pixels of each full row
    assert stats["entropy_gap"] == pytest.approx(np.log(counts).mean())
    assert stats["rows"] == h * w - 1


def test_the_uniform_graph_is_its_own_reference_in_a_2x2_image():
  graphs = np.stack([uniform(2, 2, True), uniform(2, 2, False)])[None, :, None]
  fw, bw = pixel_graph_statistics(graphs, (2, 2))
  r2 = math.sqrt(2)
  by_hand = (1 + (1 + r2) / 2 + (r2 + 2) / 3) / 3        # rows 1, 2, 3 of the forward graph
  for s in (fw, bw):
    assert s["entropy_gap"] == pytest.approx(0, abs=1e-12)
    assert s["distance"] == pytest.approx(s["uniform_distance"]) == pytest.approx(by_hand)
    assert s["neighbours"] == s["uniform_neighbours"] == 1   # all 4 pixels touch
    assert s["empty"] == 0.25


def test_dead_heads_and_bad_shapes():
  g = np.zeros((2, 2, 3, 6, 6))
  g[:, :, 0] = np.stack([uniform(2, 3, True), uniform(2, 3, False)])
  g[1, 0, 1] = uniform(2, 3, True)            # head 1 lives in one image only
  fw, bw = pixel_graph_statistics(g, (2, 3))
  assert fw["dead_heads"] == 1 and bw["dead_heads"] == 2
  with pytest.raises(ValueError, match=r"H·W = 3·3"):
    pixel_graph_statistics(g, (3, 3))


def test_entry_point_on_a_pixel_export(tmp_path, tiny_export):
  from experiments.graph_stats import pixel_statistics_table, statistics_table  # noqa: PLC0415
  from glomo_jax.pretraining.pixels import pretrain_images  # noqa: PLC0415
  from test_images_pretraining import config_for, write_images  # noqa: PLC0415
  path = write_images(tmp_path / "images.npz")
  export = pretrain_images(config_for(path, steps=1), str(tmp_path / "run"),
                           devices=ONE)["export"]
  table = pixel_statistics_table(export, path, num=5, factor=2, batch_size=2)
  lines = table.splitlines()
  assert lines[0].startswith("5 images evenly spaced") and "4×4" in lines[0]
  assert len(lines) == 3 + 2 * 2 and lines[3].startswith("| forward 1 |")
  with pytest.raises(ValueError, match="text predictor"):
    pixel_statistics_table(tiny_export, path, 5, 2)
  with pytest.raises(ValueError, match="pixel predictor"):
    statistics_table(export, path, "text", 5, 8)
