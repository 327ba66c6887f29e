"""The verb-number task (glomo_jax.classification.verb_number): the raw-text rule and
the treebank's gold labels on hand-made sentences, the JSON-lines reader (the
words before the verb only; one-line errors; fuzzed), the oracle graphs'
arcs, scores by group, the subject-arc table, and a tiny run of an oracle and
of GLoMo with a real predictor."""
import gzip
import json
import sys

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import REPO
from fuzzing import damaged_jsonl, examples, read_or_input_error

sys.path.insert(0, REPO)

from experiments.configs import verb_number as vn_config  # noqa: E402
from glomo_jax.downstream.scores import ScoreGroup, group_accuracy, group_membership  # noqa: E402
from glomo_jax.errors import InputError  # noqa: E402
from glomo_jax.eval.conllu import read_conllu  # noqa: E402
from glomo_jax.classification.subject_arcs import forward_rows, instances, score_subject_arcs  # noqa: E402
from glomo_jax.export.predictor import load_graph_predictor  # noqa: E402
from glomo_jax.classification import ClassificationConfig, run_classification  # noqa: E402
from glomo_jax.text.splits import TaskData  # noqa: E402
from glomo_jax.graphs.task_graphs import ArcGraphs  # noqa: E402
from glomo_jax.classification.verb_number import (NUMBER_LABELS, load_number_task,  # noqa: E402
                                                  read_number_split, tree_arcs)
from glomo_jax.classification.verb_number_sources import (rule_accuracy, rule_label,  # noqa: E402
                                                          split_sentences, text_examples,
                                                          treebank_examples)

# "The keys to the cabinet are here ." / "The cat and the dog were asleep ." /
# "You are late ." / "There is a dog ."
ROWS = {
    "keys": [("The", "DET", "_", 2, "det"), ("keys", "NOUN", "Number=Plur", 7, "nsubj"),
             ("to", "ADP", "_", 5, "case"), ("the", "DET", "_", 5, "det"),
             ("cabinet", "NOUN", "Number=Sing", 2, "nmod"),
             ("are", "AUX", "Mood=Ind|Tense=Pres|VerbForm=Fin", 7, "cop"),
             ("here", "ADV", "_", 0, "root"), (".", "PUNCT", "_", 7, "punct")],
    "coordinated": [("The", "DET", "_", 2, "det"), ("cat", "NOUN", "Number=Sing", 7, "nsubj"),
                    ("and", "CCONJ", "_", 5, "cc"), ("the", "DET", "_", 5, "det"),
                    ("dog", "NOUN", "Number=Sing", 2, "conj"),
                    ("were", "AUX", "Mood=Ind|Tense=Past|VerbForm=Fin", 7, "cop"),
                    ("asleep", "ADJ", "_", 0, "root"), (".", "PUNCT", "_", 7, "punct")],
    "you": [("You", "PRON", "Case=Nom|Person=2|PronType=Prs", 3, "nsubj"),
            ("are", "AUX", "Mood=Ind|Tense=Pres|VerbForm=Fin", 3, "cop"),
            ("late", "ADJ", "_", 0, "root"), (".", "PUNCT", "_", 3, "punct")],
    "there": [("There", "PRON", "_", 2, "expl"),
              ("is", "VERB", "Mood=Ind|Number=Sing|Person=3|Tense=Pres|VerbForm=Fin", 0, "root"),
              ("a", "DET", "_", 4, "det"), ("dog", "NOUN", "Number=Sing", 2, "nsubj"),
              (".", "PUNCT", "_", 2, "punct")],
}


def conllu_text() -> str:
  blocks = []
  for name, rows in ROWS.items():
    lines = [f"# sent_id = {name}", "# text = " + " ".join(r[0] for r in rows)]
    lines += ["\t".join([str(i + 1), form, form.lower(), upos, "_", feats, str(head), rel,
                         "_", "_"]) for i, (form, upos, feats, head, rel) in enumerate(rows)]
    blocks.append("\n".join(lines))
  return "\n\n".join(blocks) + "\n"


@pytest.fixture
def treebank(tmp_path):
  path = tmp_path / "tb.conllu"
  path.write_text(conllu_text(), encoding="utf-8")
  return list(read_conllu(str(path)))


