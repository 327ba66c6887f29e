"""The picking task (glomo_jax.focused): answers and ties by hand (the slides'
slides), the generators, the JSON-lines reader's errors, and a tiny run on
the loop: results, Figure 3's data, a longer test length, exact resume."""
import collections
import dataclasses
import json
import os

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from conftest import assert_trees_equal
from glomo_jax.downstream.options import OptimOptions
from glomo_jax.errors import InputError
from glomo_jax.focused import (FocusedOptions, GateObjective, PickingConfig, read_picking,
                               run_picking)
from glomo_jax.focused.picking import generate, generate_malicious, picking_target
from glomo_jax.focused.task import PickingTask, load_picking, sample_copies
from glomo_jax.train.config import DOWNSTREAM_LOOP

ONE = jax.devices()[:1]
MALICIOUS = "666333666288882888819999999990"
SLIDES = [("805602017082838371701316304473", 10, 0), ("638733290890396690255937986485", 23, 3),
          ("164551937579373896813981125982", 26, 1), (MALICIOUS, 6, 6), (MALICIOUS, 10, 6),
          (MALICIOUS, 20, 8), (MALICIOUS, 30, 9)]


def by_counting(digits: str, k: int) -> int:
  counts = collections.Counter(digits[:k])
  top = max(counts.values())
  return int(next(d for d in digits[:k] if counts[d] == top))   # the tied one seen first


@pytest.mark.parametrize("digits, k, target", SLIDES)
def test_the_slides_examples(digits, k, target):
  assert picking_target(digits, k) == target == by_counting(digits, k)


def test_ties_go_to_the_digit_that_appears_first():
  assert picking_target("3399", 4) == 3 and picking_target("9933", 4) == 9   # not the smallest
  assert picking_target("638733290890396690255937986485", 23) == 3   # 9 reaches 5 first
  assert picking_target("12", 1) == 1 and picking_target("7", 1) == 7


def test_generators():
  rng = np.random.default_rng(0)
  data = generate(rng, 300, 5, 9, min_k=2, max_k=6)
  assert data.digits.shape == (300, 9) and set(np.unique(data.lengths)) == set(range(5, 10))
  assert np.all((data.k >= 2) & (data.k <= np.minimum(data.lengths, 6)))
  again = generate(np.random.default_rng(0), 300, 5, 9, min_k=2, max_k=6)
  np.testing.assert_array_equal(data.digits, again.digits)
  for row, n, k, target in zip(data.digits, data.lengths, data.k, data.targets):
    assert not row[n:].any()
    assert target == by_counting("".join(map(str, row[:n])), k)
  bad = generate_malicious(np.random.default_rng(1), 50, 40, max_run=4)
  for row, k, target in zip(bad.digits, bad.k, bad.targets):
    text = "".join(map(str, row))
    assert max(_runs(text)) <= 4 and target == by_counting(text, k)
  assert np.mean([max(_runs("".join(map(str, r)))) for r in bad.digits]) > 2


def _runs(text: str) -> list[int]:
  """Lengths of the runs of one digit (adjacent runs differ by construction)."""
  out = [1]
  for a, b in zip(text, text[1:]):
    if a == b:
      out[-1] += 1
    else:
      out.append(1)
  return out


def write_lines(path, lines) -> str:
  path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
  return str(path)


def test_reader_reads_a_users_sequences(tmp_path):
  path = write_lines(tmp_path / "mine.jsonl", [json.dumps({"digits": d, "k": k, "target": t})
                                               for d, k, t in SLIDES] + ["", '{"digits": "7", "k": 1}'])
  data = read_picking(path)
  assert len(data) == 8 and list(data.targets) == [t for _, _, t in SLIDES] + [7]
  assert list(data.lengths) == [30] * 7 + [1] and data.digits[7, 0] == 7


