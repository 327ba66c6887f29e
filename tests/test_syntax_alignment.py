"""Graphs against dependency trees: the CoNLL-U reader, the scores on hand-built
trees and graphs, the spanning tree against brute force, character alignment
of raw text, and the experiments.syntax_alignment entry point."""
import itertools
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from glomo_jax.eval.conllu import CoNLLUError, read_conllu
from glomo_jax.eval.syntax import (SyntaxScores, maximum_spanning_trees, offset_graph,
                                   uniform_graph)
from glomo_jax.eval.treebank_alignment import baseline_graphs, mixture_graphs

# "I don't like cold tea." with a multiword token, an empty node and SpaceAfter;
# then a sentence without a # text comment.
CONLLU = """# sent_id = s1
# text = I don't like cold tea.
1\tI\tI\tPRON\t_\t_\t4\tnsubj\t_\t_
2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
2\tdo\tdo\tAUX\t_\t_\t4\taux\t_\t_
3\tn't\tnot\tPART\t_\t_\t4\tadvmod\t_\t_
4\tlike\tlike\tVERB\t_\t_\t0\troot\t_\t_
4.1\tlikes\tlike\tVERB\t_\t_\t_\t_\t0:root\t_
5\tcold\tcold\tADJ\t_\t_\t6\tamod\t_\t_
6\ttea\ttea\tNOUN\t_\t_\t4\tobj\t_\tSpaceAfter=No
7\t.\t.\tPUNCT\t_\t_\t4\tpunct\t_\t_

1\tHello\thello\tINTJ\t_\t_\t0\troot\t_\tSpaceAfter=No
2\t!\t!\tPUNCT\t_\t_\t1\tpunct:x\t_\t_
"""
HEADS = [3, 3, 3, -1, 5, 3, 3]      # 0-based heads of s1
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write(tmp_path, text, name="t.conllu"):
  path = tmp_path / name
  path.write_text(text, encoding="utf-8")
  return str(path)


def test_conllu_words_heads_and_character_spans(tmp_path):
  first, second = read_conllu(write(tmp_path, CONLLU))
  assert first.sent_id == "s1" and first.forms == ("I", "do", "n't", "like", "cold", "tea", ".")
  assert first.heads.tolist() == HEADS and first.deprels[2] == "advmod"
  assert [first.text[a:b] for a, b in first.spans] == list(first.forms)
  assert first.spans[1].tolist() == [2, 4] and first.spans[2].tolist() == [4, 7]
  assert second.text == "Hello!" and second.sent_id == "line 13"
  assert second.spans.tolist() == [[0, 5], [5, 6]]


def test_conllu_multiword_token_not_spelled_by_its_words(tmp_path):
  text = ("# text = au lit\n1-2\tau\t_\t_\t_\t_\t_\t_\t_\t_\n1\tà\t_\t_\t_\t_\t3\tcase\t_\t_\n"
          "2\tle\t_\t_\t_\t_\t3\tdet\t_\t_\n3\tlit\t_\t_\t_\t_\t0\troot\t_\t_\n")
  (sentence,) = read_conllu(write(tmp_path, text))
  assert sentence.spans.tolist() == [[0, 2], [-1, -1], [3, 6]]


@pytest.mark.parametrize("body, message", [
    ("1\ta\tb\n", "t.conllu:2: expected 10"),
    ("1\ta\t_\t_\t_\t_\t5\tdep\t_\t_\n", "HEAD points outside"),
    ("1\tzzz\t_\t_\t_\t_\t0\troot\t_\t_\n", "token 'zzz' is not next"),
    ("2\ta\t_\t_\t_\t_\t0\troot\t_\t_\n", "word 2 out of order"),
])
def test_conllu_errors_name_file_and_line(tmp_path, body, message):
  with pytest.raises(CoNLLUError, match=message):
    list(read_conllu(write(tmp_path, "# text = a\n" + body)))


def tree_graph(heads):
  """Each word reads its head only; the root's row is empty."""
  n = len(heads)
  graph = np.zeros((n, n))
  for t, h in enumerate(heads):
    if h >= 0:
      graph[t, h] = 1.0
  return graph


def score(graphs, heads=HEADS, deprels=None):
  scores = SyntaxScores()
  scores.add(np.array(heads), deprels or ["dep"] * len(heads), graphs)
  return scores.result()


