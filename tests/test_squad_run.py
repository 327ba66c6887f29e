"""SQuAD runs on the training loop: a tiny local JSON with graphs from a real
(tiny) predictor, TFDS under mock_data, resume, predictions.json, and
answering a question with the finished run."""
import dataclasses
import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest
import tensorflow_datasets as tfds

from glomo_jax.export import load_graph_predictor
from glomo_jax.squad import (Answerer, ReaderOptions, SquadConfig, SquadFiles, load_squad,
                             run_squad)
from glomo_jax.squad.batching import make_squad_batch
from glomo_jax.squad.run import squad_graphs
from glomo_jax.squad.task import PREDICTIONS_FILE
from glomo_jax.downstream.options import OptimOptions, TfdsOptions
from glomo_jax.train.config import DOWNSTREAM_LOOP
from glomo_jax.text.words import Vocabulary
from glomo_jax.transfer.options import TransferOptions
from conftest import REPO
from test_squad_parts import FACTS, squad_articles, tfds_squad_records, write_squad

ONE = jax.devices()[:1]
TINY_READER = ReaderOptions(embed_dim=8, char_dim=4, char_filters=6, hidden=6, dense=8,
                            transfer=TransferOptions(features=4))
TINY_OPTIM = OptimOptions(learning_rate=0.01, batch_size=4, eval_batch_size=8)
TINY_LOOP = dataclasses.replace(DOWNSTREAM_LOOP, num_steps=4, eval_every=2, log_every=2,
                                compile_fast=True)


