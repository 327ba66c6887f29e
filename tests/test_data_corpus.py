"""Corpus readers: local files in every layout, TFDS, errors, sharding."""
import bz2
import gzip
import json
import logging
import lzma
import pathlib

import numpy as np
import pytest
import tensorflow_datasets as tfds

from glomo_jax.data import synthetic
from glomo_jax.data.corpus import (CorpusSpec, CorpusStats, file_format_of,
                                   load_documents)
from glomo_jax.errors import InputError
from glomo_jax.text.readers import numbered_jsonl

SHARED_DATA = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data"
OPENERS = {"": open, ".gz": gzip.open, ".xz": lzma.open, ".bz2": bz2.open}


def write(path, data: bytes):
  suffix = next((s for s in (".gz", ".xz", ".bz2") if str(path).endswith(s)), "")
  with OPENERS[suffix](path, "wb") as f:
    f.write(data)
  return path


def files_spec(pattern, **kw):
  return CorpusSpec(source="files", pattern=str(pattern), **kw)


@pytest.mark.parametrize("suffix", ["", ".gz", ".xz", ".bz2"])
def test_plain_text_one_document_per_file(tmp_path, suffix):
  write(tmp_path / f"b.txt{suffix}", "Second document.\nIts second line.\n".encode())
  write(tmp_path / f"a.txt{suffix}", "  First document, naïve café.  \n".encode())
  write(tmp_path / f"c.txt{suffix}", b"  \n\n")
  stats = CorpusStats()
  docs = load_documents(files_spec(tmp_path / "*.txt*"), stats=stats)
  assert docs == ["First document, naïve café.", "Second document.\nIts second line."]
  assert (stats.documents, stats.empty_documents, stats.files) == (2, 1, 3)
  assert stats.characters == sum(len(d) for d in docs)


@pytest.mark.parametrize("suffix", ["", ".gz", ".xz"])
def test_jsonl_with_a_configurable_text_field(tmp_path, suffix):
  rows = [{"id": 1, "body": "alpha beta"}, {"id": 2, "body": "gamma\ndelta"},
          {"id": 3, "body": ""}]
  data = "\n".join(json.dumps(r) for r in rows) + "\n\n"
  write(tmp_path / f"x.jsonl{suffix}", data.encode())
  docs = load_documents(files_spec(tmp_path / "x.jsonl*", text_field="body"))
  assert docs == ["alpha beta", "gamma\ndelta"]


WIKITEXT = """ 
 = Robert Boulter = 
 
 Robert Boulter is an English film and television actor . 
 
 = = Career = = 
 
 In 2000 Boulter had a guest @-@ starring role . 
 = = = 2006 – present = = = 
 Boulter starred in the play Herons . 
 
 = Du Fu = 
 
 Du Fu was a prominent Chinese poet . 
"""


@pytest.mark.parametrize("name", ["wiki.valid.tokens", "wiki.valid.tokens.gz",
                                  "wiki.tokens.xz"])
def test_wikitext_layout_splits_articles_at_top_level_titles(tmp_path, name):
  write(tmp_path / name, ("intro line before any title\n" + WIKITEXT).encode())
  docs = load_documents(files_spec(tmp_path / name))
  assert len(docs) == 3
  assert docs[0] == "intro line before any title"
  assert docs[1].split("\n") == [
      "= Robert Boulter =", "Robert Boulter is an English film and television actor .",
      "= = Career = =", "In 2000 Boulter had a guest @-@ starring role .",
      "= = = 2006 – present = = =", "Boulter starred in the play Herons ."]
  assert docs[2] == "= Du Fu =\nDu Fu was a prominent Chinese poet ."


def test_format_detection_and_explicit_format(tmp_path):
  assert file_format_of("a/b.jsonl.xz") == "jsonl"
  assert file_format_of("a/b.json") == "jsonl"
  assert file_format_of("wiki.train.tokens.gz") == "wikitext"
  assert file_format_of("notes.txt.bz2") == "text"
  assert file_format_of("README") == "text"
  # An explicit format overrides the name: a .txt file read as WikiText.
  write(tmp_path / "w.txt", WIKITEXT.encode())
  assert len(load_documents(files_spec(tmp_path / "w.txt", file_format="wikitext"))) == 2
  assert len(load_documents(files_spec(tmp_path / "w.txt"))) == 1


def test_several_globs_and_shards_are_disjoint_and_covering(tmp_path):
  for i in range(5):
    write(tmp_path / f"d{i}.txt", f"document {i}".encode())
  write(tmp_path / "e.jsonl", "\n".join(json.dumps({"text": f"line {j}"})
                                        for j in range(6)).encode())
  spec = CorpusSpec(source="files", pattern=(str(tmp_path / "*.txt"),
                                             str(tmp_path / "*.jsonl")))
  everything = load_documents(spec)
  assert len(everything) == 11
  shards = [load_documents(spec, i, 3) for i in range(3)]
  assert sorted(sum(shards, [])) == sorted(everything)
  assert all(len(s) in (3, 4) for s in shards)
  assert len(load_documents(CorpusSpec(source="files", pattern=str(tmp_path / "*"),
                                       max_documents=4))) == 4


