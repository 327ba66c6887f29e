"""experiments/classify.py and glomo_jax.classification.run_classification end
to end on tiny local files: the baseline from the command line (with a test split), the
'embeddings' variant with a tiny exported predictor and its on-disk graph
cache (train-only data), the configs, the errors raised before any work, and
the grid of variants and seeds."""
import importlib
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from conftest import REPO, nli_records, reviews, write_jsonl

sys.path.insert(0, REPO)

from experiments import kinds  # noqa: E402
from experiments.configs import agreement as agreement_config  # noqa: E402
from experiments.configs import imdb as imdb_config  # noqa: E402
from experiments.configs import mnli as mnli_config  # noqa: E402
from glomo_jax.classification import ClassificationConfig, run_classification  # noqa: E402
from glomo_jax.transfer.options import TEXT_VARIANTS  # noqa: E402

KEYS = {"task", "variant", "seed", "validation_accuracy", "best_step", "steps",
        "stopped_early", "wall_time_s", "train_time_s", "examples", "vocabulary",
        "glove", "predictor", "curves", "config"}


def _glove(path, words, dim):
  rng = np.random.default_rng(0)
  with open(path, "w", encoding="utf-8") as f:
    for w in words:
      f.write(w + " " + " ".join(f"{v:.4f}" for v in rng.normal(size=dim)) + "\n")
  return str(path)


def run(config, workdir):
  """run_classification on one device (cheaper compiles)."""
  return run_classification(ClassificationConfig.from_dict(config.to_dict()), str(workdir),
                            devices=jax.devices()[:1])


@pytest.mark.parametrize("name", kinds.configs_of("classify"))
@pytest.mark.parametrize("arg", ["", "tiny"])
def test_classification_configs_load(name, arg):
  module = importlib.import_module(f"experiments.configs.{name}")
  config = module.get_config(arg)
  assert config.task == name and config.variant in TEXT_VARIANTS
  ClassificationConfig.from_dict(config.to_dict())  # every field is a ClassificationConfig field
  assert "corpus" not in config  # not a pretraining config (tests/test_configs.py)
  assert config.files.train is None  # no default data path
  assert config.graph_cache_dir is None and config.predictor_export is None
  assert (config.source == "synthetic") == (name == "agreement")
  config.files.train = "x.jsonl"
  config.loop.patience = None  # optional fields take None and their type
  config.loop.num_steps = 3
  if arg == "tiny":
    assert config.loop.num_steps and config.model.hidden <= 32
  with pytest.raises(ValueError, match="unknown"):
    module.get_config("nonsense")


