"""Downstream training on the one loop (`glomo_jax.classification.run_classification`): a
tiny IMDB-style task is learned with frozen embeddings and early stopping;
graphs of a real exported predictor come from the graph cache; a run killed
with SIGKILL and resumed ends bit-identical to a straight run; 8 fake devices
give the result of one."""
import dataclasses
import json
import logging
import os
import subprocess
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from glomo_jax.export import load_graph_predictor
from glomo_jax.classification import (ClassificationConfig, ClassificationTask, build_model,
                                      load_task_data, run_classification)
from glomo_jax.graphs import TaskGraphs
from glomo_jax.text import embedding_matrix, make_batch
from glomo_jax.downstream.options import OptimOptions
from glomo_jax.train.config import DOWNSTREAM_LOOP
from glomo_jax.classification.config import ClassifierOptions, TaskFiles
from glomo_jax.transfer.options import TransferOptions
from glomo_jax.graphs.unit_graphs import word_graphs
from conftest import (REPO, assert_trees_equal, kill_during_run, kill_seed, nli_records, reviews,
                      write_jsonl)

ONE = jax.devices()[:1]  # in-process runs on one device: cheaper compiles


def imdb_config(tmp_path, **changes) -> ClassificationConfig:
  files = TaskFiles(train=write_jsonl(tmp_path / "train.jsonl", reviews(64, 0)),
                    test=write_jsonl(tmp_path / "test.jsonl", reviews(20, 1)))
  # max_words = length_multiple: one padded length, one compiled step
  config = ClassificationConfig(
      task="imdb", files=files, val_fraction=0.25, max_words=12, length_multiple=12,
      model=ClassifierOptions(embed_dim=16, hidden=16, dropout_rate=0.1,
                              freeze_embeddings=True, oov_scale=0.5),
      optim=OptimOptions(learning_rate=0.01, batch_size=8, eval_batch_size=8),
      loop=dataclasses.replace(DOWNSTREAM_LOOP, epochs=12, eval_every=6, patience=4,
                               log_every=2, compile_fast=True))
  return config.replace(**changes)


def saved_params(workdir, which, step):
  return ocp.StandardCheckpointer().restore(
      os.path.join(workdir, which, str(step), "state"))["params"]


def test_imdb_learns_a_tiny_task_with_frozen_embeddings_and_early_stopping(tmp_path, caplog,
                                                                          monkeypatch):
  config = imdb_config(tmp_path)
  workdir = str(tmp_path / "run")
  traces, loss = [], ClassificationTask.loss
  monkeypatch.setattr(ClassificationTask, "loss",
                      lambda self, *a: traces.append(1) or loss(self, *a))
  with caplog.at_level(logging.INFO, logger="glomo_jax.train"):
    results = run_classification(config, workdir, devices=ONE)
  # traced once for the step's metric shapes, and that trace is compiled
  # (`train.step.jitted_train_step`: the real state has the abstract one's types)
  assert len(traces) == 1
  progress = [r.getMessage() for r in caplog.records if "steps/s" in r.getMessage()]
  assert progress and all("ETA" in p for p in progress)
  assert "(1 compiled step shape)" in progress[-1]           # one padded length
  assert results["validation_accuracy"] >= 0.9 and results["test"] >= 0.9, results["curves"]
  curves = results["curves"]
  assert [c["step"] for c in curves] == list(range(6, results["steps"] + 1, 6))
  assert curves[-1]["train_loss"] < curves[0]["train_loss"]
  best = max(c["validation_accuracy"] for c in curves)
  assert results["validation_accuracy"] == best
  assert results["best_step"] == next(c["step"] for c in curves
                                      if c["validation_accuracy"] == best)
  if results["stopped_early"]:  # patience 4: the last 4 evaluations did not improve
    assert len(curves) - [c["step"] for c in curves].index(results["best_step"]) - 1 == 4
  # frozen: the best variables hold the initial (random, oov_scale 0.5) table
  data = load_task_data(config)
  vocab = data.build_vocabulary()
  table, _ = embedding_matrix(vocab, None, dim=16, oov_scale=0.5, seed=0)
  params = saved_params(workdir, "best", results["best_step"])
  np.testing.assert_array_equal(params["embed"]["embedding"], table)
  kept = sorted(int(d) for d in os.listdir(os.path.join(workdir, "best")) if d.isdigit())
  assert results["best_step"] in kept and max(kept) == results["best_step"]
  # the reported test accuracy is that of the best variables
  task = ClassificationTask(build_model(config, data, len(vocab), table), data, vocab, config)
  eval_step = jax.jit(task.eval_step)
  variables = {"params": params, "batch_stats": {}}
  again = task.evaluate("test", lambda batch: jax.device_get(eval_step(variables, batch)))
  assert again["accuracy"] == pytest.approx(results["test"])
  # a rerun of the finished run trains nothing and reports the same
  rerun = run_classification(config, workdir, devices=ONE)
  assert {k: rerun[k] for k in ("validation_accuracy", "test", "best_step", "steps")} == {
      k: results[k] for k in ("validation_accuracy", "test", "best_step", "steps")}


