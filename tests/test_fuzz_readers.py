"""Property-based fuzzing of the readers of user files (tests/fuzzing.py):
corpora (text, JSON lines, WikiText; plain, .gz, .xz), the IMDB / MNLI /
SNLI JSON-lines reader, SQuAD (official JSON and TFDS-shaped records),
CoNLL-U, GloVe, image .npz arrays, SentencePiece models and config dicts.
Each returns valid data or raises a one-line InputError naming the file."""
import io
import json
import types
import typing

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import NLI, reviews
from fuzzing import (compress, damaged_bytes, damaged_file, damaged_json, damaged_jsonl, examples,
                     json_bytes, read_or_input_error)
from glomo_jax.config import ModelConfig
from glomo_jax.data.corpus import CorpusSpec, load_documents
from glomo_jax.data.tokenizer import Tokenizer, train_tokenizer
from glomo_jax.errors import InputError
from glomo_jax.eval.conllu import read_conllu
from glomo_jax.focused import PickingConfig, read_picking
from glomo_jax.focused.picking import picking_target
from glomo_jax.images.cifar import CifarConfig
from glomo_jax.images.data import read_npz_images
from glomo_jax.pretraining.pixels import ImagePretrainConfig
from glomo_jax.pretraining import PretrainConfig
from glomo_jax.squad.config import SquadConfig
from glomo_jax.squad.data import from_records, read_squad_json
from glomo_jax.text.readers import TASKS, read_split
from glomo_jax.text.glove import read_glove
from glomo_jax.classification.config import ClassificationConfig
from test_squad_parts import FACTS, squad_articles
from test_picking import SLIDES
from test_syntax_alignment import CONLLU

SUFFIXES = st.sampled_from(["", ".gz", ".xz"])


def write(path, data: bytes) -> str:
  path.write_bytes(data)
  return str(path)


# ---- corpora ------------------------------------------------------------------------
CORPORA = {
    "jsonl": json_bytes({"text": "Un café naïve, déjà vu.", "id": 1})[:-1] + b"\n" + b"\n".join(
        json_bytes({"text": f"Document {i}: the cat sat on the mat.\nA second line."})
        for i in range(4)) + b"\n",
    "tokens": (" = Title = \n\n A first paragraph of the café . \n\n = = Section = = \n"
               " More text here . \n = Second = \n Another article . \n").encode(),
    "txt": "A plain text document.\n\nWith two paragraphs, one naïve.\n".encode(),
}


@settings(max_examples=examples(60))
@given(kind=st.sampled_from(sorted(CORPORA)), suffix=SUFFIXES, data=st.data(),
       strict=st.booleans())
def test_corpus_files(tmp_path, kind, suffix, data, strict):
  path = write(tmp_path / f"corpus.{kind}{suffix}", data.draw(damaged_file(CORPORA[kind],
                                                                            suffix)))
  spec = CorpusSpec(source="files", pattern=path,
                    on_decode_error="strict" if strict else "replace")
  documents = read_or_input_error(lambda: load_documents(spec), path)
  if documents is not None:
    assert documents and all(isinstance(d, str) and d and d == d.strip() for d in documents)


# ---- IMDB / MNLI / SNLI -----------------------------------------------------------
TASK_RECORDS = {"imdb": reviews(4, seed=0),
                "mnli": [{"premise": p, "hypothesis": h, "label": y} for p, h, y in NLI[:4]],
                "snli": [{"premise": p, "hypothesis": h, "label": i % 3}
                         for i, (p, h, _) in enumerate(NLI[:4])]}