def test_baseline_from_the_command_line_reports_test_accuracy(tmp_path):
  train = write_jsonl(tmp_path / "train.jsonl", reviews(48, 0))
  test = write_jsonl(tmp_path / "test.jsonl", reviews(12, 1))
  glove = _glove(tmp_path / "glove.txt", ["great", "awful", "movie", "the"], 16)
  workdir = tmp_path / "run"
  out = subprocess.run(
      [sys.executable, "-m", "experiments.classify",
       "--config=experiments/configs/imdb.py:tiny", f"--workdir={workdir}",
       f"--config.files.train={train}", f"--config.files.test={test}",
       f"--config.glove_path={glove}", "--config.seed=1", "--config.loop.num_steps=4",
       "--config.loop.eval_every=2"],
      cwd=REPO, capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr[-3000:]
  results = json.loads((workdir / "results.json").read_text())
  assert KEYS <= set(results) and "note" not in results
  assert (results["task"], results["variant"], results["seed"]) == ("imdb", "baseline", 1)
  assert 0 <= results["validation_accuracy"] <= 1 and 0 <= results["test"] <= 1
  assert results["examples"] == {"train": 43, "validation": 5, "test": 12}
  assert results["steps"] == 4 and results["best_step"] in (2, 4)
  assert [c["step"] for c in results["curves"]] == [2, 4]
  assert results["config"]["glove_path"] == glove and "4/" in results["glove"]
  assert results["predictor"] is None
  assert json.loads(out.stdout)["test"] == results["test"]  # printed too
  # besides results.json: what the run needs to resume, its curves, compiled steps
  run_files = {"best", "checkpoints", "config.json", "results.json", "tensorboard"}
  assert run_files <= set(os.listdir(workdir)) <= run_files | {"compile_cache"}


def test_embeddings_variant_with_a_predictor_and_train_only_data(tmp_path, tiny_export):
  config = mnli_config.get_config("tiny")
  config.files.train = write_jsonl(tmp_path / "train.jsonl", nli_records(3))
  config.variant = "embeddings"
  config.predictor_export = tiny_export
  config.val_fraction = 0.25
  config.loop.num_steps, config.loop.eval_every, config.optim.batch_size = 2, 1, 8
  workdir = str(tmp_path / "run")
  results = run(config, workdir)
  assert json.loads(open(os.path.join(workdir, "results.json")).read()) == json.loads(
      json.dumps(results, default=str))
  assert KEYS <= set(results)
  assert results["variant"] == "embeddings" and "glomo" not in results
  assert results["matched"] is None and results["mismatched"] is None
  assert "its accuracy is not reported" in results["note"]
  assert 0 <= results["validation_accuracy"] <= 1
  assert results["examples"] == {"train": 18, "validation": 6}
  assert results["predictor"] == os.path.abspath(tiny_export)
  # one on-disk cache per split and text field, under <workdir>/graph_cache
  caches = os.listdir(os.path.join(workdir, "graph_cache"))
  assert len(caches) == 4
  assert results["config"]["graph_cache_dir"] is None
  # the predictor read the raw texts (graph_text 'raw', the default)
  metas = [json.loads(open(os.path.join(workdir, "graph_cache", c, "meta.json")).read())
           for c in caches]
  assert all(m["text_fingerprint"] and not m["self_loops"] for m in metas)


def test_agreement_task_with_graphs_of_a_predictor_that_never_saw_its_words(tmp_path,
                                                                             tiny_export):
  """The demo's transfer run, GLoMo on the built-in agreement task with the
  graphs of a predictor whose tokenizer has never seen the words: they still
  align, every word has pieces. (The baseline, uniform and oracle runs of the
  same task: tests/test_configs.py, the demo end to end.)"""
  config = agreement_config.get_config("tiny")
  config.variant, config.predictor_export = "embeddings", tiny_export
  results = run(config, tmp_path / "embeddings")
  assert (results["task"], results["variant"]) == ("agreement", "embeddings")
  assert results["graph_source"] == "predictor"
  assert results["examples"] == {"train": 64, "validation": 32, "test": 32}
  assert 0 <= results["test"] <= 1 and "note" not in results
  assert results["predictor"] == os.path.abspath(tiny_export)


def test_data_efficiency_curve_runs_the_variants_and_the_oracle(tmp_path, tiny_export):
  root = tmp_path / "curve"
  cmd = [sys.executable, "-m", "experiments.data_efficiency", f"--export={tiny_export}",
         f"--root={root}", "--sizes=32", "--seeds=0", "--variants=baseline",
         "--steps=2", "--preset=tiny"]   # several sizes: the real-text test below
  out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
  examples = json.loads((root / "n32" / "arcs" / "embeddings_s0" / "results.json")
                        .read_text())
  assert examples["graph_source"] == "arcs" and examples["examples"]["train"] == 32
  assert examples["steps"] == 2
  lines = (root / "curve.md").read_text().splitlines()
  assert lines[0] == ("| training sentences | baseline (no graph) | "
                      "planted arcs as graphs (oracle) |")
  assert lines[2].startswith("| 32 | ") and lines[2].count("|") == 4   # two variants
  assert (root / "curve.png").stat().st_size > 1000


def test_data_efficiency_curve_on_real_text_carves_a_test_split(tmp_path, tiny_export):
  train = write_jsonl(tmp_path / "train.jsonl", reviews(60, 0))
  root = tmp_path / "curve"
  cmd = [sys.executable, "-m", "experiments.data_efficiency", "--task=imdb",
         f"--export={tiny_export}", f"--root={root}", "--sizes=8,16", "--seeds=0",
         "--variants=embeddings", "--steps=2", "--preset=tiny", "--",
         f"--config.files.train={train}"]
  out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
  results = [json.loads((root / f"n{n}" / "embeddings_s0" / "results.json").read_text())
             for n in (8, 16)]
  # validation carved from all 60 reviews (0.1: 6), then a 0.1 share of the
  # rest as test (5), the same for every size
  assert [r["examples"] for r in results] == [
      {"train": n, "validation": 6, "test": 5} for n in (8, 16)]
  assert all(0 <= r["test"] <= 1 and "carved from train" in r["note"] for r in results)
  assert all(r["config"]["graph_cache_dir"] == str(root / "graph_cache") for r in results)
  # one cache per train subset; validation's and test's shared by the sizes
  assert len(os.listdir(root / "graph_cache")) == 4
  lines = (root / "curve.md").read_text().splitlines()
  assert lines[0] == "| training reviews | GLoMo on embeddings |"
  assert lines[2].startswith("| 8 | ") and lines[3].startswith("| 16 | ")
  assert "test accuracy in % (5 examples, chance 50)" in lines[5]


def test_data_efficiency_reads_each_tasks_held_out_split_and_names_what_is_missing(tmp_path):
  from experiments import curves  # noqa: PLC0415
  mnli = curves.TASKS["mnli"]
  for seed, (matched, train) in enumerate([(0.5, 100), (0.25, 100)]):
    run = tmp_path / "n100" / f"baseline_s{seed}"
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps(
        {"seed": seed, "validation_accuracy": 0.9, "matched": matched, "mismatched": None,
         "examples": {"train": train, "validation": 9, "matched": 8}}))
  assert curves.collect(str(tmp_path), [100], ["baseline"], mnli.held_out) == {
      100: {"baseline": [50.0, 25.0]}}
  assert curves.held_out_size(str(tmp_path), [100], ["baseline"], "matched") == 8
  table = curves.curve_table({100: {"baseline": [50.0, 25.0]}}, ["baseline"], 10,
                                      mnli, 8)
  assert "| training pairs | baseline (no graph) |" in table
  assert "| 100 | 37.5 ± 17.7 (50.0, 25.0) |" in table
  assert "matched accuracy in % (8 examples, chance 33)" in table
  with pytest.raises(ValueError, match="no test accuracy.*files.test"):
    curves.collect(str(tmp_path), [100], ["baseline"], "test")
  (tmp_path / "n200").mkdir()
  (tmp_path / "n100").rename(tmp_path / "n200" / "x")
  (tmp_path / "n200" / "x" / "baseline_s0").rename(tmp_path / "n200" / "baseline_s0")
  with pytest.raises(ValueError, match="more than the training split holds .100 examples"):
    curves.collect(str(tmp_path), [200], ["baseline"], "matched")