@pytest.mark.parametrize("line, fragment", [
    ('{"digits": "12345", "k": 0}', "'k' must be an integer from 1"),
    ('{"digits": "12345", "k": 6}', "'k' must be an integer from 1"),
    ('{"digits": "12345", "k": true}', "'k' must be an integer"),
    ('{"digits": "12345", "k": 2.0}', "'k' must be an integer"),
    ('{"digits": "", "k": 1}', "'digits' must be a non-empty string"),
    ('{"digits": "12a45", "k": 1}', "'digits' must be a non-empty string"),
    ('{"digits": "١٢٣", "k": 1}', "'digits' must be a non-empty string"),   # not 0-9
    ('{"digits": 12345, "k": 1}', "'digits' must be a non-empty string"),
    ('{"digits": "3399", "k": 4, "target": 9}', "'target' 9 is not the answer"),
    ('{"digits": "3399", "k": 4, "target": "3"}', "'target' '3' is not the answer"),
    ('{"digits": "3399", "k": 4, "traget": 3}', "unknown fields ['traget']"),
    ('{"digits": "3399", "k": 4', "not a JSON object (invalid JSON"),
    ('["3399", 4]', "not a JSON object but an array"),
])
def test_reader_errors_name_the_file_and_line(tmp_path, line, fragment):
  path = write_lines(tmp_path / "bad.jsonl", ['{"digits": "12", "k": 2}', line])
  with pytest.raises(InputError) as error:
    read_picking(path)
  assert str(error.value).startswith(f"{path}:2: ") and fragment in str(error.value)
  assert "\n" not in str(error.value)


def test_an_empty_file_is_named(tmp_path):
  with pytest.raises(InputError, match="bad.jsonl: no example"):
    read_picking(write_lines(tmp_path / "bad.jsonl", ["", "  "]))


def config_for(tmp_path, **changes) -> PickingConfig:
  """A tiny FHE run: n = 12, tested at 24 digits (k up to 24 as well) and on
  a user's file; 4 steps at a constant rate, evaluated every 2."""
  users = write_lines(tmp_path / "users.jsonl", [json.dumps({"digits": d, "k": k})
                                                 for d, k, _ in SLIDES])
  base = PickingConfig(
      model=FocusedOptions(hidden=8, digit_dim=4, gate_hidden=4, attention_hidden=4,
                           position_scale=10.0),
      min_length=10, max_length=12, train_examples=64, validation_examples=8,
      test_examples=8, test_lengths=(24,), test_k="both", test_file=users,
      optim=OptimOptions(batch_size=8, eval_batch_size=8),
      loop=dataclasses.replace(DOWNSTREAM_LOOP, num_steps=4, eval_every=2, log_every=1,
                               compile_fast=True))
  return base.replace(**changes)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
  root = tmp_path_factory.mktemp("picking")
  config = config_for(root)
  return config, root, run_picking(config, str(root / "straight"), devices=ONE)


def test_a_tiny_run_writes_every_score_and_figure_3s_data(straight):
  _, root, results = straight
  assert results["kind"] == "fhe" and results["steps"] == 4
  assert set(results["scores"]) == {"test", "n24", "n24_anyk", "malicious", "file"}
  for name, score in results["scores"].items():
    assert 0 <= score["accuracy"] <= 1 and 0 <= score["openness"] <= 1, name
    assert score["examples"] == (7 if name == "file" else 8)
  assert all(0 <= c["train_openness"] <= 1 for c in results["curves"])
  with open(root / "straight" / "profile.json") as f:
    profile = json.load(f)
  assert [p["k"] for p in profile["profile"]] == [2, 5, 7, 10, 12]
  for p in profile["profile"]:
    assert len(p["gate_at"]) == len(p["focus_at"]) == 12
    assert sum(p["focus_at"]) <= 1 + 1e-3 and all(0 <= g <= 1 for g in p["gate_at"])
    # attention reads open gates only: the focus stays under the openness
    assert all(f <= g + 1e-4 for f, g in zip(p["focus_at"], p["gate_at"]))
  sequence = profile["sequence"]
  assert len(sequence["gate_at"]) == len(sequence["digits"]) and 0 <= sequence["correct"] <= 1


def test_a_resumed_run_equals_a_straight_one(straight, tmp_path):
  config, root, results = straight
  run_picking(config.replace(loop=dataclasses.replace(config.loop, num_steps=2)),
              str(tmp_path / "resumed"), devices=ONE)
  resumed = run_picking(config, str(tmp_path / "resumed"), devices=ONE)
  assert resumed["curves"] == results["curves"] and resumed["scores"] == results["scores"]
  restore = ocp.StandardCheckpointer().restore
  assert_trees_equal(restore(str(root / "straight" / "checkpoints" / "4" / "state")),
                     restore(str(tmp_path / "resumed" / "checkpoints" / "4" / "state")))


