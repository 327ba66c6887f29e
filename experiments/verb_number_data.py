r"""The verb-number task's data files (`glomo_jax.classification.verb_number`).

  python -m experiments.verb_number_data \
      --corpus='../shared/data/wiki_text/enwiki2015_wikiextractor_part[45678].jsonl.xz' \
      --conllu_train=../shared/data/ud_english_ewt/en_ewt-ud-train.conllu.gz \
      --conllu_dev=../shared/data/ud_english_ewt/en_ewt-ud-dev.conllu.gz \
      --out=runs/verb_number_data

Writes under --out (gzip JSON lines):
* wiki_train.jsonl.gz, wiki_test.jsonl.gz: raw-text examples labelled by the
  rule (`verb_number_sources.rule_label`), one verb per sentence; every
  `test_every`-th document goes to test, so no article is in both. Parts
  4–8 of the local Wikipedia: the pretraining presets read parts 1–3.
* ud_train.jsonl.gz, ud_dev.jsonl.gz, ud_all.jsonl.gz (train + dev): gold
  examples of the treebank (subject, attractors, tree);
* ud_fit.jsonl.gz, ud_heldout.jsonl.gz: the gold instances of train's first
  `fit_fraction` of sentences, and of the rest of train plus dev: an oracle
  experiment with more held-out attractor instances than dev alone has;
* summary.json: counts, the attractor and distance profile of each gold set,
  and the rule's label accuracy against the treebank's gold subjects.
Rerunning rewrites the files (each written atomically).
"""
from __future__ import annotations

import collections
import gzip
import json
import os

from absl import flags

from experiments import cli

_CORPUS = flags.DEFINE_list("corpus", None, "Glob(s) of raw-text corpus files "
                            "(jsonl, text, wikitext; .gz/.xz) for the rule-labelled sets.")
_TEXT_FIELD = flags.DEFINE_string("text_field", "text", "The text field of jsonl documents.")
_CONLLU_TRAIN = flags.DEFINE_string("conllu_train", None, "Treebank train .conllu(.gz).")
_CONLLU_DEV = flags.DEFINE_string("conllu_dev", None, "Treebank dev .conllu(.gz).")
_OUT = flags.DEFINE_string("out", None, "Output directory.")
_MAX_TRAIN = flags.DEFINE_integer("max_train", 100_000, "Rule-labelled training examples.")
_MAX_TEST = flags.DEFINE_integer("max_test", 10_000, "Rule-labelled held-out examples.")
_TEST_EVERY = flags.DEFINE_integer("test_every", 10, "Every n-th document is held out.")
_HAVE = flags.DEFINE_bool("have_forms", True, "Also has / have (as well as is / are / was / "
                          "were).")
_MAX_WORDS = flags.DEFINE_integer("max_words", 50, "Skip sentences of more tokens.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the verb drawn in each sentence.")
_FIT = flags.DEFINE_float("fit_fraction", 2 / 3, "Share of the treebank's train sentences "
                          "in ud_fit (the rest, and dev, in ud_heldout).")
flags.mark_flags_as_required(["out"])


def write_jsonl(path: str, examples) -> int:
  """Writes `examples` as gzip JSON lines, atomically; returns the count."""
  from glomo_jax.io import write_bytes  # noqa: PLC0415
  rows = [json.dumps(e, ensure_ascii=False) + "\n" for e in examples]
  write_bytes(path, gzip.compress("".join(rows).encode("utf-8"), mtime=0))
  return len(rows)


def profile(examples) -> dict:
  """Counts of a gold set by attractors and by subject distance."""
  attractors = collections.Counter(min(e["attractors"], 3) for e in examples)
  distance = collections.Counter(e["verb"] - e["subject"] for e in examples)
  return {"examples": len(examples), "plural": sum(e["label"] for e in examples),
          "attractors": {"0": attractors[0], "1": attractors[1], "2": attractors[2],
                         "3+": attractors[3]},
          "distance": {"1": distance[1], "2-3": distance[2] + distance[3],
                       "4+": sum(v for k, v in distance.items() if k >= 4)}}


def text_sets(summary: dict) -> None:
  import numpy as np  # noqa: PLC0415

  from glomo_jax.data.corpus import CorpusSpec, iter_documents  # noqa: PLC0415
  from glomo_jax.classification.verb_number_sources import text_examples  # noqa: PLC0415
  spec = CorpusSpec(source="files", pattern=tuple(_CORPUS.value), text_field=_TEXT_FIELD.value)
  rng = np.random.default_rng(_SEED.value)
  sets = {"train": [], "test": []}
  limits = {"train": _MAX_TRAIN.value, "test": _MAX_TEST.value}
  number = -1
  for number, text in enumerate(iter_documents(spec)):
    name = "test" if number % _TEST_EVERY.value == _TEST_EVERY.value - 1 else "train"
    if len(sets[name]) < limits[name]:
      sets[name].extend(text_examples([text], have_forms=_HAVE.value,
                                      max_words=_MAX_WORDS.value, rng=rng))
    if all(len(sets[n]) >= limits[n] for n in sets):
      break
  for name, examples in sets.items():
    examples = examples[:limits[name]]
    summary[f"wiki_{name}"] = {"examples": write_jsonl(
        os.path.join(_OUT.value, f"wiki_{name}.jsonl.gz"), examples),
        "plural": sum(e["label"] for e in examples)}
  summary["wiki_documents_read"] = number + 1


def treebank_sets(summary: dict) -> None:
  from glomo_jax.eval.conllu import read_conllu  # noqa: PLC0415
  from glomo_jax.classification.verb_number_sources import (rule_accuracy,  # noqa: PLC0415
                                                            treebank_examples)
  every, fit, heldout = [], [], []
  for name, path in (("train", _CONLLU_TRAIN.value), ("dev", _CONLLU_DEV.value)):
    if not path:
      continue
    sentences = list(read_conllu(path))
    examples = list(treebank_examples(sentences))
    every += examples
    cut = int(len(sentences) * _FIT.value) if name == "train" else 0
    fit += list(treebank_examples(sentences[:cut]))
    heldout += list(treebank_examples(sentences[cut:]))
    write_jsonl(os.path.join(_OUT.value, f"ud_{name}.jsonl.gz"), examples)
    summary[f"ud_{name}"] = profile(examples)
    summary[f"rule_accuracy_{name}"] = {
        "be": rule_accuracy(sentences), "be_and_have": rule_accuracy(sentences, True)}
  for name, examples in (("all", every), ("fit", fit), ("heldout", heldout)):
    if examples:
      write_jsonl(os.path.join(_OUT.value, f"ud_{name}.jsonl.gz"), examples)
      summary[f"ud_{name}"] = profile(examples)


def main(argv):
  del argv
  from glomo_jax.io import write_json  # noqa: PLC0415
  os.makedirs(_OUT.value, exist_ok=True)
  summary: dict = {}
  if _CORPUS.value:
    text_sets(summary)
  treebank_sets(summary)
  write_json(os.path.join(_OUT.value, "summary.json"), summary)
  print(json.dumps(summary, indent=1))


if __name__ == "__main__":
  cli.run(main)