def test_errors_before_any_work(tmp_path):
  config = imdb_config.get_config("tiny")
  with pytest.raises(ValueError, match="files.train"):
    run(config, tmp_path / "a")
  config.source = "synthetic"
  with pytest.raises(ValueError, match="agreement"):
    run(config, tmp_path / "a")
  config.source = "files"
  config.files.train = "train.jsonl"
  config.variant = "embeddings"
  with pytest.raises(ValueError, match="predictor_export"):
    run(config, tmp_path / "b")
  config.variant, config.files.matched = "baseline", "m.jsonl"
  with pytest.raises(ValueError, match="no split"):
    run(config, tmp_path / "c")
  config.files.matched, config.variant = None, "nonsense"
  with pytest.raises(ValueError, match="unknown variant"):
    run(config, tmp_path / "d")
  config.variant, config.model.transfer.apply_as = "embeddings", "dense"
  with pytest.raises(ValueError, match="model.transfer.apply_as 'dense'"):
    run(config, tmp_path / "d")
  config.model.transfer.apply_as = "auto"
  config.variant, config.graph_source = "embeddings", "arcs"
  with pytest.raises(ValueError, match="only the agreement task"):
    run(config, tmp_path / "e")
  config.variant, config.graph_source, config.test_fraction = "baseline", "predictor", 0.1
  config.files.test = "t.jsonl"
  with pytest.raises(ValueError, match="test_fraction carves the 'test' split"):
    run(config, tmp_path / "f")
  config.files.test, config.test_fraction = None, 1.0
  with pytest.raises(ValueError, match=r"test_fraction must be in \(0, 1\)"):
    run(config, tmp_path / "f")
  assert not os.listdir(tmp_path)


