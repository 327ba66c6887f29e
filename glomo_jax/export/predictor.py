"""The loaded graph predictor: `load_graph_predictor` and what it returns.

`load_graph_predictor` reads an export through `glomo_jax.export.format`
(which verifies every byte against the manifest and the parameter tree
against the config), pairs it with a tokenizer, and returns an
`ExportedGraphPredictor`: the config, the variables, and the pure, jitted
`predict(variables, tokens, mask) -> graphs [batch, 2L, K, T, T]`, plus
host-side helpers from text (`encode`, `graphs_from_text`). An export of a
pixel predictor (units 'pixels') loads as an `ExportedPixelGraphPredictor`:
`predict(variables, images) -> graphs [batch, 2L, K, H·W, H·W]` for uint8
images of any size. Nothing here needs the training loop.
"""
from __future__ import annotations

import functools
import os
from typing import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from glomo_jax.config import ModelConfig
from glomo_jax.data.tokenizer import Tokenizer
from glomo_jax.export import format as export_format
from glomo_jax.models.glomo import GLoMo
from glomo_jax.models.pixel_glomo import PixelGLoMo, check_images


@functools.partial(jax.jit, static_argnums=0)
def _predict(config: ModelConfig, variables, tokens, mask):
  """float32 graphs [batch, 2L, K, T, T] of int tokens [batch, T] (mask: [batch,
  T] or None); the config is static, so one compile per config and shape."""
  graphs = GLoMo(config).apply(variables, tokens, mask, method=GLoMo.graphs)
  return graphs.astype(jnp.float32)


