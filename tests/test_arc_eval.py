"""Arc scores on hand-made graphs."""
import numpy as np
import pytest

from glomo_jax.eval.arcs import ArcAccumulator, arc_scores


def test_arc_scores_hand_computed():
  T = 5
  g = np.zeros((1, 1, 2, T, T), np.float32)
  arcs = np.full((1, T), -1)
  arcs[0, 4] = 1                     # word 4 depends on word 1
  g[0, 0, 0, 4, 1] = 0.75            # head 0, own row 4: 0.75 on the source
  g[0, 0, 0, 4, 0] = 0.25
  g[0, 0, 1, 3, 1] = 1.0             # head 1, predicting row 3: all on the source
  r = arc_scores(g, arcs)
  assert r["own_arcs"] == 1 and r["predicting_arcs"] == 1
  assert r["own_best"] == 0.75 and r["own_best_head"] == 0
  assert r["own_mean"] == pytest.approx(0.375)
  assert r["own_chance"] == pytest.approx(1 / 4)
  assert r["predicting_best"] == 1.0 and r["predicting_best_head"] == 1
  assert r["predicting_chance"] == pytest.approx(1 / 3)
  assert r["own_top1"] == 1.0 and r["predicting_top1"] == 1.0


def test_adjacent_arcs_have_no_predicting_row_and_batches_accumulate():
  g = np.full((2, 1, 1, 4, 4), 0.0, np.float32)
  arcs = np.full((2, 4), -1)
  arcs[0, 2] = 1                     # s = t - 1: no predicting row
  arcs[1, 3] = 0
  g[1, 0, 0, 3, 0] = 0.5
  acc = ArcAccumulator()
  acc.add(g[:1], arcs[:1])
  acc.add(g[1:], arcs[1:])
  r = acc.result()
  assert r["own_arcs"] == 2 and r["predicting_arcs"] == 1
  assert r["own_best"] == pytest.approx(0.25)
  with pytest.raises(ValueError, match="arc_source"):
    acc.add(g, arcs[:, :3])