def test_an_oracle_gate_trains_and_tests_open_where_it_says(tmp_path):
  """train_gate / test_gate 'prefix': the loss is the answer's alone (no
  reward logged) and every set's openness is its Σ k / Σ n."""
  config = config_for(tmp_path, model=FocusedOptions(
      hidden=8, digit_dim=4, gate_hidden=4, attention_hidden=4, position_scale=10.0,
      train_gate="prefix", test_gate="prefix"), test_file=None, test_k="trained")
  results = run_picking(config, str(tmp_path / "prefix"), devices=ONE)
  splits = load_picking(config)
  for name in ("test", "n24", "malicious"):
    data = splits[name]
    assert results["scores"][name]["openness"] == pytest.approx(
        np.sum(data.k) / np.sum(data.lengths)), name
  # S copies sample-major: the layout whose reshape(S, -1) the baseline reads per example
  copies = sample_copies(splits["train"].batch(range(8), 8), 3)
  assert np.all(np.asarray(copies["index"]).reshape(3, -1) == np.arange(8))
  assert np.asarray(copies["digits"]).shape == (24, 12)
  # the gate's weights learn from REINFORCE alone: none with an oracle, some with samples
  for train_gate, samples, moves in (("prefix", 1, False), ("sample", 1, True),
                                     ("sample", 2, True)):
    task = PickingTask(config.replace(
        model=dataclasses.replace(config.model, train_gate=train_gate),
        gate=dataclasses.replace(config.gate, samples=samples)), splits)
    variables = dict(task.init_variables(jax.random.key(0)), batch_stats={})
    batch = dict(task._batch("train", range(8), 8), step=np.full(8, 600, np.int32))

    def loss(params, task=task, variables=variables, batch=batch):
      value, metrics, _ = task.loss(dict(variables, params=params), batch,
                                    {"gate": jax.random.key(1)})
      return value, metrics
    grads, metrics = jax.jit(jax.grad(loss, has_aux=True))(variables["params"])
    gate = np.concatenate([np.ravel(g) for g in
                           jax.tree_util.tree_leaves(grads["encoder"]["gate"])])
    assert np.any(gate != 0) == moves and ("reward" in metrics) == moves, train_gate


def test_config_mistakes_are_named(tmp_path):
  for changes, fragment in [({"model": FocusedOptions(kind="lstm3")}, "unknown model.kind"),
                            ({"test_lengths": (8,)}, "must be >= the largest k"),
                            ({"min_k": 13}, "min_k = 13"), ({"test_k": "all"}, "unknown test_k"),
                            ({"variant": "glomo"}, "unknown variant"),
                            ({"gate": GateObjective(samples=0)}, "gate.samples must be"),
                            ({"gate": GateObjective(samples=2),
                              "model": FocusedOptions(kind="lstm1")}, "gate.samples > 1 needs"),
                            ({"model": FocusedOptions(train_gate="kth")}, "trains no gate"),
                            ({"model": FocusedOptions(train_gate="threshold")},
                             "unknown model.train_gate"),
                            ({"model": FocusedOptions(kind="lstm2", test_gate="prefix")},
                             "an oracle gate needs model.kind 'fhe'"),
                            ({"model": FocusedOptions(kind="lstm1", gate_positions=True)},
                             "gate_positions feeds a learnt gate"),
                            ({"model": FocusedOptions(gate_positions=True, train_gate="prefix",
                                                      test_gate="prefix")},
                             "gate_positions feeds a learnt gate")]:
    with pytest.raises(ValueError, match=fragment):
      config_for(tmp_path, **changes)