class ExportedGraphPredictor:
  """A loaded graph predictor: config, variables, tokenizer and pure functions.

  Attributes:
    config: the ModelConfig.
    variables: {'params', 'batch_stats'} of jnp arrays (graph predictor only).
    tokenizer: the exported Tokenizer, the one passed to the loader, or None.
    metadata: the metadata stored at export time (e.g. {'step': ...}).
    manifest: the whole parsed glomo_export.json.
    directory: where it was loaded from.
    module: `GLoMo(config)`; ``module.apply(variables, tokens, mask,
      method=GLoMo.graphs)`` is what `predict` jits.
  """

  def __init__(self, config: ModelConfig, variables: Mapping,
               tokenizer: Tokenizer | None = None, *, metadata: Mapping | None = None,
               manifest: Mapping | None = None, directory: str | None = None):
    self.config = config
    self.variables = variables
    self.tokenizer = tokenizer
    self.metadata = dict(metadata or {})
    self.manifest = dict(manifest or {})
    self.directory = directory
    self.module = GLoMo(config)

  @classmethod
  def untrained(cls, config: ModelConfig, tokenizer: Tokenizer | None = None,
                seed: int = 0, **kwargs) -> "ExportedGraphPredictor":
    """A predictor of `config` with freshly initialised parameters (seed
    `seed`): a baseline for what training adds, or a stand-in for timing.
    kwargs: the constructor's (metadata gets 'untrained_seed')."""
    variables = GLoMo(config).init(jax.random.PRNGKey(seed), jnp.zeros((1, 1), jnp.int32),
                                   method=GLoMo.graphs)
    metadata = {**kwargs.pop("metadata", {}), "untrained_seed": seed}
    return cls(config, variables, tokenizer, metadata=metadata, **kwargs)

  def __repr__(self):
    c = self.config
    return (f"ExportedGraphPredictor(layers=2x{c.num_graph_layers}, "
            f"heads={c.num_heads}, vocab={c.vocab_size}, tokenizer={self.tokenizer!r}, "
            f"directory={self.directory!r})")

  def _check_tokens(self, tokens, mask):
    """Host-side checks of concrete inputs (skipped under a jax transform)."""
    if isinstance(tokens, jax.core.Tracer) or not getattr(
        tokens, "is_fully_addressable", True):
      return
    ids = np.asarray(tokens)
    if ids.ndim != 2:
      raise ValueError(f"tokens must be [batch, T] ids, got shape {ids.shape}")
    if not np.issubdtype(ids.dtype, np.integer):
      raise ValueError(f"tokens must be integer ids, got dtype {ids.dtype}")
    if mask is not None and np.shape(mask) != ids.shape:
      raise ValueError(f"mask {np.shape(mask)} must have the shape of tokens "
                       f"{ids.shape}")
    if ids.size:
      vocab = self.config.vocab_size
      high, low = int(ids.max()), int(ids.min())
      if high >= vocab:
        raise ValueError(f"vocabulary mismatch: id {high} >= predictor vocabulary "
                         f"{vocab}")
      if low < 0:
        raise ValueError(f"invalid token id {low}: ids must be in [0, {vocab})")

  def predict(self, variables: Mapping, tokens, mask=None) -> jax.Array:
    """Graphs of a batch: a pure function of (variables, tokens, mask), jitted
    with the config static; usable inside the caller's own jit / vmap.

    Args:
      variables: {'params', 'batch_stats'}, e.g. `self.variables`.
      tokens: int [batch, T]; ids in [0, config.vocab_size) (checked on the
        host when concrete).
      mask: optional [batch, T], 1 = real token.

    Returns:
      float32 [batch, 2L, K, T, T] (layout: `glomo_jax.export.format`).
    """
    self._check_tokens(tokens, mask)
    return _predict(self.config, variables, tokens, mask)

  def __call__(self, tokens, mask=None) -> jax.Array:
    """`predict` with this predictor's own variables."""
    return self.predict(self.variables, tokens, mask)

  def encode(self, texts: str | Sequence[str], max_length: int | None = None
             ) -> tuple[np.ndarray, np.ndarray, list[list[str]]]:
    """Tokenizes and pads a batch of texts.

    Args:
      texts: one text or a list of texts.
      max_length: cut each text to this many tokens; T is the longest text's
        length otherwise (at least 1).

    Returns:
      tokens: int32 [batch, T], padded with tokenizer.pad_id;
      mask: bool [batch, T], True for real tokens;
      pieces: per text, the pieces of its real tokens (len = its length).
    """
    if self.tokenizer is None:
      raise ValueError("this export has no tokenizer: pass one to "
                       "load_graph_predictor(directory, tokenizer=...)")
    if isinstance(texts, str):
      texts = [texts]
    texts = list(texts)
    if not texts:
      raise ValueError("encode needs at least one text")
    if max_length is not None and max_length < 1:
      raise ValueError(f"max_length must be >= 1, got {max_length}")
    ids = [list(row)[:max_length] for row in self.tokenizer.encode_batch(texts)]
    length = max_length if max_length is not None else max(1, max(map(len, ids)))
    tokens = np.full((len(ids), length), self.tokenizer.pad_id, np.int32)
    mask = np.zeros((len(ids), length), bool)
    for b, row in enumerate(ids):
      tokens[b, :len(row)] = row
      mask[b, :len(row)] = True
    pieces = [[self.tokenizer.id_to_piece(i) for i in row] for row in ids]
    return tokens, mask, pieces

  def graphs_from_text(self, texts: str | Sequence[str], max_length: int | None = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[list[str]]]:
    """(graphs float32 numpy [batch, 2L, K, T, T], tokens, mask, pieces) of
    texts (see `encode`); rows and columns of padding are zero."""
    tokens, mask, pieces = self.encode(texts, max_length)
    graphs = np.asarray(jax.device_get(self(tokens, mask)))
    return graphs, tokens, mask, pieces


@functools.partial(jax.jit, static_argnums=0)
def _predict_pixels(config: ModelConfig, variables, images):
  """float32 graphs [batch, 2L, K, H·W, H·W] of uint8 images [batch, H, W, 3]."""
  model = PixelGLoMo(config, tuple(images.shape[1:3]))
  return model.apply(variables, images, method=PixelGLoMo.graphs).astype(jnp.float32)