def test_rule_labels_hand_made_sentences():
  def label(text, i):
    return rule_label(text.split(), i, have_forms=True)
  assert label("The keys to the cabinet are here .", 5) == 1
  assert label("The key to the cabinets is here .", 5) == 0
  assert label("His sons have left .", 2) == 1 and label("She has left .", 1) == 0
  assert label("There are two dogs .", 1) is None          # the subject follows
  assert label("Are the dogs here ?", 0) is None           # first word
  assert label("Why the dogs are here ?", 3) is None       # a question
  assert label('He asked , " Why the dogs are here ? "', 7) is None   # a quoted one
  assert label("You are late .", 1) is None                # you: any number
  assert label("If it were true .", 2) is None             # subjunctive
  assert label("They will have left .", 2) is None         # not finite
  assert label("The dog runs .", 2) is None                # not a target form
  assert rule_label("His sons have left .".split(), 2) is None   # have_forms off


def test_sentences_and_raw_text_examples():
  text = "Mr. Smith was here. The dogs of J. Doe are big! Is it?\nA new line is one."
  assert list(split_sentences(text)) == ["Mr. Smith was here.", "The dogs of J. Doe are big!",
                                         "Is it?", "A new line is one."]
  got = list(text_examples([text]))
  assert [(e["words"][e["verb"]], e["label"]) for e in got] == [("was", 0), ("are", 1), ("is", 0)]
  assert got[1]["words"][:3] == ["The", "dogs", "of"]      # as written


def test_gold_examples_and_rule_accuracy(treebank):
  got = {e["words"][e["verb"]]: e for e in treebank_examples(treebank)}
  assert set(got) == {"are", "were"}              # "You are": 2nd person; "There is": after
  keys = got["are"]
  assert (keys["verb"], keys["label"], keys["subject"], keys["attractors"]) == (5, 1, 1, 1)
  assert keys["heads"] == [1, 6, 4, 4, 1, 6, -1, 6]
  were = got["were"]
  assert (were["label"], were["subject"], were["attractors"]) == (1, 1, 0)   # coordination
  # the rule against the gold subjects: keys, coordinated (right); "There is"
  # has its subject after the verb and is skipped; "You are" has no number
  assert rule_accuracy(treebank) == {"kept": 2, "correct": 2, "skipped": 1, "accuracy": 1.0}


def write_examples(path, records) -> str:
  with gzip.open(path, "wt", encoding="utf-8") as f:
    f.write("".join(json.dumps(r) + "\n" for r in records))
  return str(path)


KEYS = {"words": ["The", "Keys", "to", "the", "cabinet", "are", "here", "."], "verb": 5,
        "label": "plural", "subject": 1, "attractors": 1, "heads": [1, 6, 4, 4, 1, 6, -1, 6]}


def test_reader_reads_only_the_words_before_the_verb(tmp_path):
  later = dict(KEYS, words=KEYS["words"][:5] + ["is", "gone", "!"], label="plural")
  split = read_number_split(write_examples(tmp_path / "a.jsonl.gz", [KEYS, later]),
                            oracle="tree")
  assert split.texts["text"][0] == ["the", "keys", "to", "the", "cabinet"]
  assert split.texts["text"][0] == split.texts["text"][1]         # verb on: unread
  assert split.raw["text"][0] == "The Keys to the cabinet" == split.raw["text"][1]
  assert [split.raw["text"][0][a:b] for a, b in split.spans["text"][0]] == KEYS["words"][:5]
  assert split.labels.tolist() == [1, 1]
  assert split.info["attractors"].tolist() == [1, 1] and split.info["distance"].tolist() == [4, 4]
  # the tree among the 5 words before the verb: keys←the, cabinet←to, cabinet←the, keys←cabinet
  assert sorted(map(tuple, split.arcs["text"][0].tolist())) == [(1, 0), (4, 1), (4, 2), (4, 3)]
  cased = read_number_split(write_examples(tmp_path / "b.jsonl.gz", [KEYS]), lowercase=False)
  assert cased.texts["text"][0][1] == "Keys" and cased.arcs is None


