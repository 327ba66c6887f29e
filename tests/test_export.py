"""Exported graph predictor: round trip in a fresh process, contents, errors."""
import json
import os
import subprocess
import sys
import textwrap

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from glomo_jax import GLoMo, ModelConfig
from glomo_jax import export
from glomo_jax.export import format as export_format
from glomo_jax.data.tokenizer import train_tokenizer
from conftest import random_variables

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SENTENCES = ["the cat sat on the mat .", "a dog ran in the park .",
             "the bird sang a song .", "my cat likes the dog ."]
TEXTS = ["the cat sat .", "a dog ran in the park ."]
COUPLED = dict(decoupled=False, key_layers=0, query_layers=0)


def reference_graphs(config, variables, tokens, mask=None):
  """GLoMo.graphs of the whole model's variables (decoders included)."""
  apply = jax.jit(lambda v, t, m: GLoMo(config).apply(v, t, m, method=GLoMo.graphs))
  return np.asarray(apply(variables, jnp.asarray(tokens),
                          None if mask is None else jnp.asarray(mask)))


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  return train_tokenizer(SENTENCES, 40, str(tmp_path_factory.mktemp("tok")) + "/",
                         model_type="word")


@pytest.fixture(scope="module")
def model(tmp_path_factory, tokenizer):
  """(config, full variables, export directory) written from sharded params."""
  config = ModelConfig.tiny()
  variables = random_variables(config)
  mesh = Mesh(np.array(jax.devices()), ("x",))
  sharded = jax.tree_util.tree_map(
      lambda x: jax.device_put(x, NamedSharding(
          mesh, PartitionSpec(None, "x") if x.ndim == 2 and
          x.shape[1] % len(jax.devices()) == 0 else PartitionSpec())), variables)
  directory = str(tmp_path_factory.mktemp("exports") / "glomo")
  path = export.export_graph_predictor(directory, config, sharded, tokenizer,
                                       metadata={"step": np.int64(1234)})
  return config, variables, path


def test_round_trip_in_a_fresh_process(model, tokenizer, tmp_path):
  config, variables, path = model
  tokens = np.zeros((2, 8), np.int32)
  mask = np.zeros((2, 8), bool)
  for b, text in enumerate(TEXTS):
    ids = tokenizer.encode(text)
    tokens[b, :len(ids)], mask[b, :len(ids)] = ids, True
  np.savez(tmp_path / "inputs.npz", tokens=tokens, mask=mask)
  script = textwrap.dedent(f"""
      import json, sys
      import numpy as np
      from glomo_jax.export import load_graph_predictor
      p = load_graph_predictor({path!r})
      inputs = np.load({str(tmp_path / "inputs.npz")!r})
      graphs = p(inputs["tokens"], inputs["mask"])
      text_graphs, text_tokens, text_mask, pieces = p.graphs_from_text({TEXTS!r})
      np.savez({str(tmp_path / "out.npz")!r}, graphs=np.asarray(graphs),
               text_graphs=text_graphs, text_tokens=text_tokens)
      print(json.dumps({{"step": p.metadata["step"], "modules": sorted(sys.modules),
                        "fingerprint": p.tokenizer.fingerprint,
                        "dtype": str(graphs.dtype)}}))
  """)
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
  env.pop("XLA_FLAGS", None)
  result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, cwd=str(tmp_path), timeout=120)
  assert result.returncode == 0, result.stderr[-3000:]
  info = json.loads(result.stdout.strip().splitlines()[-1])
  assert info["step"] == 1234
  assert info["fingerprint"] == tokenizer.fingerprint
  assert info["dtype"] == "float32"
  assert not any(m.startswith(("glomo_jax.train", "ml_collections", "optax"))
                 for m in info["modules"])  # no trainer needed
  out = np.load(tmp_path / "out.npz")

  expected = reference_graphs(config, variables, tokens, mask)
  assert expected.shape == (2, 2 * config.num_graph_layers, config.num_heads, 8, 8)
  assert np.all(expected.sum(axis=(0, 2, 3, 4)) > 0.5)  # every layer has weight
  np.testing.assert_allclose(out["graphs"], expected, atol=1e-6)
  n = mask.sum(1).max()
  np.testing.assert_array_equal(out["text_tokens"], tokens[:, :n])
  np.testing.assert_allclose(out["text_graphs"], expected[..., :n, :n], atol=1e-6)
  # the BatchNorm statistics travelled with the export: without them it differs
  stale = dict(variables, batch_stats=jax.tree_util.tree_map(
      jnp.zeros_like, variables["batch_stats"]))
  assert np.abs(reference_graphs(config, stale, tokens, mask) - expected).max() > 1e-3