def test_gold_tree_graph_scores_everything():
  result = score({"gold": tree_graph(HEADS)})
  assert result["graphs"]["gold"] == pytest.approx(
      {"head": 1.0, "neighbour": 6 / 7, "uuas": 1.0})   # the root's row is empty
  assert result["heads_left"] == pytest.approx(2 / 6)     # tea and "." read "like"


def test_left_neighbour_graph_scores_exactly_the_left_neighbour_baseline():
  deprels = ["nsubj", "aux", "advmod", "root", "amod", "obj", "punct"]
  graphs = baseline_graphs(7, offsets=2)
  graphs["learned"] = offset_graph(7, -1)
  result = score(graphs, deprels=deprels)
  assert result["graphs"]["learned"] == result["graphs"]["left neighbour"]
  assert result["relations"]["learned"] == result["relations"]["left neighbour"]
  # by hand: no word's head is the word before it; of the chain's edges, only
  # n't–like (2, 3) and cold–tea (4, 5) are gold edges (6 of them)
  assert result["graphs"]["learned"]["head"] == 0.0
  assert result["graphs"]["learned"]["uuas"] == pytest.approx(2 / 6)
  assert result["relations"]["learned"]["amod"] == {"head": 0.0, "uuas": 1.0, "count": 1}


def test_right_neighbour_and_ties_count_a_share():
  result = score({"right": offset_graph(7, 1), "uniform": uniform_graph(7, "backward")})
  # head at t + 1: "n't" (2 → 3) and "cold" (4 → 5)
  assert result["graphs"]["right"]["head"] == pytest.approx(2 / 6)
  # a uniform backward row t spreads over n − 1 − t sources: the head gets 1/(6 − t)
  expected = sum(1 / (6 - t) for t, h in enumerate(HEADS) if h > t) / 6
  assert result["graphs"]["uniform"]["head"] == pytest.approx(expected)


def test_every_sentence_carries_the_same_graphs():
  scores = SyntaxScores()
  scores.add(np.array([-1, 0]), ["root", "dep"], {"a": np.eye(2)})
  with pytest.raises(ValueError, match="same graphs"):
    scores.add(np.array([-1, 0]), ["root", "dep"], {"b": np.eye(2)})


def brute_force_best_weight(weights):
  """Largest total weight of a spanning tree, over all n^(n−2) Prüfer codes."""
  n = len(weights)
  best = -np.inf
  for code in itertools.product(range(n), repeat=n - 2):
    degree = [1] * n
    for v in code:
      degree[v] += 1
    total, code = 0.0, list(code)
    for v in code:
      leaf = min(u for u in range(n) if degree[u] == 1)
      total += weights[leaf, v]
      degree[leaf] -= 1
      degree[v] -= 1
    u, v = (u for u in range(n) if degree[u] == 1)
    best = max(best, total + weights[u, v])
  return best


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_maximum_spanning_tree_against_brute_force(n):
  rng = np.random.default_rng(n)
  weights = rng.uniform(size=(4, n, n))
  weights = weights + weights.transpose(0, 2, 1)
  weights[:, [0, 1], [1, 0]] = weights[:, [2 % n], [0]]  # a tie for Prim to break
  trees = maximum_spanning_trees(weights)
  for w, tree in zip(weights, trees):
    assert (tree == tree.T).all() and tree.sum() == 2 * (n - 1)
    assert (w * tree).sum() / 2 == pytest.approx(brute_force_best_weight(w))


def test_mixtures_name_every_head_layer_and_direction():
  graphs = np.random.default_rng(0).uniform(size=(4, 3, 5, 5))   # L = 2, K = 3
  named = mixture_graphs(graphs, "untrained")
  assert len(named) == 4 * 3 + 4 + 2 + 1
  np.testing.assert_allclose(named["untrained bw 1 h2"], graphs[2, 2])
  np.testing.assert_allclose(named["untrained fw 2 mean"], graphs[1].mean(0))
  np.testing.assert_allclose(named["untrained bw mean"], graphs[2:].mean((0, 1)))
  np.testing.assert_allclose(named["untrained fw+bw mean"], graphs.mean((0, 1)))