def test_a_long_prefix_keeps_the_words_nearest_the_verb(tmp_path):
  path = write_examples(tmp_path / "long.jsonl.gz", [KEYS])
  cut = read_number_split(path, oracle="tree", max_words=3)
  assert cut.texts["text"][0] == ["to", "the", "cabinet"]
  assert sorted(map(tuple, cut.arcs["text"][0].tolist())) == [(2, 0), (2, 1)]   # shifted
  assert cut.info["distance"].tolist() == [4]                # the subject's, though cut off
  subject = read_number_split(path, oracle="subject", max_words=4)
  assert subject.arcs["text"][0].tolist() == [[3, 0]]        # keys is now word 0
  assert read_number_split(path, oracle="subject", max_words=3).arcs["text"][0].size == 0
  with pytest.raises(InputError, match="none its own word's index"):
    read_number_split(write_examples(tmp_path / "self.jsonl.gz",
                                     [dict(KEYS, heads=[0] + KEYS["heads"][1:])]))


def test_oracle_graphs(tmp_path):
  files = {"train": write_examples(tmp_path / "t.jsonl.gz", [KEYS, dict(KEYS, subject=4)])}
  data = load_number_task(files, oracle="subject", val_fraction=0.0)
  graphs = ArcGraphs(TaskData("verb_number", {"train": data["train"]}, ("text",),
                              NUMBER_LABELS, ()), num_layers=1)
  out = graphs.batch("train", "text", np.array([0, 1, -1]), np.array([5, 5, 0]), 6)
  assert out.shape == (3, 2, 1, 6, 6)
  forward, backward = out[:, 0, 0], out[:, 1, 0]
  assert forward[0, 4, 1] == 1 and forward[0].sum() == 1      # row before the verb → subject
  assert backward[0, 1, 4] == 1 and backward[0].sum() == 1
  assert forward[1, 4, 4] == 1 and forward[1].sum() == 1      # subject right before: own row
  assert not out[2].any()                                     # padding row
  assert tree_arcs(np.array([2, -1, 1, 2]), 3).tolist() == [[2, 0], [2, 1]]


@pytest.mark.parametrize("change, problem", [
    ({"verb": 0}, r"'verb' = 0 is outside \[1, 8\)"),
    ({"verb": "5"}, "'verb' must be an integer"),
    ({"label": "dual"}, "unknown label 'dual'"),
    ({"subject": 6}, r"'subject' = 6 is outside \[0, 5\)"),
    ({"words": ["a", ""]}, "'words' must be a list of non-empty strings"),
    ({"heads": [0]}, r"'heads' must be 8 integers"),
    ({"words": None}, "'words' must be a list"),
])
def test_reader_names_the_file_line_and_problem(tmp_path, change, problem):
  path = write_examples(tmp_path / "bad.jsonl.gz", [KEYS, {**KEYS, **change}])
  with pytest.raises(InputError, match=rf"bad.jsonl.gz:2: {problem}"):
    read_number_split(path, oracle="tree")
  assert "\n" not in str(pytest.raises(InputError, read_number_split, path, oracle="tree").value)


def test_reader_errors_for_missing_fields_and_empty_files(tmp_path):
  missing = {k: v for k, v in KEYS.items() if k != "subject"}
  path = write_examples(tmp_path / "m.jsonl.gz", [missing])
  read_number_split(path)                                  # fine without an oracle
  with pytest.raises(InputError, match="m.jsonl.gz:1: oracle_arcs='subject' needs"):
    read_number_split(path, oracle="subject")
  with pytest.raises(InputError, match="e.jsonl.gz: no example"):
    read_number_split(write_examples(tmp_path / "e.jsonl.gz", []))


@settings(max_examples=examples(40))
@given(suffix=st.sampled_from(["", ".gz", ".xz"]), data=st.data())
def test_fuzzed_files(tmp_path, suffix, data):
  records = [KEYS, dict(KEYS, subject=4, attractors=0, label=1)]
  raw = data.draw(damaged_jsonl(records, suffix))
  path = tmp_path / f"vn.jsonl{suffix}"
  path.write_bytes(raw)
  split = read_or_input_error(lambda: read_number_split(str(path), oracle="tree"), str(path))
  if split is not None:
    assert len(split) >= 1 and set(split.labels.tolist()) <= {0, 1}
    for words, arcs in zip(split.texts["text"], split.arcs["text"]):
      assert words and np.all((arcs >= 0) & (arcs < len(words)))
      assert np.all(arcs[:, 0] >= arcs[:, 1])