@settings(max_examples=examples(60))
@given(task=st.sampled_from(sorted(TASK_RECORDS)), suffix=SUFFIXES, data=st.data())
def test_task_files(tmp_path, task, suffix, data):
  records = TASK_RECORDS[task]
  raw = data.draw(damaged_jsonl(records, suffix))
  path = write(tmp_path / f"{task}.jsonl{suffix}", raw)
  split = read_or_input_error(lambda: read_split(task, "files", path), path)
  if split is not None:
    spec = TASKS[task]
    assert len(split) >= 1 and split.labels.dtype == np.int32
    assert np.all((split.labels >= 0) & (split.labels < len(spec.label_names)))
    for field in spec.text_fields:
      assert len(split.texts[field]) == len(split)
      assert all(isinstance(w, str) for words in split.texts[field] for w in words)
      for text, spans in zip(split.raw[field], split.spans[field]):
        assert np.all((spans >= 0) & (spans <= len(text)))


# ---- SQuAD --------------------------------------------------------------------------
def check_squad(split) -> None:
  assert len(split) >= 1
  for q in split.questions:
    paragraph = split.paragraphs[q.paragraph]
    assert q.answers and all(isinstance(a, str) for a in q.answers)
    assert isinstance(q.id, str) and isinstance(q.text, str)
    if q.span is not None:
      assert 0 <= q.span[0] <= q.span[1] < len(paragraph.words)


@settings(max_examples=examples(50))
@given(suffix=SUFFIXES, data=st.data())
def test_squad_json(tmp_path, suffix, data):
  document = {"version": "1.1", "data": squad_articles(FACTS[:2])}
  if data.draw(st.booleans()):
    raw = compress(json_bytes(data.draw(damaged_json(document))), suffix)
  else:
    raw = data.draw(damaged_file(json_bytes(document), suffix))
  path = write(tmp_path / f"squad.json{suffix}", raw)
  split = read_or_input_error(lambda: read_squad_json(path), path)
  if split is not None:
    check_squad(split)


@settings(max_examples=examples(40))
@given(data=st.data())
def test_squad_tfds_shaped_records(data):
  records = [{"id": qa["id"], "title": a["title"], "context": p["context"],
              "question": qa["question"],
              "answers": {"text": [x["text"] for x in qa["answers"]],
                          "answer_start": [x["answer_start"] for x in qa["answers"]]}}
             for a in squad_articles(FACTS[:1]) for p in a["paragraphs"] for qa in p["qas"]]
  where = "tfds 'squad/v1.1' split 'train'"
  wrong = data.draw(damaged_json(records))
  split = read_or_input_error(
      lambda: from_records(wrong if isinstance(wrong, list) else [wrong], where), where)
  if split is not None:
    check_squad(split)


# ---- CoNLL-U ------------------------------------------------------------------------
@st.composite
def damaged_conllu(draw) -> bytes:
  """CONLLU with one column of one word line changed, or its bytes damaged."""
  if draw(st.booleans()):
    return draw(damaged_bytes(CONLLU.encode()))
  lines = CONLLU.split("\n")
  number = draw(st.sampled_from([i for i, line in enumerate(lines) if "\t" in line]))
  columns = lines[number].split("\t")
  column = draw(st.integers(0, len(columns)))
  value = draw(st.one_of(st.sampled_from(["_", "-1", "0", "99", "1-", "3-2", "1.1", "", "a\tb",
                                          "SpaceAfter=No"]), st.text(max_size=6)))
  columns[column:column + 1] = [value]
  lines[number] = "\t".join(columns)
  return "\n".join(lines).encode("utf-8", errors="surrogatepass")


@settings(max_examples=examples(60))
@given(suffix=SUFFIXES, data=st.data())
def test_conllu(tmp_path, suffix, data):
  path = write(tmp_path / f"t.conllu{suffix}", compress(data.draw(damaged_conllu()), suffix))
  sentences = read_or_input_error(lambda: list(read_conllu(path)), path)
  for s in sentences or ():
    n = len(s.forms)
    assert n >= 1 and s.heads.shape == (n,) and np.all((s.heads >= -1) & (s.heads < n))
    assert s.spans.shape == (n, 2) and len(s.deprels) == n
    placed = s.spans[:, 0] >= 0
    assert np.all((s.spans[placed] >= 0) & (s.spans[placed] <= len(s.text)))