def test_export_holds_only_the_graph_predictor(model, tokenizer):
  config, variables, path = model
  assert sorted(os.listdir(path)) == ["glomo_export.json", "params.msgpack",
                                      "tokenizer.model"]
  assert not [f for f in os.listdir(os.path.dirname(path)) if f != "glomo"]  # no temp dirs
  with open(os.path.join(path, "params.msgpack"), "rb") as f:
    stored = flax.serialization.msgpack_restore(f.read())
  assert sorted(stored) == ["batch_stats", "params"]
  assert sorted(stored["params"]) == ["embedding", "graph_bw", "graph_fw"]
  assert sorted(stored["batch_stats"]) == ["graph_bw", "graph_fw"]
  for collection in ("params", "batch_stats"):
    for name, tree in stored[collection].items():
      jax.tree_util.tree_map(np.testing.assert_array_equal, tree,
                             jax.device_get(variables[collection][name]))
  with open(os.path.join(path, "glomo_export.json")) as f:
    manifest = json.load(f)
  assert manifest["format_version"] == 1
  assert ModelConfig.from_dict(manifest["model_config"]) == config
  assert manifest["tokenizer_fingerprint"] == tokenizer.fingerprint
  assert manifest["tokenizer_vocab_size"] == tokenizer.vocab_size
  assert manifest["metadata"] == {"step": 1234}
  paths = [p["path"] for p in manifest["params"]]
  assert "params/embedding" in paths and "params/graph_fw/key_kernel" in paths
  assert not [p for p in paths if "decoder" in p or "features" in p]
  entry = {p["path"]: p for p in manifest["params"]}["params/embedding"]
  assert entry["shape"] == [config.vocab_size, config.dim] and entry["dtype"] == "float32"
  assert len(manifest["content_sha256"]) == 64


def test_graph_predictor_variables_subset_and_shape_errors():
  config = ModelConfig.tiny()
  variables = random_variables(config)
  subset = export.graph_predictor_variables(config, variables)
  assert sorted(subset["params"]) == ["embedding", "graph_bw", "graph_fw"]
  assert subset["params"]["embedding"] is variables["params"]["embedding"]
  with pytest.raises(ValueError, match=r"params/embedding: .*\(50, 16\).*\(60, 16\)"):
    export.graph_predictor_variables(config.replace(vocab_size=60), variables)
  no_stats = {"params": variables["params"]}
  with pytest.raises(ValueError, match="missing from the variables: batch_stats/graph_bw"):
    export.graph_predictor_variables(config, no_stats)


def test_coupled_config_exports_its_feature_predictors(tmp_path, tokenizer):
  config = ModelConfig.tiny(**COUPLED)
  variables = random_variables(config, seed=3)
  path = export.export_graph_predictor(tmp_path / "coupled", config, variables)
  with open(os.path.join(path, "params.msgpack"), "rb") as f:
    stored = flax.serialization.msgpack_restore(f.read())
  assert sorted(stored["params"]) == ["embedding", "features_bw", "features_fw",
                                      "graph_bw", "graph_fw"]
  assert not stored["batch_stats"]
  predictor = export.load_graph_predictor(path)
  assert predictor.tokenizer is None and predictor.config == config
  with pytest.raises(ValueError, match="no tokenizer"):
    predictor.encode(TEXTS)
  tokens = np.array([[3, 4, 5, 6, 7], [8, 9, 10, 0, 0]], np.int32)
  mask = tokens > 0
  expected = reference_graphs(config, variables, tokens, mask)
  assert np.all(expected.sum(axis=(0, 2, 3, 4)) > 0.5)
  np.testing.assert_allclose(np.asarray(predictor(tokens, mask)), expected, atol=1e-6)
  # an export without a tokenizer accepts one that fits its vocabulary
  paired = export.load_graph_predictor(path, tokenizer=tokenizer)
  graphs, _, mask, _ = paired.graphs_from_text(TEXTS)
  assert graphs.shape[:3] == (2, 4, 4) and mask.sum() == sum(
      len(tokenizer.encode(t)) for t in TEXTS)


def copy_export(path, tmp_path):
  import shutil
  target = str(tmp_path / "copy")
  shutil.copytree(path, target)
  return target