def test_esim_with_graphs_from_a_real_predictor(tiny_export, tmp_path):
  files = TaskFiles(train=write_jsonl(tmp_path / "train.jsonl", nli_records(2)),
                    matched=write_jsonl(tmp_path / "m.jsonl", nli_records()[:5]),
                    mismatched=write_jsonl(tmp_path / "mm.jsonl", nli_records()[5:]))
  config = ClassificationConfig(
      task="mnli", files=files, val_fraction=0.25, max_words=10, length_multiple=10,
      variant="embeddings", predictor_export=tiny_export, graph_cache_dtype="float32",
      model=ClassifierOptions(embed_dim=8, hidden=8, dropout_rate=0.1,
                              transfer=TransferOptions(features=4)),
      optim=OptimOptions(learning_rate=0.01, batch_size=8, eval_batch_size=8), seed=1,
      loop=dataclasses.replace(DOWNSTREAM_LOOP, num_steps=6, eval_every=3, log_every=3,
                               compile_fast=True))
  workdir = tmp_path / "run"
  results = run_classification(config, str(workdir), devices=ONE)
  assert all(0.0 <= results[k] <= 1.0 for k in ("validation_accuracy", "matched", "mismatched"))
  assert len(results["curves"]) == 2
  assert "transfer" in saved_params(str(workdir), "best", results["best_step"])
  # one cache per split and text field, holding the predictor's word graphs
  assert len(os.listdir(workdir / "graph_cache")) == 4 * 2
  data = load_task_data(config)
  vocab = data.build_vocabulary()
  predictor = load_graph_predictor(tiny_export)
  graphs = TaskGraphs.build(str(workdir / "graph_cache"), predictor, data, 10, dtype="float32")
  batch = make_batch(data["matched"], [3, 0], vocab, max_words=10, length_multiple=10)
  for f in data.text_fields:
    got = graphs.batch("matched", f, batch["index"], batch[f + "_mask"].sum(1), 10)
    want, _ = word_graphs(predictor, None, [data["matched"].texts[f][i] for i in (3, 0)], 10)
    assert got.shape == (2, 4, 4, 10, 10) and got.any() and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
  # the run's float16 caches: batches in float16, as stored; a padding row is 0
  half = TaskGraphs.build(str(workdir / "graph_cache"), predictor, data, 10,
                          raw_text=config.graph_text == "raw")
  assert len(os.listdir(workdir / "graph_cache")) == 4 * 2 * 2
  lengths = batch["premise_mask"].sum(1)
  padded = half.batch("matched", "premise", np.array([3, -1]), lengths, 10)
  whole = half.batch("matched", "premise", batch["index"], lengths, 10)
  assert padded.dtype == whole.dtype == np.float16
  np.testing.assert_array_equal(padded[0], whole[0])
  assert whole[1].any() and not padded[1].any()
  lengths = batch["premise_mask"].sum(1)
  with pytest.raises(ValueError, match="holds 3 examples"):
    TaskGraphs({"matched": graphs.caches["mismatched"]}).batch(
        "matched", "premise", batch["index"], lengths, 10)
  with pytest.raises(ValueError, match="does not match the data"):
    graphs.batch("matched", "premise", np.array([0, 1]), lengths, 10)
  model = build_model(config, data, len(vocab), np.zeros((len(vocab), 8), np.float32), 2)
  with pytest.raises(ValueError, match="reads predictor graphs"):
    ClassificationTask(model, data, vocab, config)