# ---- GloVe -------------------------------------------------------------------------
GLOVE = b"the 0.1 0.2 -0.3 0.4\ncat 1 2 3 4\ncaf\xc3\xa9 0.5 0.5 0.5 0.5\nsat -1e-3 2e2 0 1\n"


@settings(max_examples=examples(40))
@given(suffix=SUFFIXES, data=st.data())
def test_glove(tmp_path, suffix, data):
  path = write(tmp_path / f"glove.txt{suffix}", data.draw(damaged_file(GLOVE, suffix)))
  read = read_or_input_error(lambda: read_glove(path), path)
  if read is not None:
    vectors, dim = read
    assert dim >= 1 and vectors
    assert all(v.dtype == np.float32 and v.shape == (dim,) and np.all(np.isfinite(v))
               for v in vectors.values())


# ---- image arrays ------------------------------------------------------------------
def npz_bytes(**arrays) -> bytes:
  out = io.BytesIO()
  np.savez(out, **arrays)
  return out.getvalue()


ARRAY_VALUES = st.sampled_from([
    np.zeros((0, 4, 4, 3), np.uint8), np.zeros((2, 4, 4), np.uint8),
    np.zeros((2, 4, 4, 3), np.float32), np.zeros((2, 4, 4, 1), np.uint8),
    np.zeros((2, 4, 4, 3), np.int64), np.zeros(3, np.int64), np.zeros(2, np.float32),
    np.zeros((2, 1), np.int32), np.array(["a", "b"]), np.zeros((), np.uint8)])


@settings(max_examples=examples(40))
@given(data=st.data())
def test_npz_images(tmp_path, data):
  arrays = {"images": np.arange(2 * 4 * 4 * 3, dtype=np.uint8).reshape(2, 4, 4, 3),
            "labels": np.array([3, 7], np.int64)}
  if data.draw(st.booleans()):
    name = data.draw(st.sampled_from(["images", "labels", "extra"]))
    if data.draw(st.booleans()) and name in arrays:
      del arrays[name]
    else:
      arrays[name] = data.draw(ARRAY_VALUES)
    raw = npz_bytes(**arrays)
  else:
    raw = data.draw(damaged_bytes(npz_bytes(**arrays), text=False))
  path = write(tmp_path / "images.npz", raw)
  images = read_or_input_error(lambda: read_npz_images(path), path)
  if images is not None:
    assert images.images.dtype == np.uint8 and images.images.ndim == 4
    assert len(images) >= 1 and images.images.shape[-1] == 3
    assert images.labels is None or (images.labels.dtype == np.int32 and
                                      images.labels.shape == (len(images),))


# ---- SentencePiece models ----------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer_bytes(tmp_path_factory):
  sentences = [p for p, _, _ in NLI] + [h for _, h, _ in NLI]
  root = tmp_path_factory.mktemp("tok")
  return train_tokenizer(sentences, 40, str(root) + "/").serialized()


@settings(max_examples=examples(30))
@given(data=st.data())
def test_sentencepiece_model(tmp_path, tokenizer_bytes, data):
  path = write(tmp_path / "tokenizer.model",
               data.draw(damaged_bytes(tokenizer_bytes, text=False)))
  tokenizer = read_or_input_error(lambda: Tokenizer.load(path), path)
  if tokenizer is not None:
    ids = tokenizer.encode("a man sleeps on the sofa")
    assert all(0 <= i < tokenizer.vocab_size for i in ids)
    assert isinstance(tokenizer.decode(ids), str)