class ExportedPixelGraphPredictor:
  """A loaded pixel graph predictor: config, variables and a pure function.

  Attributes:
    config, variables, metadata, manifest, directory: as
      `ExportedGraphPredictor`.
  """

  def __init__(self, config: ModelConfig, variables: Mapping, *,
               metadata: Mapping | None = None, manifest: Mapping | None = None,
               directory: str | None = None):
    self.config, self.variables = config, variables
    self.metadata = dict(metadata or {})
    self.manifest = dict(manifest or {})
    self.directory = directory

  def __repr__(self):
    c = self.config
    return (f"ExportedPixelGraphPredictor(layers=2x{c.num_graph_layers}, "
            f"heads={c.num_heads}, levels={c.vocab_size}, directory={self.directory!r})")

  def predict(self, variables: Mapping, images) -> jax.Array:
    """Graphs between the pixels of uint8 images [batch, H, W, 3] (any H, W):
    float32 [batch, 2L, K, H·W, H·W], raster indices t = r·W + c, [.., target,
    source]. Pure and jitted (config static, one compile per image shape)."""
    if not isinstance(images, jax.core.Tracer):
      check_images(jnp.asarray(images))
    return _predict_pixels(self.config, variables, images)

  def __call__(self, images) -> jax.Array:
    """`predict` with this predictor's own variables."""
    return self.predict(self.variables, images)


def load_graph_predictor(directory: str, tokenizer: Tokenizer | None = None
                         ) -> ExportedGraphPredictor | ExportedPixelGraphPredictor:
  """Loads an export written by `export_graph_predictor`; needs no trainer.
  A pixel export (units 'pixels') gives an `ExportedPixelGraphPredictor`.

  Args:
    directory: the export directory.
    tokenizer: optional tokenizer to pair with the predictor instead of the
      exported one. If the export recorded a tokenizer, the two must have the
      same fingerprint; otherwise its vocab_size must fit the model's.

  Returns:
    an `ExportedGraphPredictor` whose variables live on the default device.

  Raises:
    FileNotFoundError: directory, manifest or params file missing.
    ValueError: unparseable manifest, unknown format version, hash mismatch
      ("corrupt export"), param tree not matching the config (names the path
      and both shapes), or a tokenizer of another vocabulary ("vocabulary
      mismatch").
  """
  directory = os.path.abspath(os.fspath(directory))
  contents = export_format.read_export(directory)
  config, manifest = contents.config, contents.manifest
  if contents.units == "pixels":
    if tokenizer is not None:
      raise ValueError(f"{directory} holds a pixel graph predictor, which takes no "
                       "tokenizer")
    return ExportedPixelGraphPredictor(config, contents.variables,
                                       metadata=manifest.get("metadata") or {},
                                       manifest=manifest, directory=directory)

  recorded = manifest.get("tokenizer_fingerprint")
  recorded_size = manifest.get("tokenizer_vocab_size")
  if tokenizer is not None:
    if recorded is not None and tokenizer.fingerprint != recorded:
      raise ValueError(
          f"vocabulary mismatch: the export at {directory} was made with the "
          f"tokenizer {recorded} ({recorded_size} ids), but the tokenizer passed "
          f"is {tokenizer.fingerprint} ({tokenizer.vocab_size} ids)")
  elif contents.tokenizer_bytes is not None:
    tokenizer = Tokenizer(contents.tokenizer_bytes)
  if tokenizer is not None and tokenizer.vocab_size > config.vocab_size:
    raise ValueError(
        f"vocabulary mismatch: the tokenizer ({tokenizer.fingerprint}) has "
        f"{tokenizer.vocab_size} ids but the predictor's vocabulary is "
        f"{config.vocab_size}")
  return ExportedGraphPredictor(config, contents.variables, tokenizer,
                                metadata=manifest.get("metadata") or {},
                                manifest=manifest, directory=directory)