def test_piece_spans_tile_the_text(tiny_export):
  from glomo_jax.export import load_graph_predictor  # noqa: PLC0415
  tokenizer = load_graph_predictor(tiny_export).tokenizer
  texts = ["a man  sleeps on the sofa.", "café naïve — ok", ""]
  for text, (ids, spans) in zip(texts, tokenizer.encode_with_spans(texts)):
    assert ids.tolist() == tokenizer.encode(text)
    assert "".join(text[a:b] for a, b in spans) == text
    assert (spans[:, 0] < spans[:, 1]).all()


def test_pieces_go_to_the_unit_holding_their_first_character():
  from glomo_jax.graphs.encode import unit_of_piece_from_spans  # noqa: PLC0415
  text = "I don't."
  units = [[0, 1], [2, 4], [4, 7]]            # I / do / n't; the "." in no unit
  pieces = [[0, 1], [1, 2], [2, 4], [4, 5], [5, 7], [7, 8]]   # I, " ", do, n, 't, .
  assert unit_of_piece_from_spans(text, pieces, units).tolist() == [0, 1, 1, 2, 2, -1]
  assert unit_of_piece_from_spans(text, pieces, [[0, 1], [-1, -1], [2, 7]]).tolist() == \
      [0, 2, 2, 2, 2, -1]


@pytest.mark.parametrize("self_loops, rows",
                         [(False, "mean"), (True, "mean"), (False, "whole_word")])
def test_text_graphs_equal_word_graphs_on_space_joined_words(tiny_export, self_loops, rows):
  from glomo_jax.export import load_graph_predictor  # noqa: PLC0415
  from glomo_jax.graphs.unit_graphs import text_graphs, word_graphs  # noqa: PLC0415
  predictor = load_graph_predictor(tiny_export)
  word_lists = [["a", "man", "sleeps", "on", "the", "sofa"], ["two", "kids", "play"]]
  texts, spans = [], []
  for words in word_lists:
    starts = np.cumsum([0] + [len(w) + 1 for w in words[:-1]])
    texts.append(" ".join(words))
    spans.append(np.stack([starts, starts + [len(w) for w in words]], axis=-1))
  by_text, mask_text = text_graphs(predictor, None, texts, spans, 8, self_loops=self_loops,
                                   rows=rows)
  by_words, mask_words = word_graphs(predictor, None, word_lists, 8, self_loops=self_loops,
                                     rows=rows)
  np.testing.assert_allclose(by_text, by_words, atol=1e-6)
  assert (mask_text == mask_words).all() and by_text[:, :, :, :6].sum() > 0
  if rows != "mean":                   # the 40-piece vocabulary splits most words
    mean = word_graphs(predictor, None, word_lists, 8, self_loops=self_loops)[0]
    assert np.abs(by_words - mean).max() > 1e-3


def test_entry_point_prints_the_table(tiny_export, tmp_path):
  conllu = write(tmp_path, CONLLU)
  output = tmp_path / "scores.json"
  run = subprocess.run(
      [sys.executable, "-m", "experiments.syntax_alignment", f"--export={tiny_export}",
       f"--conllu={conllu}", "--offsets=2", f"--output={output}", "--rows=whole_word"],
      cwd=REPO, capture_output=True, text=True, check=False)
  assert run.returncode == 0, run.stderr[-2000:]
  lines = run.stdout.splitlines()
  assert lines[0].startswith("2 sentences, 9 words, 7 gold edges")
  table = {line.split(" | ")[0][2:]: line for line in lines if line.startswith("| ")}
  # by hand: heads 1 of 7 (Hello ← !); neighbours 3 of 9 (like → n't, tea → cold,
  # ! → Hello); edges 2 + 1 of 7
  assert table["left neighbour"] == "| left neighbour | 0.143 | 0.333 | 0.429 |"
  assert any(k.startswith("trained predictor: best head") for k in table)
  assert "untrained predictor: fw+bw mean" in table
  scores = json.loads(output.read_text())
  assert scores["graphs"]["offset -1"] == scores["graphs"]["left neighbour"]
  missing = subprocess.run(
      [sys.executable, "-m", "experiments.syntax_alignment", f"--export={tiny_export}",
       f"--conllu={tmp_path / 'none.conllu'}"],
      cwd=REPO, capture_output=True, text=True, check=False)
  assert missing.returncode != 0 and len(missing.stderr.strip().splitlines()) == 1
  assert "none.conllu" in missing.stderr