def test_no_file_matches_names_the_glob(tmp_path):
  pattern = str(tmp_path / "nothing-*.txt")
  with pytest.raises(ValueError, match="nothing-.*no file matches"):
    load_documents(files_spec(pattern))


def test_all_documents_empty_names_the_spec(tmp_path):
  write(tmp_path / "e.jsonl", b'{"text": "   "}\n{"text": ""}\n')
  with pytest.raises(ValueError, match=r"e\.jsonl.*empty corpus.*2 empty"):
    load_documents(files_spec(tmp_path / "e.jsonl"))


def test_missing_json_field_names_field_file_and_line(tmp_path):
  write(tmp_path / "m.jsonl", b'{"text": "ok"}\n{"title": "no text"}\n')
  with pytest.raises(ValueError, match=r"m\.jsonl:2: missing text field 'text'"):
    load_documents(files_spec(tmp_path / "m.jsonl"))
  write(tmp_path / "n.jsonl", b'{"text": 3}\n')
  with pytest.raises(ValueError, match=r"n\.jsonl:1: .*'text' holds int"):
    load_documents(files_spec(tmp_path / "n.jsonl"))
  write(tmp_path / "b.jsonl", b'{"text": "ok"}\nnot json\n')
  with pytest.raises(ValueError, match=r"b\.jsonl:2: not a JSON object"):
    load_documents(files_spec(tmp_path / "b.jsonl"))


@pytest.mark.parametrize("line, problem", [
    (b"not json", "not a JSON object (invalid JSON: Expecting value"),
    (b"[1, 2]", "not a JSON object but an array"),
    (b'{"text": "\xff"}', "not valid UTF-8 (invalid start byte at byte 10)")])
def test_both_json_lines_readers_word_a_bad_line_alike(tmp_path, line, problem):
  path = write(tmp_path / "d.jsonl", b'{"text": "ok"}\n\n' + line + b"\n")
  for read in (lambda: load_documents(files_spec(path, on_decode_error="strict")),
               lambda: list(numbered_jsonl(str(path)))):
    with pytest.raises(InputError) as error:
      read()
    assert str(error.value).startswith(f"{path}:3: {problem}"), str(error.value)


def test_non_utf8_is_replaced_counted_and_logged(tmp_path, caplog):
  write(tmp_path / "a.txt", b"caf\xe9 au lait")
  write(tmp_path / "b.txt", "fine ✓".encode())
  write(tmp_path / "c.jsonl", b'{"text": "ok"}\n{"text": "bad \xff byte"}\n')
  stats = CorpusStats()
  with caplog.at_level(logging.WARNING, logger="glomo_jax.data.corpus"):
    docs = load_documents(files_spec(tmp_path / "*"), stats=stats)
  assert docs == ["caf\ufffd au lait", "fine ✓", "ok", "bad \ufffd byte"]
  assert stats.replaced_documents == 2
  warned = " ".join(r.getMessage() for r in caplog.records)
  assert "a.txt: 1 document(s)" in warned and "c.jsonl: 1 document(s)" in warned
  assert "b.txt" not in warned


def test_non_utf8_strict_raises_naming_the_file(tmp_path):
  write(tmp_path / "a.txt", b"caf\xe9")
  with pytest.raises(ValueError, match=r"a\.txt: not valid UTF-8"):
    load_documents(files_spec(tmp_path / "a.txt", on_decode_error="strict"))
  write(tmp_path / "c.jsonl", b'{"text": "ok"}\n{"text": "\xff"}\n')
  with pytest.raises(ValueError, match=r"c\.jsonl:2: not valid UTF-8"):
    load_documents(files_spec(tmp_path / "c.jsonl", on_decode_error="strict"))


def test_spec_validation_and_dict_round_trip():
  with pytest.raises(ValueError, match="unknown source 'web'"):
    CorpusSpec(source="web")
  with pytest.raises(ValueError, match="unknown file_format 'csv'"):
    CorpusSpec(source="files", pattern="x", file_format="csv")
  with pytest.raises(ValueError, match="needs a file pattern"):   # configs may leave it
    load_documents(CorpusSpec(source="files"))                    # empty until used
  with pytest.raises(ValueError, match="needs a dataset name"):
    load_documents(CorpusSpec(source="tfds"))
  with pytest.raises(ValueError, match=r"CorpusSpec: unknown fields \['colour'\]"):
    CorpusSpec.from_dict({"source": "synthetic", "colour": "red"})
  spec = CorpusSpec.from_dict({"source": "files", "pattern": ["a/*.txt", "b/*.gz"],
                               "synthetic": {"num_documents": 7}})
  assert spec.pattern == ("a/*.txt", "b/*.gz")
  assert spec.synthetic == synthetic.SyntheticConfig(num_documents=7)
  assert CorpusSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