def test_the_grid_table_and_figures(straight, tmp_path):
  """experiments.picking_report on the tiny run laid out as a grid's run."""
  import shutil  # noqa: PLC0415
  import sys  # noqa: PLC0415
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  from experiments import picking_report  # noqa: PLC0415
  _, root, _ = straight
  shutil.copytree(root / "straight", tmp_path / "fhe_n12_s0",
                  ignore=shutil.ignore_patterns("checkpoints", "best", "tensorboard"))
  assert picking_report.run_arguments("fhe_g0.05", 200) == [
      "--config.model.kind=fhe", "--config.gate.gamma=0.05", "--config.min_length=200",
      "--config.max_length=200", "--config.test_lengths=(400, 800, 1600, 10000)"]
  assert picking_report.model_arguments("fhe_kth_pos") == [
      "--config.model.kind=fhe", "--config.model.train_gate=kth", "--config.model.test_gate=kth",
      "--config.model.positions=true"]
  assert picking_report.model_arguments("fhe_samples2_detach")[1:] == [
      "--config.gate.samples=2", "--config.model.reinforce_encoder=false"]
  assert picking_report.model_arguments("lstm1_pos")[1:] == ["--config.model.positions=true"]
  assert picking_report.model_arguments("fhe_gpos")[1:] == ["--config.model.gate_positions=true"]
  assert picking_report.model_arguments("fhe_g0.02_b0.2")[1:] == [
      "--config.gate.gamma=0.02", "--config.gate.beta=0.2"]
  for bad, fragment in (("lstm3", "unknown model"), ("lstm1_prefix", "unknown option"),
                        ("fhe_gx", "needs a number"), ("fhe_b", "b<beta> needs a number"),
                        ("lstm1_b0.1", "unknown option"),
                        ("lstm2_samples2", "unknown option"),
                        ("fhe_prefix_samples2", "not both"), ("fhe_prefix_kth", "not both"),
                        ("lstm1_gpos", "unknown option"), ("fhe_kth_gpos", "not learnt")):
    with pytest.raises(ValueError, match=fragment):
      picking_report.model_arguments(bad)
  early = [0.3, 0.2] + [0.1] * 8                                  # blind to k, early bias
  blind = [{"k": k, "gate_at": early} for k in (2, 5, 10)]
  assert picking_report.gate_slope(blind) == pytest.approx(0.0)
  prefix = [{"k": k, "gate_at": [1.0] * k + [0.0] * (10 - k)} for k in (2, 5, 10)]
  assert picking_report.gate_slope(prefix) == pytest.approx(0.5)
  kth = [{"k": k, "gate_at": [float(t == k) for t in range(1, 11)]} for k in (2, 5, 10)]
  assert picking_report.gate_slope(kth) == pytest.approx(1.0)
  assert picking_report.gate_slope(kth[:1] + [{"k": 5, "gate_at": [0.0] * 10}]) is None
  text = picking_report.picking_table(str(tmp_path), ["fhe", "lstm1"], [12, 200], "C.py", [])
  assert "| fhe | 12 | 0 |" in text and "lstm1" not in text.split("\n\n")[0]
  assert "`python -m experiments.picking --config=C.py --config.model.kind=M" in text
  for name, seed, accuracy in (("fhe", 0, 0.5), ("fhe", 1, 0.7), ("lstm1", 0, 0.4),
                                ("lstm1", 1, 0.5)):   # differences +10, +20: +15 ± 5 (std error)
    run = tmp_path / f"{name}_n12_s{seed}"
    if not run.exists():
      shutil.copytree(tmp_path / "fhe_n12_s0", run)
    result = json.loads((run / "results.json").read_text())
    result["seed"], result["scores"]["test"]["accuracy"] = seed, accuracy
    (run / "results.json").write_text(json.dumps(result))
  text = picking_report.picking_table(str(tmp_path), ["fhe", "lstm1"], [12], "C.py", [])
  assert "| fhe − lstm1 (paired) | 12 | 0,1 | +15.00 ± 5.00 |" in text
  assert "lstm1 − fhe" not in text
  for png in picking_report.draw_figures(str(tmp_path / "fhe_n12_s0"), str(tmp_path)):
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_where_a_run_reads_span_by_span(straight, tmp_path):
  """glomo_jax.focused.spans and experiments.picking_spans on the tiny run:
  the run's own n24 scores again, the prefix oracle's spans exactly, the
  table, the errors."""
  import sys  # noqa: PLC0415
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  from experiments.picking_report import questions, spans_table  # noqa: PLC0415
  from glomo_jax.focused.spans import SpanReader, load_picking_run, span_edges  # noqa: PLC0415
  config, root, results = straight
  assert span_edges(20, 200, 10_000) == [0, 20, 200, 400, 800, 1600, 3200, 6400, 10_000]
  assert span_edges(200, 200, 1000) == [0, 200, 400, 800, 1000]
  assert span_edges(3, 5, 5) == [0, 3, 5]
  for k, trained, length in ((6, 5, 5), (6, 5, 10), (0, 5, 5), (2, 5, 4)):
    with pytest.raises(ValueError, match="1 <= k <= trained <= length"):
      span_edges(k, trained, length)
  loaded, variables = load_picking_run(str(root / "straight"))
  assert loaded == config
  n24 = load_picking(config)["n24"]                        # each example its own k
  read = SpanReader(config, variables).read(n24, [0, 12, 24])
  scored = results["scores"]["n24"]                        # the same evaluation, the same gates
  assert read["accuracy"] == scored["accuracy"] and read["examples"] == 8
  assert [(s["first"], s["last"]) for s in read["spans"]] == [(1, 12), (13, 24)]
  assert np.mean([s["openness"] for s in read["spans"]]) == pytest.approx(scored["openness"])
  # the prefix oracle opens exactly digits 1..k, and the attention reads only those
  prefix = config.replace(model=dataclasses.replace(config.model, test_gate="prefix"))
  oracle = SpanReader(prefix, variables)
  for k in (3, 12):
    spans = oracle.read(n24.with_k(k), span_edges(k, 12, 24))["spans"]
    assert spans[0]["openness"] == 1 and spans[0]["attention"] == pytest.approx(1, abs=1e-5)
    assert all(s["openness"] == 0 and s["attention"] == 0 for s in spans[1:])
  for bad, fragment in (([0, 12, 25], "rise from 0 to the length 24"), ([0, 12, 12, 24], "rise")):
    with pytest.raises(ValueError, match=fragment):
      oracle.read(n24, bad)
  with pytest.raises(ValueError, match="one length"):
    oracle.read(load_picking(config)["test"], [0, 12])
  text = spans_table(str(root / "straight"), 24, [3, 12], 20)   # more than the run's 8
  head, rows = text.split("\n")[1], text.split("\n")[3:]
  assert head == "| k | accuracy | 1..k | k+1..12 | 13..24 |" and len(rows) == 2
  assert all(row.count("|") == head.count("|") for row in rows)
  assert rows[1].split(" | ")[3] == "–" and "20 sequences of 24 digits" in text
  for args, fragment in (((24, [13], 5), "every --k must be in 1..12"),
                         ((11, [3], 5), "--length must be >= the run's training length 12"),
                         ((24, [3], 0), "--examples must be >= 1")):
    with pytest.raises(ValueError, match=fragment):
      spans_table(str(root / "straight"), *args)
  assert questions(["20", "100"]) == [20, 100] and questions(None) is None
  with pytest.raises(ValueError, match="--k takes whole numbers"):
    questions(["20", "x"])
  import subprocess  # noqa: PLC0415
  from conftest import REPO  # noqa: PLC0415
  spans = [sys.executable, "-m", "experiments.picking_spans", f"--workdir={root / 'straight'}",
           "--length=24", "--examples=4"]
  out = subprocess.run(spans + ["--k=3"], cwd=REPO, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0 and out.stdout.count("\n| 3 | ") == 1, out.stderr[-2000:]
  out = subprocess.run(spans + ["--k=3,x"], cwd=REPO, capture_output=True, text=True,
                       timeout=300)
  assert out.returncode == 1 and "error: --k takes whole numbers" in out.stderr
  with pytest.raises(FileNotFoundError, match="not a picking run"):
    load_picking_run(str(tmp_path))
  (tmp_path / "config.json").write_text(json.dumps({"model": {"kind": "fhe"}, "lr": 1}))
  with pytest.raises(ValueError, match="config.json: not a picking run's config"):
    load_picking_run(str(tmp_path))
  (tmp_path / "config.json").write_text(json.dumps(config.to_dict()))
  with pytest.raises(FileNotFoundError, match="no best variables yet"):
    load_picking_run(str(tmp_path))