# ---- picking-task JSON lines ------------------------------------------------------------
@settings(max_examples=examples(50))
@given(suffix=SUFFIXES, data=st.data())
def test_picking_files(tmp_path, suffix, data):
  records = [{"digits": d, "k": k, "target": t} for d, k, t in SLIDES[2:5]]
  path = write(tmp_path / f"picking.jsonl{suffix}", data.draw(damaged_jsonl(records, suffix)))
  examples = read_or_input_error(lambda: read_picking(path), path)
  if examples is not None:
    assert len(examples) >= 1
    for row, n, k, target in zip(examples.digits, examples.lengths, examples.k,
                                 examples.targets):
      assert 1 <= k <= n <= len(row) and row.max() <= 9
      assert target == picking_target("".join(map(str, row[:n])), k)


# ---- configs -------------------------------------------------------------------------
CONFIGS = [ModelConfig, PretrainConfig, ClassificationConfig, SquadConfig, CifarConfig,
           ImagePretrainConfig, PickingConfig]


def _leaves(value, path=()):
  if isinstance(value, dict):
    for key, item in value.items():
      yield from _leaves(item, path + (key,))
  else:
    yield path, value


def _hint(cls, path):
  """The type hint of the config field at `path` (nested dataclasses
  followed); None is allowed too inside an optional group (an `X | None`
  dataclass field), where it means "unset": the field's default."""
  optional = False
  for key in path[:-1]:
    hint = typing.get_type_hints(cls)[key]
    optional = optional or type(None) in typing.get_args(hint)
    cls = next((a for a in typing.get_args(hint) if a is not type(None)), hint)
  hint = typing.get_type_hints(cls)[path[-1]]
  return hint | None if optional else hint


def _categories(hint) -> set:
  """The kinds (`_category`) of the values a field's type hint allows."""
  kinds = set()
  for arg in typing.get_args(hint) if typing.get_origin(hint) in (
      typing.Union, types.UnionType) else (hint,):
    origin = typing.get_origin(arg) or arg
    kinds.add({bool: bool, int: float, float: float, tuple: list,
               type(None): type(None)}.get(origin, origin))
  return kinds


def _category(value):
  """The JSON kind a config value must keep: bool, number, str, list."""
  if isinstance(value, bool):
    return bool
  if isinstance(value, (int, float)):
    return float
  return type(value)


@settings(max_examples=examples(60))
@given(cls=st.sampled_from(CONFIGS), data=st.data())
def test_config_dicts(cls, data):
  """A value of a kind its field's type does not allow (bool, number, str, list, None),
  or an unknown field, is an InputError naming the field; a missing field
  takes its default."""
  default = cls().to_dict()
  leaves = [(p, v) for p, v in _leaves(default) if v is not None]
  path, old = data.draw(st.sampled_from(leaves))
  kind = data.draw(st.sampled_from(["replace", "remove", "extra"]))
  changed = json.loads(json.dumps(default))
  parent = changed
  for key in path[:-1]:
    parent = parent[key]
  name = path[-1]
  if kind == "replace":
    parent[name] = new = data.draw(st.one_of(
        st.none(), st.booleans(), st.integers(-10, 10**6), st.floats(allow_nan=True),
        st.text(max_size=8), st.lists(st.integers(), max_size=2)))
  elif kind == "remove":
    del parent[name]
  else:
    name = data.draw(st.text(min_size=1, max_size=8).filter(lambda k: k not in parent))
    parent[name] = 1
  try:
    config = cls.from_dict(changed)
  except InputError as e:
    assert "\n" not in str(e) and repr(str(name))[1:-1] in str(e), str(e)
    assert kind != "remove"
    return
  except ValueError as e:          # a range check of the config's own
    assert "\n" not in str(e) and kind == "replace"
    return
  assert kind != "extra", "an unknown field was accepted"
  if kind == "replace":
    wrong = _category(new) not in _categories(_hint(cls, path))
    assert not wrong, f"{'.'.join(map(str, path))} = {new!r} accepted (default {old!r})"
  assert cls.from_dict(config.to_dict()) == config
