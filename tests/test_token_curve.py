"""The token curve's crossing (experiments/token_curve.py): where a line
through the attractor items' accuracy against log10 tokens reaches 50 %,
with its bootstrap over the items."""
import numpy as np

from experiments.token_curve import choose, crossing


def test_the_line_reaches_50_percent_where_its_formula_says():
  # 100 attractor items (and 10 others, ignored): at 1e6, 1e7, 1e8 tokens
  # 20, 30, 40 right: 10 points a decade, 50 % at 1e9
  tokens = [1e6, 1e7, 1e8]
  correct = np.zeros((3, 110), int)
  for c, right in enumerate((20, 30, 40)):
    correct[c, :right] = 1
  attracted = np.arange(110) < 100
  correct[:, 100:] = 1
  fit = crossing(tokens, correct, attracted, fit_from=1e6, resamples=200)
  assert np.isclose(fit["tokens"], 1e9) and np.isclose(fit["slope_per_decade"], 0.10)
  assert fit["low"] < 1e9 < fit["high"] and fit["checkpoints"] == 3
  # checkpoints below fit_from are left out; one left is no line
  assert crossing(tokens, correct, attracted, fit_from=1e8, resamples=10) is None
  assert crossing([], [], attracted, fit_from=1e6, resamples=10) is None   # a run just started
  flat = np.tile(correct[:1], (3, 1))
  assert crossing(tokens, flat, attracted, 1e6, 10)["tokens"] == np.inf


def test_the_checkpoint_is_chosen_on_the_given_items_only():
  # items 0-1 the choice's, 2-3 the scored ones: checkpoint 2 is best on the
  # scored items, checkpoints 0 and 1 tie on the choice's: the fewer tokens win
  correct = np.array([[1, 0, 0, 0], [1, 0, 1, 0], [0, 0, 1, 1]])
  among = np.array([True, True, False, False])
  assert choose([1e6, 2e6, 3e6], correct, among) == {
      "index": 0, "tokens": 1e6, "accuracy": 0.5, "items": 2}
  assert choose([1e6, 2e6, 3e6], correct, ~among)["index"] == 2