def test_tiny_json_run_with_graphs_resumes_and_answers(tiny_export, tmp_path):
  train = write_squad(tmp_path / "train.json.gz")
  dev = write_squad(tmp_path / "dev.json", squad_articles(FACTS[:2]))
  config = SquadConfig(files=SquadFiles(train=train, dev=dev), val_questions=5,
                       max_context_words=21, length_multiple=8, model=TINY_READER,
                       variant="embeddings", predictor_export=tiny_export,
                       graph_cache_dtype="float32", optim=TINY_OPTIM, loop=TINY_LOOP)
  workdir = tmp_path / "run"
  results = run_squad(config, str(workdir), devices=ONE)
  assert results["steps"] == 4 and len(results["curves"]) == 2
  for split in ("validation", "dev"):
    assert 0.0 <= results[split]["exact_match"] <= results[split]["f1"] <= 100.0
  assert results["questions"] == {"train": 25, "validation": 5, "dev": 10}
  # second paragraphs have 22 words: cut to 21 and counted (2 of them, 2 questions
  # each, in dev); no answer lies beyond
  assert results["cut_passages"]["dev"] == 2 and results["train_left_out"] == 0
  assert results["questions_on_cut_passages"]["dev"] == 4
  with open(workdir / PREDICTIONS_FILE, encoding="utf-8") as f:
    predictions = json.load(f)
  assert sorted(predictions) == sorted(f"{n}-{k}" for n in range(2) for k in range(5))
  contexts = [p["context"] for a in squad_articles(FACTS[:2]) for p in a["paragraphs"]]
  assert all(any(text in c for c in contexts) for text in predictions.values())
  assert os.path.exists(workdir / "predictions" / "validation.json")
  # graphs: per paragraph and per question, one cache each per split
  assert len(os.listdir(workdir / "graph_cache")) == 3 * 2

  rerun = run_squad(config, str(workdir), devices=ONE)       # finished: no training
  scores = lambda r: {k: r["dev"][k] for k in ("exact_match", "f1")}  # noqa: E731
  assert scores(rerun) == scores(results) and rerun["steps"] == 4
  with pytest.raises(ValueError, match="another config"):
    run_squad(config.replace(max_span=5), str(workdir), devices=ONE)

  # graphs computed per batch equal the cached ones; by default the predictor
  # reads the texts as written, not the lower-cased words joined by spaces
  splits, _ = load_squad(config)
  predictor = load_graph_predictor(tiny_export)
  cached = squad_graphs(str(workdir / "graph_cache"), predictor, splits, config)
  words = config.replace(graph_text="words")
  cached_words = squad_graphs(str(tmp_path / "words_cache"), predictor, splits, words)
  batch = make_squad_batch(splits["dev"], [0, 1, 7, 3], Vocabulary([]), Vocabulary([]),
                           max_context_words=21, length_multiple=8, batch_size=5)
  for field, rows in (("context", batch["paragraph"]), ("question", batch["index"])):
    args = ("dev", field, rows, batch[field + "_mask"].sum(1), batch[field].shape[1])
    want = cached.batch(*args)
    assert want[:4].any() and not want[4].any()
    assert not np.allclose(cached_words.batch(*args), want)
    for c, reference in ((config, want), (words, cached_words.batch(*args))):
      fly = squad_graphs("", predictor, splits, c.replace(graphs_on_the_fly=True))
      np.testing.assert_allclose(fly.batch(*args), reference, rtol=1e-6, atol=1e-7)
  with pytest.raises(ValueError, match="graph_text"):
    config.replace(graph_text="pieces").check()
  with pytest.raises(ValueError, match="model.transfer.apply_as 'dense'"):
    config.replace(model=dataclasses.replace(config.model, transfer=TransferOptions(
        apply_as="dense"))).check()

  answerer = Answerer(str(workdir))
  passage = "Oslo is the capital of Norway. About 700,000 people live in Oslo."
  answer = answerer.answer(passage, "What is the capital of Norway?")
  assert answer.text == passage[answer.start:answer.end] and answer.text
  assert 0.0 < answer.probability <= 1.0
  with pytest.raises(FileNotFoundError, match="not a SQuAD run"):
    Answerer(str(tmp_path))
  other = tmp_path / "other_reader"          # variables of another reader's shapes
  shutil.copytree(workdir, other, ignore=shutil.ignore_patterns("graph_cache"))
  with open(other / "config.json", encoding="utf-8") as f:
    saved = json.load(f)
  saved["model"]["hidden"] += 1
  with open(other / "config.json", "w", encoding="utf-8") as f:
    json.dump(saved, f)
  with pytest.raises(ValueError, match=r"could not be restored into the reader .*\(params/"):
    Answerer(str(other))
  out = subprocess.run([sys.executable, "-m", "experiments.squad_answer", f"--workdir={workdir}",
                        f"--passage={passage}", "--question=Who lives in Oslo?"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  text = out.stdout.splitlines()[0].removeprefix("answer: ")
  assert text and text in passage and "probability" in out.stdout


def test_tfds_run_under_mock_data(tmp_path):
  records = tfds_squad_records()
  config = SquadConfig(source="tfds", tfds=TfdsOptions(reader="data_source"),
                       val_questions=5, model=TINY_READER, optim=TINY_OPTIM, loop=TINY_LOOP)
  with tfds.testing.mock_data(as_data_source_fn=lambda *a, **k: records):
    results = run_squad(config, str(tmp_path / "run"), devices=ONE)
  assert results["questions"] == {"train": 25, "validation": 5, "dev": 30}
  assert results["steps"] == 4 and 0.0 <= results["dev"]["f1"] <= 100.0


@pytest.mark.parametrize("arg", ["", "cpu", "tiny"])
def test_squad_configs_build(arg):
  from experiments.configs import squad  # noqa: PLC0415
  config = SquadConfig.from_dict(squad.get_config(arg).to_dict())
  assert config.max_span == 17 and config.max_word_chars == 14
  if arg == "":    # document-qa's published settings
    assert (config.optim.optimizer, config.optim.learning_rate, config.optim.batch_size,
            config.model.hidden, config.model.dense, config.model.dropout_rate) == (
                "adadelta", 1.0, 45, 100, 200, 0.2)
  with pytest.raises(ValueError, match="unknown squad preset"):
    squad.get_config("nonsense")
