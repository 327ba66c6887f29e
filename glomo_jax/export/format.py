"""The export format of the frozen graph predictor: writing, hashing, reading.

`export_graph_predictor` writes what `GLoMo.graphs` needs, and nothing else,
to a directory that another JAX program loads with one call::

  export_graph_predictor("/exports/glomo", config, state_variables, tokenizer,
                         metadata={"step": 100_000})
  predictor = load_graph_predictor("/exports/glomo")
  graphs, tokens, mask, pieces = predictor.graphs_from_text(["a sentence ."])
  graphs = predictor.predict(predictor.variables, tokens, mask)  # pure, jitted

Export tree (format_version 1; these names are frozen, other projects read
them)::

  <directory>/
    glomo_export.json   manifest (UTF-8 JSON object), keys:
        format_version        1
        kind                  "glomo_graph_predictor"
        model_config          ModelConfig.to_dict()
        tokenizer_fingerprint sha256 hex of tokenizer.model, or null
        tokenizer_vocab_size  int, or null
        params                [{"path": "params/graph_fw/key_kernel",
                                "shape": [L, d, K, H], "dtype": "float32"}, ...]
                              every leaf of params.msgpack, sorted by path
        files                 {"params.msgpack": {"sha256", "bytes"},
                               "tokenizer.model": {"sha256", "bytes"}}
        content_sha256        see below
        metadata              the caller's JSON object (e.g. {"step": 100000})
        graph_layout          human-readable description of the graphs
        units                 "tokens" (GLoMo over text) or "pixels"
                              (PixelGLoMo: T = H·W pixels in raster order;
                              no tokenizer); absent in older exports = "tokens"
        library               {"glomo_jax", "jax", "flax"} versions
    params.msgpack      flax.serialization.msgpack_serialize of numpy arrays
                        {"params": {"embedding": [V, d], "graph_fw": {...},
                                    "graph_bw": {...},
                                    ("features_fw", "features_bw": coupled
                                     configs only)},
                         "batch_stats": {"graph_fw": {...}, "graph_bw": {...}}
                                        (empty without BatchNorm)}
                        The decoders, and the feature predictors of a
                        decoupled config, are not exported.
    tokenizer.model     the SentencePiece model (only if one was exported)

``content_sha256`` is the sha256 of three parts, each preceded by its length
as 8 big-endian bytes: the params.msgpack bytes, the tokenizer.model bytes
(empty when there is none), and the canonical config JSON
(``json.dumps(config.to_dict(), sort_keys=True, separators=(",", ":"))``).

Graphs are [batch, 2L, K, T, T], float32, indexed [.., target, source]: the L
forward layers (strictly lower-triangular), then the L backward layers mapped
back to the original positions (strictly upper-triangular). Padding neither
sends nor receives weight.

The export is written to a temporary sibling directory and renamed into
place, so a reader never sees half an export; an existing export is replaced
only with ``overwrite=True``. In a multi-host run every process must call
`export_graph_predictor` (sharded arrays are gathered collectively); only
process 0 writes.

This module is the format: it writes an export, and reads one back
(`read_export`: verified bytes, a config and a variables tree) without
building anything that runs. Which leaves an export holds is
`glomo_jax.export.subset`; the loaded object (`ExportedGraphPredictor`,
`load_graph_predictor`) is `glomo_jax.export.predictor`.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import struct
from typing import Any, Mapping, NamedTuple

import flax
import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np

import glomo_jax
from glomo_jax.config import ModelConfig
from glomo_jax.data.tokenizer import Tokenizer
from glomo_jax.errors import InputError
from glomo_jax.export.subset import (COLLECTIONS, check_tree, check_units, expected_leaves,
                                     flatten_tree, graph_predictor_variables, unflatten_tree)
from glomo_jax.io import write_directory_atomically

FORMAT_VERSION = 1
KIND = "glomo_graph_predictor"
MANIFEST_FILENAME = "glomo_export.json"
PARAMS_FILENAME = "params.msgpack"
TOKENIZER_FILENAME = "tokenizer.model"
GRAPH_LAYOUT = ("[batch, 2L, K, T_target, T_source] float32: L forward layers "
                "(strictly lower-triangular), then L backward layers mapped back "
                "to the original positions (strictly upper-triangular)")


# ---- hashing and the manifest ---------------------------------------------------
def _canonical_config_json(config: Mapping) -> bytes:
  return json.dumps(dict(config), sort_keys=True, separators=(",", ":")).encode("utf-8")


def _content_sha256(params_bytes: bytes, tokenizer_bytes: bytes | None,
                    config: Mapping) -> str:
  """The hash of the export's content: the params and tokenizer bytes and
  the model_config as the manifest records it (so a ModelConfig field added
  later, read with its default, leaves older exports verifiable)."""
  digest = hashlib.sha256()
  for part in (params_bytes, tokenizer_bytes or b"", _canonical_config_json(config)):
    digest.update(struct.pack(">Q", len(part)))
    digest.update(part)
  return digest.hexdigest()


def _file_entry(data: bytes) -> dict:
  return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def _json_default(value):
  """Numpy / JAX scalars in user metadata become Python numbers."""
  if hasattr(value, "item") and np.ndim(value) == 0:
    return value.item()
  if isinstance(value, (np.ndarray, jax.Array)):
    return np.asarray(value).tolist()
  raise TypeError(f"metadata value {value!r} ({type(value).__name__}) is not JSON "
                  "serialisable")


# ---- writing ------------------------------------------------------------------------
def _to_host(leaf) -> np.ndarray:
  """A (possibly sharded, possibly multi-host) array as one numpy array."""
  if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    leaf = multihost_utils.process_allgather(leaf, tiled=True)
  return np.asarray(jax.device_get(leaf))


def export_graph_predictor(directory: str, config: ModelConfig, variables: Mapping,
                           tokenizer: Tokenizer | None = None,
                           metadata: Mapping[str, Any] | None = None, *,
                           overwrite: bool = False, units: str = "tokens") -> str:
  """Writes the frozen graph predictor to `directory` (layout: module docstring).

  Args:
    directory: the export directory to create (its parent is created too).
    config: the model's ModelConfig.
    variables: the whole model's (or just the graph predictor's) variables:
      {'params', 'batch_stats'}; leaves may be sharded jax arrays.
    tokenizer: optional; its model file and fingerprint are stored. Its
      vocab_size must not exceed config.vocab_size.
    metadata: optional JSON-serialisable mapping (e.g. {'step': 1000}).
    overwrite: replace an existing export at `directory`.
    units: 'tokens' (variables of GLoMo) or 'pixels' (of PixelGLoMo; no
      tokenizer).

  Returns:
    the absolute path of the export.

  Raises:
    FileExistsError: `directory` exists (and overwrite is False, or it is not a
      glomo export, which is never deleted).
    ValueError: variables do not match the config; tokenizer larger than the
      model's vocabulary; metadata not JSON-serialisable.
  """
  if not isinstance(config, ModelConfig):
    raise TypeError(f"config must be a ModelConfig, got {type(config).__name__}")
  final = os.path.abspath(os.fspath(directory))
  if check_units(units) == "pixels" and tokenizer is not None:
    raise ValueError("a pixel graph predictor has no tokenizer")
  subset = graph_predictor_variables(config, variables, units)
  host = jax.tree_util.tree_map(_to_host, subset)  # collective in multi-host runs
  if tokenizer is not None and tokenizer.vocab_size > config.vocab_size:
    raise ValueError(
        f"vocabulary mismatch: the tokenizer has {tokenizer.vocab_size} ids but "
        f"the model's embedding only {config.vocab_size} rows")
  try:
    metadata_json = json.loads(json.dumps(dict(metadata or {}), default=_json_default))
  except (TypeError, ValueError) as e:
    raise ValueError(f"export metadata must be JSON-serialisable: {e}") from None
  if jax.process_index() != 0:
    return final
  _check_destination(final, overwrite)

  params_bytes = flax.serialization.msgpack_serialize(host)
  tokenizer_bytes = tokenizer.serialized() if tokenizer is not None else None
  files = {PARAMS_FILENAME: _file_entry(params_bytes)}
  if tokenizer_bytes is not None:
    files[TOKENIZER_FILENAME] = _file_entry(tokenizer_bytes)
  manifest = {
      "format_version": FORMAT_VERSION,
      "kind": KIND,
      "model_config": config.to_dict(),
      "tokenizer_fingerprint": tokenizer.fingerprint if tokenizer is not None else None,
      "tokenizer_vocab_size": tokenizer.vocab_size if tokenizer is not None else None,
      "params": [{"path": path, "shape": list(leaf.shape), "dtype": str(leaf.dtype)}
                 for path, leaf in sorted(flatten_tree(host).items())],
      "files": files,
      "content_sha256": _content_sha256(params_bytes, tokenizer_bytes, config.to_dict()),
      "metadata": metadata_json,
      "graph_layout": GRAPH_LAYOUT,
      "units": units,
      "library": {"glomo_jax": glomo_jax.__version__, "jax": jax.__version__,
                  "flax": flax.__version__},
      "created": datetime.datetime.now(datetime.timezone.utc).isoformat(
          timespec="seconds"),
  }
  contents = {PARAMS_FILENAME: params_bytes,
              MANIFEST_FILENAME: (json.dumps(manifest, indent=2, sort_keys=True)
                                  + "\n").encode("utf-8")}
  if tokenizer_bytes is not None:
    contents[TOKENIZER_FILENAME] = tokenizer_bytes
  _write_directory(final, contents, overwrite)
  return final


def _is_export(path: str) -> bool:
  return os.path.isfile(os.path.join(path, MANIFEST_FILENAME))


def _check_destination(final: str, overwrite: bool) -> None:
  if not os.path.lexists(final):
    return
  if os.path.isdir(final) and not os.path.islink(final) and not os.listdir(final):
    return  # an empty directory is simply replaced
  if not _is_export(final) or os.path.islink(final):
    raise FileExistsError(f"{final} exists and is not a glomo export; refusing to "
                          "replace it")
  if not overwrite:
    raise FileExistsError(f"an export already exists at {final}; pass "
                          "overwrite=True to replace it")


def _write_directory(final: str, contents: Mapping[str, bytes], overwrite: bool) -> None:
  """Writes `contents` into a temporary sibling directory, then puts it in
  place of `final` (`io.write_directory_atomically`; an old export, when
  allowed, is replaced only after the new one is complete). A failed write
  (no space, no permission) leaves `final` as it was and raises an OSError
  naming it (`errors.write_failed`)."""
  def fill(tmp):
    for filename in sorted(contents, key=lambda f: f == MANIFEST_FILENAME):
      with open(os.path.join(tmp, filename), "wb") as f:
        f.write(contents[filename])
        f.flush()
        os.fsync(f.fileno())

  def kept():
    return ("the export already there is unchanged" if _is_export(final)
            else "no export was written")

  write_directory_atomically(final, fill, kept=kept, replace=True,
                             check=lambda: _check_destination(final, overwrite))


def _read_bytes(directory: str, filename: str, what: str) -> bytes:
  path = os.path.join(directory, filename)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"incomplete export: {what} {path} is missing")
  with open(path, "rb") as f:
    return f.read()


def _read_manifest(directory: str) -> dict:
  if not os.path.isdir(directory):
    raise FileNotFoundError(f"no graph predictor export at {directory} (not a "
                            "directory)")
  raw = _read_bytes(directory, MANIFEST_FILENAME, "the manifest")
  path = os.path.join(directory, MANIFEST_FILENAME)
  try:
    manifest = json.loads(raw.decode("utf-8"))
  except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
    raise InputError(path, f"corrupt export: not valid JSON ({e})") from None
  if not isinstance(manifest, dict):
    raise InputError(path, "corrupt export: the manifest is not a JSON object")
  version = manifest.get("format_version")
  if version != FORMAT_VERSION:
    raise InputError(path, f"unknown export format_version {version!r}; this glomo_jax "
                     f"reads version {FORMAT_VERSION}")
  if manifest.get("kind") != KIND:
    raise InputError(path, f"not a graph predictor export (kind {manifest.get('kind')!r}, "
                     f"expected {KIND!r})")
  for key, kind in (("model_config", dict), ("files", dict), ("content_sha256", str),
                    ("params", list)):
    if not isinstance(manifest.get(key), kind):
      raise InputError(path, f"corrupt export: the manifest lacks the {kind.__name__} "
                       f"{key!r}")
  for key, kind in (("metadata", dict), ("tokenizer_fingerprint", str),
                    ("tokenizer_vocab_size", int), ("units", str)):
    if manifest.get(key) is not None and not isinstance(manifest[key], kind):
      raise InputError(path, f"corrupt export: the manifest's {key!r} is not a "
                       f"{kind.__name__}")
  return manifest


def _verify_file(directory: str, manifest: dict, filename: str, data: bytes) -> None:
  entry = manifest["files"].get(filename)
  if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
    raise InputError(os.path.join(directory, MANIFEST_FILENAME), "corrupt export: the "
                     f"manifest records no hash for {filename}")
  actual = hashlib.sha256(data).hexdigest()
  if actual != entry["sha256"]:
    cut = (f", {len(data)} bytes where {entry['bytes']} were written (cut short?)"
           if isinstance(entry.get("bytes"), int) and entry["bytes"] != len(data) else "")
    raise InputError(os.path.join(directory, filename), "corrupt export: its sha256 hash "
                     f"differs from the manifest's ({actual[:16]}… != "
                     f"{entry['sha256'][:16]}…{cut})")


class ExportContents(NamedTuple):
  """An export read back and verified (see `read_export`).

  Attributes:
    directory: the export's absolute path.
    manifest: the whole parsed glomo_export.json.
    config: the ModelConfig of manifest['model_config'].
    variables: {'params': {...}, 'batch_stats': {...}} of jnp arrays in the
      dtypes the config gives (the graph predictor's subset only).
    tokenizer_bytes: the exported tokenizer.model, or None if there is none.
    units: 'tokens' or 'pixels'.
  """
  directory: str
  manifest: dict
  config: ModelConfig
  variables: dict
  tokenizer_bytes: bytes | None
  units: str = "tokens"


def read_export(directory: str) -> ExportContents:
  """Reads and verifies an export: manifest, hashes, parameter tree vs config.

  Args:
    directory: the export directory.

  Returns:
    the export's `ExportContents`; its variables live on the default device.

  Raises:
    FileNotFoundError: directory, manifest or params file missing.
    InputError: unparseable manifest, unknown format version or kind, hash
      mismatch ("corrupt export"), or a param tree not matching the config
      (names the path and both shapes).
  """
  directory = os.path.abspath(os.fspath(directory))
  manifest = _read_manifest(directory)
  manifest_path = os.path.join(directory, MANIFEST_FILENAME)
  try:
    config = ModelConfig.from_dict(manifest["model_config"])
  except (TypeError, ValueError) as e:
    raise InputError(manifest_path, f"invalid model_config: {e}") from None
  try:
    units = check_units(manifest.get("units", "tokens"))
  except (TypeError, ValueError) as e:
    raise InputError(manifest_path, str(e)) from None

  params_bytes = _read_bytes(directory, PARAMS_FILENAME, "the parameter file")
  _verify_file(directory, manifest, PARAMS_FILENAME, params_bytes)
  tokenizer_bytes = None
  if TOKENIZER_FILENAME in manifest["files"]:
    tokenizer_bytes = _read_bytes(directory, TOKENIZER_FILENAME, "the tokenizer")
    _verify_file(directory, manifest, TOKENIZER_FILENAME, tokenizer_bytes)
  if (_content_sha256(params_bytes, tokenizer_bytes, manifest["model_config"])
      != manifest["content_sha256"]):
    raise InputError(directory, "corrupt export: the content sha256 hash (params, "
                     "tokenizer and model_config) differs from the manifest's")

  params_path = os.path.join(directory, PARAMS_FILENAME)
  try:
    restored = flax.serialization.msgpack_restore(params_bytes)
  except Exception as e:  # pylint: disable=broad-except
    raise InputError(params_path, f"corrupt export: cannot decode it: {e}") from None
  if not isinstance(restored, dict) or not set(restored) <= set(COLLECTIONS):
    raise InputError(params_path, f"corrupt export: it must hold a dict with keys "
                     f"{list(COLLECTIONS)}")
  flat = flatten_tree(restored)
  try:
    listed = {entry["path"]: tuple(entry["shape"]) for entry in manifest["params"]}
  except (KeyError, TypeError):
    listed = None
  if listed != {path: tuple(np.shape(leaf)) for path, leaf in flat.items()}:
    raise InputError(params_path, "corrupt export: it does not hold the parameters "
                     f"listed in {MANIFEST_FILENAME}")
  try:
    check_tree(config, flat, params_path, allow_extra=False, units=units)
  except ValueError as e:
    raise InputError(directory, str(e)) from None
  expected = expected_leaves(config, units)
  variables = unflatten_tree({path: jnp.asarray(leaf, dtype=expected[path].dtype)
                          for path, leaf in flat.items()})
  return ExportContents(directory, manifest, config, variables, tokenizer_bytes, units)