def transfer_cmd(workdir, train, test):
  return [sys.executable, "-m", "experiments.classify",
          "--config=experiments/configs/imdb.py:tiny", f"--workdir={workdir}",
          f"--config.files.train={train}", f"--config.files.test={test}",
          "--config.loop.num_steps=16", "--config.loop.eval_every=4",
          # reports every 3 steps, saves every 2: a resumed run's report
          # intervals must still be the straight run's (the curves' means)
          "--config.loop.checkpoint_every=2", "--config.loop.log_every=3"]


def test_downstream_run_killed_at_a_random_moment_resumes_bit_identical(tmp_path):
  train = write_jsonl(tmp_path / "train.jsonl", reviews(80, 0))
  test = write_jsonl(tmp_path / "test.jsonl", reviews(16, 1))
  straight, killed = tmp_path / "straight", tmp_path / "killed"
  run = lambda cmd: subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,  # noqa: E731
                                   timeout=600)
  out = run(transfer_cmd(straight, train, test))
  assert out.returncode == 0, out.stderr[-3000:]

  seed = kill_seed("test_downstream_run_killed_at_a_random_moment")
  print(f"kill seed {seed} (GLOMO_JAX_KILL_SEED={seed} replays this test's kill point)")
  kill_during_run(transfer_cmd(killed, train, test), killed / "checkpoints", 13, seed)
  out = run(transfer_cmd(killed, train, test))
  assert out.returncode == 0, out.stderr[-3000:]
  assert "resumed from the checkpoint at step" in out.stderr

  assert_trees_equal(*(ocp.StandardCheckpointer().restore(d / "checkpoints" / "16" / "state")
                       for d in (straight, killed)))
  timing = ("train_time_s", "wall_time_s")
  ra, rb = (json.loads((d / "results.json").read_text()) for d in (straight, killed))
  assert {k: v for k, v in ra.items() if k not in timing} == {
      k: v for k, v in rb.items() if k not in timing}
  best = ra["best_step"]
  assert_trees_equal(saved_params(str(straight), "best", best),
                     saved_params(str(killed), "best", best))


def test_downstream_run_on_eight_devices_matches_one_device(tmp_path):
  assert jax.device_count() >= 8, "run with XLA_FLAGS=--xla_force_host_platform_device_count=8"
  config = imdb_config(tmp_path)
  config = config.replace(
      optim=OptimOptions(learning_rate=0.01, batch_size=8, eval_batch_size=8),
      loop=dataclasses.replace(config.loop, num_steps=4, epochs=None, eval_every=2,
                               log_every=2, patience=None))
  one = run_classification(config, str(tmp_path / "one"), devices=jax.devices()[:1])
  eight = run_classification(config, str(tmp_path / "eight"), devices=jax.devices()[:8])
  np.testing.assert_allclose([c["train_loss"] for c in one["curves"]],
                             [c["train_loss"] for c in eight["curves"]], rtol=1e-5)
  assert [c["validation_accuracy"] for c in one["curves"]] == [
      c["validation_accuracy"] for c in eight["curves"]]
  assert one["test"] == eight["test"]
  a, b = (saved_params(str(tmp_path / d), "checkpoints", 4) for d in ("one", "eight"))
  compared = 0
  for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree_util.tree_leaves(b)):
    name = jax.tree_util.keystr(path)
    if "'self_attention']['query'" in name:
      # the self-attention's query term w1·h_i is constant along the softmax's
      # axis j: its gradient is 0 in exact arithmetic, float noise here, and
      # Adam turns noise of either sign into full-size steps
      continue
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-6, err_msg=name)
    compared += 1
  assert compared >= 10
  with pytest.raises(ValueError, match="cannot be split over the 8 devices"):
    run_classification(config.replace(optim=OptimOptions(batch_size=6),
                                      loop=dataclasses.replace(config.loop, num_steps=1)),
                 str(tmp_path / "bad"), devices=jax.devices()[:8])