def test_score_groups():
  groups = (ScoreGroup("a0", "attractors", 0, 0), ScoreGroup("a1+", "attractors", 1),
            ScoreGroup("d2-3", "distance", 2, 3))
  info = {"attractors": np.array([0, 2, 1, -1]), "distance": np.array([1, 3, 2, -1])}
  member = group_membership(groups, info, np.array([1, 0, 3, -1]))
  assert member.tolist() == [[0, 1, 1], [1, 0, 0], [0, 0, 0], [0, 0, 0]]
  sums = {"group_correct": np.array([1.0, 0.0, 2.0]), "group_count": np.array([2.0, 0.0, 4.0])}
  assert group_accuracy(groups, sums) == {"accuracy/a0": 0.5, "examples/a0": 2.0,
                                          "accuracy/d2-3": 0.5, "examples/d2-3": 4.0}


def test_subject_arc_table_by_hand():
  # verb 4, subject 1 (distance 3, one attractor), nearest noun 3: the row
  # before the verb (3) reads sources 0..3; L = 1, K = 2
  ex = {"verb": 4, "subject": 1, "attractors": 1, "noun": 3}
  row = np.array([[[0.1, 0.6, 0.0, 0.3], [0.1, 0.2, 0.15, 0.55]]])    # [L, K, verb]
  near = {"verb": 2, "subject": 1, "attractors": 0, "noun": 1}          # distance 1
  result = score_subject_arcs([ex, near], {"p": [row, np.zeros((1, 2, 2))]})
  entry = result["attractors 1+"]
  assert result["distance 1"] == 1 and entry["examples"] == 1 and "attractors 0" not in result
  assert entry["chance"] == pytest.approx(1 / 3) and entry["nearest noun"] == 0.0
  assert entry["best offset"] == {"offset": 3, "top1": 1.0}
  assert entry["p"]["best head"] == {"head": "fw 1 h0", "weight": 0.6, "top1": 1.0,
                                     "noun weight": 0.3, "noun top1": 0.0}
  assert entry["p"]["heads"]["fw 1 h1"] == {"weight": 0.2, "top1": 0.0, "noun weight": 0.55,
                                            "noun top1": 1.0}
  mean = entry["p"]["mean of heads"]
  assert mean["weight"] == pytest.approx(0.4) and mean["noun weight"] == pytest.approx(0.425)
  assert type(mean["weight"]) is float   # JSON as a number
  assert mean["top1"] == 0.0 and mean["noun top1"] == 1.0       # 0.425 on the noun > 0.4
  # the nearest noun as the subject is no lure: its figures stay 0
  same = score_subject_arcs([{**ex, "noun": 1}], {"p": [row]})["attractors 1+"]["p"]
  assert same["best head"]["noun weight"] == 0.0 and same["mean of heads"]["noun top1"] == 0.0


def test_forward_rows_read_the_words_before_the_verb(tiny_export, treebank):
  predictor = load_graph_predictor(tiny_export)
  exs = instances(treebank)
  assert [e["noun"] for e in exs] == [4, 4]
  rows = forward_rows(predictor, exs)
  layers, heads = predictor.config.num_graph_layers, predictor.config.num_heads
  assert [r.shape for r in rows] == [(layers, heads, 5), (layers, heads, 5)]
  assert all(np.allclose(r[..., -1], 0) for r in rows)      # a row never reads itself


@pytest.mark.parametrize("variant, graph_source", [("embeddings", "arcs"),
                                                   ("embeddings", "predictor")])