def test_synthetic_source_yields_the_generated_texts():
  config = synthetic.SyntheticConfig(num_documents=9, seed=1)
  spec = {"source": "synthetic", "synthetic": {"num_documents": 9, "seed": 1}}
  docs = load_documents(spec)
  assert docs == [d.text for d in synthetic.generate_corpus(config)]
  assert load_documents(spec, 1, 4) == docs[1::4]
  with pytest.raises(ValueError, match="empty corpus"):
    load_documents({"source": "synthetic", "synthetic": {"num_documents": 0}})


# --- TFDS -------------------------------------------------------------------

def test_tfds_data_source_reader_under_mock_data():
  spec = CorpusSpec(source="tfds", name="imdb_reviews", split="train",
                    tfds_reader="data_source")
  with tfds.testing.mock_data(num_examples=10):
    docs = load_documents(spec)
    shards = [load_documents(spec, i, 3) for i in range(3)]
  assert len(docs) == 10 and all(isinstance(d, str) and d for d in docs)
  assert [len(s) for s in shards] == [3, 3, 4]
  assert sum(shards, []) == docs  # contiguous blocks, in order


def test_tfds_missing_text_feature_is_named():
  spec = CorpusSpec(source="tfds", name="imdb_reviews", text_feature="body",
                    tfds_reader="data_source")
  with tfds.testing.mock_data(num_examples=2):
    with pytest.raises(ValueError, match=r"missing text feature 'body'.*'text'"):
      load_documents(spec)


def test_tfds_tf_reader_under_mock_data():
  pytest.importorskip("tensorflow")
  with tfds.testing.mock_data(num_examples=6):
    for reader in ("tf", "auto"):  # mock wikipedia is TFRecord: auto -> tf
      docs = load_documents(CorpusSpec(source="tfds", name="wikipedia/20230601.en",
                                       tfds_reader=reader))
      assert len(docs) == 6 and all(isinstance(d, str) and d for d in docs)


class GlomoTestTexts(tfds.core.GeneratorBasedBuilder):
  """A real (tiny) TFDS dataset, prepared into tmp_path by the tests below."""
  VERSION = tfds.core.Version("1.0.0")

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
        {"text": tfds.features.Text(), "index": np.int64}))

  def _split_generators(self, dl_manager):
    del dl_manager
    return {"train": self._generate_examples(12)}

  def _generate_examples(self, n):
    for i in range(n):
      text = f"document {i} caf\u00e9" if i != 4 else "   "
      yield i, {"text": text, "index": i}


def _prepared(data_dir, file_format):
  builder = tfds.builder("glomo_test_texts", data_dir=str(data_dir), file_format=file_format)
  builder.download_and_prepare()
  return builder


def _expected_texts():
  return {f"document {i} caf\u00e9" for i in range(12) if i != 4}


def test_tfds_prepared_array_record_data_source_shards(tmp_path):
  _prepared(tmp_path, "array_record")
  spec = CorpusSpec(source="tfds", name="glomo_test_texts", data_dir=str(tmp_path))
  stats = CorpusStats()
  docs = load_documents(spec, stats=stats)  # auto -> data_source (ArrayRecord)
  assert set(docs) == _expected_texts() and len(docs) == 11
  assert stats.empty_documents == 1
  shards = [load_documents(spec, i, 4) for i in range(4)]
  assert sum(shards, []) == docs


def test_tfds_prepared_tfrecord_tf_reader_even_splits(tmp_path):
  pytest.importorskip("tensorflow")
  _prepared(tmp_path, "tfrecord")
  spec = CorpusSpec(source="tfds", name="glomo_test_texts", data_dir=str(tmp_path))
  docs = load_documents(spec)
  assert set(docs) == _expected_texts() and len(docs) == 11
  shards = [load_documents(spec, i, 3) for i in range(3)]
  assert sorted(sum(shards, [])) == sorted(docs)
  assert all(len(s) >= 3 for s in shards)


# --- real data (skipped when ../shared/data is absent) ---------------------

@pytest.mark.skipif(not (SHARED_DATA / "wiki_text").is_dir(), reason="no shared wiki_text")
def test_real_wiki_text_first_articles():
  spec = files_spec(SHARED_DATA / "wiki_text" / "*part1.jsonl.xz", max_documents=4)
  stats = CorpusStats()
  docs = load_documents(spec, stats=stats)
  assert len(docs) == 4 and docs[0].startswith("Anarchism is a political philosophy")
  assert all(len(d) >= 500 for d in docs) and stats.replaced_documents == 0


@pytest.mark.skipif(not (SHARED_DATA / "wikitext2").is_dir(), reason="no shared wikitext2")
def test_real_wikitext2_valid_has_60_articles():
  docs = load_documents(files_spec(SHARED_DATA / "wikitext2" / "wiki.valid.tokens.gz"))
  assert len(docs) == 60
  assert docs[0].startswith("= Homarus gammarus =\n")
  assert all(d.startswith("= ") and not d.startswith("= =") for d in docs)