def test_corrupt_params_byte_fails_the_hash(model, tmp_path):
  path = copy_export(model[2], tmp_path)
  params = os.path.join(path, "params.msgpack")
  data = bytearray(open(params, "rb").read())
  data[len(data) // 2] ^= 0x01
  open(params, "wb").write(bytes(data))
  with pytest.raises(ValueError, match=r"params\.msgpack: corrupt export: .*hash differs"):
    export.load_graph_predictor(path)


def test_edited_config_fails_the_content_hash(model, tmp_path):
  path = copy_export(model[2], tmp_path)
  manifest_path = os.path.join(path, "glomo_export.json")
  manifest = json.load(open(manifest_path))
  manifest["model_config"]["bn_epsilon"] = 1e-3
  json.dump(manifest, open(manifest_path, "w"))
  with pytest.raises(ValueError, match="corrupt export: the content sha256 hash"):
    export.load_graph_predictor(path)


def test_param_tree_not_matching_the_config_names_path_and_shapes(model, tmp_path):
  path = copy_export(model[2], tmp_path)
  manifest_path = os.path.join(path, "glomo_export.json")
  manifest = json.load(open(manifest_path))
  wrong = ModelConfig.from_dict(manifest["model_config"]).replace(vocab_size=60)
  manifest["model_config"] = wrong.to_dict()
  params = open(os.path.join(path, "params.msgpack"), "rb").read()
  tok = open(os.path.join(path, "tokenizer.model"), "rb").read()
  manifest["content_sha256"] = export_format._content_sha256(params, tok, wrong.to_dict())  # consistent,
  json.dump(manifest, open(manifest_path, "w"))                                   # wrong writer
  with pytest.raises(ValueError, match=r"shape mismatch: params/embedding: .*params\.msgpack "
                                       r"has shape \(50, 16\) but the config expects \(60, 16\)"):
    export.load_graph_predictor(path)


def test_missing_and_unreadable_files_give_clear_errors(model, tmp_path):
  with pytest.raises(FileNotFoundError, match="no graph predictor export at .*nowhere"):
    export.load_graph_predictor(tmp_path / "nowhere")
  path = copy_export(model[2], tmp_path)
  os.remove(os.path.join(path, "params.msgpack"))
  with pytest.raises(FileNotFoundError, match=r"parameter file .*copy/params\.msgpack is missing"):
    export.load_graph_predictor(path)
  manifest_path = os.path.join(path, "glomo_export.json")
  manifest = open(manifest_path).read()
  open(manifest_path, "w").write(manifest[:40])
  with pytest.raises(ValueError, match=r"glomo_export\.json: corrupt export: not valid JSON"):
    export.load_graph_predictor(path)
  open(manifest_path, "w").write(manifest.replace('"format_version": 1', '"format_version": 7'))
  with pytest.raises(ValueError, match="unknown export format_version 7"):
    export.load_graph_predictor(path)
  os.remove(manifest_path)
  with pytest.raises(FileNotFoundError, match=r"manifest .*glomo_export\.json is missing"):
    export.load_graph_predictor(path)


def test_tokenizer_of_another_vocabulary_is_refused(model, tokenizer, tmp_path):
  other = train_tokenizer(["green ideas sleep furiously", "colourless green dreams"],
                          30, str(tmp_path) + "/", model_type="word")
  with pytest.raises(ValueError, match="vocabulary mismatch") as error:
    export.load_graph_predictor(model[2], tokenizer=other)
  assert tokenizer.fingerprint in str(error.value) and other.fingerprint in str(error.value)
  assert f"({tokenizer.vocab_size} ids)" in str(error.value)
  same = export.load_graph_predictor(model[2], tokenizer=tokenizer)
  assert same.tokenizer is tokenizer
  small = ModelConfig.tiny(vocab_size=tokenizer.vocab_size - 1)
  with pytest.raises(ValueError, match="vocabulary mismatch"):
    export.export_graph_predictor(tmp_path / "small", small, random_variables(small), tokenizer)
  assert not os.path.exists(tmp_path / "small")


def test_out_of_range_ids_are_refused_on_the_host(model):
  predictor = export.load_graph_predictor(model[2])
  with pytest.raises(ValueError, match="vocabulary mismatch: id 50 >= predictor vocabulary 50"):
    predictor(np.array([[3, 50, 4]], np.int32))
  with pytest.raises(ValueError, match="invalid token id -1"):
    predictor.predict(predictor.variables, jnp.array([[3, -1, 4]]))
  with pytest.raises(ValueError, match="mask"):
    predictor(np.array([[3, 4]]), np.ones((1, 3), bool))
  # under the caller's own jit the function stays pure and traceable
  jitted = jax.jit(predictor.predict)
  tokens = np.array([[3, 4, 5]], np.int32)
  np.testing.assert_allclose(np.asarray(jitted(predictor.variables, tokens)),
                             np.asarray(predictor(tokens)), atol=1e-6)


def test_existing_export_is_replaced_only_with_overwrite(model, tmp_path):
  config, variables, _ = model
  target = tmp_path / "out"
  export.export_graph_predictor(target, config, variables, metadata={"step": 1})
  with pytest.raises(FileExistsError, match="overwrite=True"):
    export.export_graph_predictor(target, config, variables, metadata={"step": 2})
  assert export.load_graph_predictor(target).metadata == {"step": 1}
  export.export_graph_predictor(target, config, variables, metadata={"step": 2},
                                overwrite=True)
  assert export.load_graph_predictor(target).metadata == {"step": 2}
  assert sorted(os.listdir(tmp_path)) == ["out"]  # no temporary or old directories
  other = tmp_path / "notes"
  other.mkdir()
  (other / "keep.txt").write_text("mine")
  with pytest.raises(FileExistsError, match="not a glomo export"):
    export.export_graph_predictor(other, config, variables, overwrite=True)
  assert (other / "keep.txt").read_text() == "mine"
  with pytest.raises(ValueError, match="JSON-serialisable"):
    export.export_graph_predictor(tmp_path / "bad", config, variables,
                                  metadata={"fn": print})
  assert sorted(os.listdir(tmp_path)) == ["notes", "out"]


def test_text_path_pads_and_masks(model, tokenizer):
  config, variables, path = model
  predictor = export.load_graph_predictor(path)
  graphs, tokens, mask, pieces = predictor.graphs_from_text(TEXTS)
  lengths = [len(tokenizer.encode(t)) for t in TEXTS]
  assert lengths[0] < lengths[1]
  T = max(lengths)
  assert graphs.shape == (2, 2 * config.num_graph_layers, config.num_heads, T, T)
  assert graphs.dtype == np.float32 and tokens.dtype == np.int32
  np.testing.assert_array_equal(mask.sum(1), lengths)
  np.testing.assert_array_equal(mask[0], np.arange(T) < lengths[0])
  assert np.all(tokens[~mask] == tokenizer.pad_id)
  assert [len(p) for p in pieces] == lengths
  assert pieces[0] == [tokenizer.id_to_piece(i) for i in tokenizer.encode(TEXTS[0])]
  short = lengths[0]
  assert np.all(graphs[0, :, :, short:, :] == 0) and np.all(graphs[0, ..., short:] == 0)
  # the short text's graphs do not depend on the padding
  alone, _, _, _ = predictor.graphs_from_text(TEXTS[0])
  np.testing.assert_allclose(graphs[0, ..., :short, :short], alone[0], atol=1e-6)
  cut, cut_tokens, cut_mask, cut_pieces = predictor.graphs_from_text(TEXTS, max_length=3)
  assert cut.shape[-1] == 3 and cut_mask.all() and [len(p) for p in cut_pieces] == [3, 3]


def test_untrained_predictor_is_seeded_and_matches_an_export_of_its_variables(
    model, tokenizer, tmp_path):
  config, _, path = model
  fresh = export.ExportedGraphPredictor.untrained(config, tokenizer, seed=3)
  again = export.ExportedGraphPredictor.untrained(config, tokenizer, seed=3)
  other = export.ExportedGraphPredictor.untrained(config, tokenizer, seed=4)
  trained = export.load_graph_predictor(path)
  tokens = np.arange(16, dtype=np.int32).reshape(2, 8) % config.vocab_size
  graphs = np.asarray(fresh(tokens))
  np.testing.assert_array_equal(graphs, np.asarray(again(tokens)))
  assert not np.allclose(graphs, np.asarray(other(tokens)))
  assert not np.allclose(graphs, np.asarray(trained(tokens)))
  assert fresh.metadata == {"untrained_seed": 3} and fresh.tokenizer is tokenizer
  # Its variables are exactly a graph predictor's: they export and load back.
  reloaded = export.load_graph_predictor(export.export_graph_predictor(
      str(tmp_path / "fresh"), config, fresh.variables, tokenizer))
  np.testing.assert_array_equal(graphs, np.asarray(reloaded(tokens)))


def test_an_export_written_before_a_config_field_existed_still_loads(model, tmp_path):
  """An older writer's manifest lacks a ModelConfig field added since (here
  bn_scale_init): the content hash covers the manifest's own model_config,
  and the field takes its default."""
  path = copy_export(model[2], tmp_path)
  manifest_path = os.path.join(path, "glomo_export.json")
  manifest = json.load(open(manifest_path))
  older = dict(manifest["model_config"])
  del older["bn_scale_init"]
  params = open(os.path.join(path, "params.msgpack"), "rb").read()
  tok = open(os.path.join(path, "tokenizer.model"), "rb").read()
  manifest["model_config"] = older
  manifest["content_sha256"] = export_format._content_sha256(params, tok, older)
  json.dump(manifest, open(manifest_path, "w"))
  predictor = export.load_graph_predictor(path)
  assert predictor.config.bn_scale_init == "ones"