def test_tiny_runs_report_scores_by_group(tmp_path, tiny_export, variant, graph_source):
  plural = dict(KEYS, subject=4, attractors=0)
  singular = dict(KEYS, words=["The", "key", "to", "the", "cabinets", "is", "here", "."],
                  label="singular", attractors=1)
  train = write_examples(tmp_path / "train.jsonl.gz", [plural, singular, KEYS] * 8)
  config = vn_config.get_config("tiny")
  config.files.train, config.files.gold = train, write_examples(
      tmp_path / "gold.jsonl.gz", [plural, singular])
  config.variant, config.graph_source, config.oracle_arcs = variant, graph_source, "tree"
  if graph_source == "predictor":
    config.predictor_export = tiny_export
  config.loop.num_steps, config.loop.eval_every = 2, 2
  results = run_classification(ClassificationConfig.from_dict(config.to_dict()), str(tmp_path / "run"),
                         devices=jax.devices()[:1])
  assert results["task"] == "verb_number" and results["examples"]["gold"] == 2
  assert results["graph_source"] == graph_source and results["test"] is None
  groups = results["groups"]["gold"]
  assert {k: v["examples"] for k, v in groups.items()} == {
      "attractors_0": 1, "attractors_1": 1, "attractors_1+": 1, "distance_1": 1,
      "distance_4+": 1}
  assert all(0 <= v["accuracy"] <= 1 for v in groups.values())


def test_grid_table_pairs_rows_by_seed(tmp_path):
  from experiments.grid import paired_table  # noqa: PLC0415
  def write(row, seed, gold, hard):
    (tmp_path / f"{row}_s{seed}").mkdir()
    (tmp_path / f"{row}_s{seed}" / "results.json").write_text(json.dumps(
        {"seed": seed, "validation_accuracy": 0.5, "test": None, "gold": gold,
         "groups": {"gold": {"attractors_1+": {"accuracy": hard, "examples": 7}}}}))
  for seed, (base, oracle) in enumerate([(0.80, 0.90), (0.70, 0.90), (0.75, 0.90)]):
    write("baseline", seed, base, base / 2)
    write("subject_arc", seed, oracle, oracle / 2)
  text = paired_table(str(tmp_path), ["baseline", "subject_arc", "glomo"])
  lines = text.splitlines()
  assert lines[0] == "| row | seeds | validation | gold | gold ≥1 attr |"
  assert lines[2] == "| baseline | 3 | 50.0 ± 0.0 | 75.0 ± 5.0 | 37.5 ± 2.5 |"
  # paired differences 10, 20, 15: mean 15, standard error 5 / √3
  assert lines[4] == "| subject_arc − baseline (paired) | | +0.00 ± 0.00 | +15.00 ± 2.89 | +7.50 ± 1.44 |"
  assert "attractors_1+ 7" in text and "glomo" not in text


def test_data_command_writes_every_set(tmp_path):
  import subprocess  # noqa: PLC0415
  corpus = tmp_path / "wiki.jsonl"
  corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in [
      "The dogs near the house are loud. It was late.", "Her sons have gone.",
      "The keys were lost. There is no way.", "A cat is here."]), encoding="utf-8")
  conllu = tmp_path / "tb.conllu"
  conllu.write_text(conllu_text(), encoding="utf-8")
  out = tmp_path / "out"
  subprocess.run([sys.executable, "-m", "experiments.verb_number_data", f"--corpus={corpus}",
                  f"--conllu_train={conllu}", f"--conllu_dev={conllu}", f"--out={out}",
                  "--test_every=2", "--fit_fraction=0.5"], cwd=REPO, check=True,
                 capture_output=True)
  summary = json.loads((out / "summary.json").read_text())
  # documents 2 and 4 held out; one verb a sentence
  assert (summary["wiki_train"]["examples"], summary["wiki_test"]["examples"]) == (3, 2)
  assert summary["ud_train"]["examples"] == 2 and summary["ud_all"]["examples"] == 4
  assert summary["ud_fit"]["examples"] + summary["ud_heldout"]["examples"] == 4
  assert summary["rule_accuracy_dev"]["be"]["accuracy"] == 1.0
  assert len(read_number_split(str(out / "ud_all.jsonl.gz"), oracle="tree")) == 4


def test_config_refuses_a_carved_test_split():
  from glomo_jax.classification.config import TaskFiles  # noqa: PLC0415
  config = ClassificationConfig(task="verb_number", source="files", files=TaskFiles(train="x"),
                          test_fraction=0.1)
  with pytest.raises(ValueError, match="carves no test split"):
    config.check()