def test_grid_runs_variants_and_seeds_resumes_and_tabulates(tmp_path):
  import shutil  # noqa: PLC0415
  root = tmp_path / "grid"
  cmd = [sys.executable, "-m", "experiments.classify_grid",
         "--config=experiments/configs/agreement.py:tiny", f"--root={root}",
         "--variants=baseline,uniform", "--seeds=0,1",
         f"--parallel={2 if shutil.which('taskset') else 1}", "--",
         "--config.loop.num_steps=2", "--config.predictor_export=/nonexistent"]
  out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
  runs = sorted(os.listdir(root))
  assert runs == ["baseline_s0", "baseline_s1", "table.md", "uniform_s0", "uniform_s1"]
  seeds = [json.loads((root / r / "results.json").read_text())["seed"] for r in runs[:2]]
  assert seeds == [0, 1]
  table = (root / "table.md").read_text()
  rows = [line for line in table.splitlines() if line.startswith("| baseline")
          or line.startswith("| uniform")]
  assert len(rows) == 2 and all("±" in r and "0,1" in r for r in rows)
  assert "predictor_export" not in table  # dropped for variants without graphs
  # each row's command carries every extra flag; seed and workdir are the reader's
  assert all("--config.loop.num_steps=2`" in r and "--config.seed" not in r
             and "--workdir" not in r for r in rows)
  again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
  assert again.returncode == 0 and again.stdout.count("done already") == 4


def test_grid_tabulates_squad_runs(tmp_path):
  for variant, seed, f1 in (("baseline", 0, 40.0), ("baseline", 1, 44.0), ("embeddings", 0, 41.5)):
    run_dir = tmp_path / f"{variant}_s{seed}"
    run_dir.mkdir()
    (run_dir / "results.json").write_text(json.dumps({
        "variant": variant, "seed": seed, "train_time_s": 600.0,
        "validation": {"exact_match": f1 - 10, "f1": f1},
        "dev": {"exact_match": f1 - 12, "f1": f1 - 1}}))
  out = subprocess.run([sys.executable, "-m", "experiments.classify_grid", "--entry=squad",
                        "--config=experiments/configs/squad.py:cpu", f"--root={tmp_path}",
                        "--variants=baseline,embeddings", "--table_only"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr[-2000:]
  lines = out.stdout.splitlines()
  assert lines[0].startswith("| variant | seeds | validation EM | validation F1 | dev EM | dev F1")
  assert "| baseline | 0,1 | 32.00 ± 2.83 | 42.00 ± 2.83 | 30.00 ± 2.83 | 41.00 ± 2.83 | 10.0 |" \
      in out.stdout and "python -m experiments.squad" in out.stdout
  assert "| embeddings | 0 | 31.50 | 41.50 | 29.50 | 40.50 |" in out.stdout


@pytest.mark.parametrize("pin", [True, False])
def test_grid_pins_parallel_runs_to_cores_unless_told_not_to(tmp_path, monkeypatch, pin):
  from experiments import grid  # noqa: PLC0415
  from glomo_jax.tuning import ONE_CORE_XLA_FLAGS  # noqa: PLC0415
  started = []

  class Finished:
    returncode = 0

    def __init__(self, cmd, env, **_):
      started.append((cmd, env.get("XLA_FLAGS", "")))

    def poll(self):
      return 0

  monkeypatch.setattr(grid.subprocess, "Popen", Finished)
  monkeypatch.setattr(grid.time, "sleep", lambda _: None)
  monkeypatch.setattr(grid.os, "cpu_count", lambda: 2)
  monkeypatch.delenv("XLA_FLAGS", raising=False)
  grid.run_grid("experiments/configs/agreement.py:tiny", str(tmp_path), ["baseline"], ["0", "1"],
                2, ["--config.loop.num_steps=2"], pin=pin)
  assert len(started) == 2
  assert all((cmd[:2] == ["taskset", "-c"]) == pin for cmd, _ in started)
  assert all((ONE_CORE_XLA_FLAGS in flags) == pin for _, flags in started)
  if pin:
    assert sorted(cmd[2] for cmd, _ in started) == ["0", "1"]   # one core each
