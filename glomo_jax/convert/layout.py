"""Where each PyTorch tensor goes in glomo_jax's variable tree, and the
ModelConfig its shapes imply; see `glomo_jax.convert` for the layouts."""
from __future__ import annotations

import functools
import re
from typing import Any, Mapping

import numpy as np

from glomo_jax.config import ModelConfig
from glomo_jax.convert.names import (_normalize, _to_numpy, official_to_peer_name,
                                    peer_to_official_name)

DIRECTIONS = ("fw", "bw")


# ---------------------------------------------------------------------------
# the expected tensors of a config
# ---------------------------------------------------------------------------
class _Entry:
  """One torch tensor: its peer name and shape, where it goes and how."""
  __slots__ = ("name", "shape", "collection", "path", "layer", "fn")

  def __init__(self, name, shape, collection, path, fn=None, layer=None):
    self.name, self.shape, self.collection = name, tuple(shape), collection
    self.path, self.fn, self.layer = tuple(path), fn or (lambda a: a), layer


def _conv_kernel(w):
  return np.transpose(w, (2, 1, 0))                   # [out, in, k] -> [k, in, out]


def _transpose(w):
  return np.transpose(w)


def _expected(c: ModelConfig) -> list[_Entry]:
  """Every torch tensor a model of config `c` needs, in peer names."""
  if c.norm != "batch":
    raise ValueError("only norm='batch' has a PyTorch counterpart (BatchNorm1d)")
  if not c.decoupled:
    raise ValueError("only the decoupled graph predictor (key/query CNNs) has a "
                     "PyTorch counterpart")
  d, k, L, K, H = c.dim, c.kernel_size, c.num_graph_layers, c.num_heads, c.head_dim
  heads = lambda w: np.transpose(w).reshape(d, K, H)
  entries = [_Entry("embed.weight", (c.vocab_size, d), "params", ("embedding",))]
  for x in DIRECTIONS:
    g, f = f"graph_{x}", f"features_{x}"
    for stack, n in (("key", c.key_layers), ("query", c.query_layers)):
      for i in range(n):
        t, p = f"{g}.{stack}_convs.{i}", (g, f"{stack}_cnn", f"block_{i}")
        entries += [
            _Entry(f"{t}.conv.weight", (d, d, k), "params", p + ("kernel",), _conv_kernel),
            _Entry(f"{t}.conv.bias", (d,), "params", p + ("bias",)),
            _Entry(f"{t}.bn.weight", (d,), "params", p + ("norm", "scale")),
            _Entry(f"{t}.bn.bias", (d,), "params", p + ("norm", "bias")),
            _Entry(f"{t}.bn.running_mean", (d,), "batch_stats", p + ("norm", "mean")),
            _Entry(f"{t}.bn.running_var", (d,), "batch_stats", p + ("norm", "var")),
        ]
    for l in range(L):
      for proj in ("key", "query"):
        entries += [
            _Entry(f"{g}.{proj}_proj.{l}.weight", (K * H, d), "params",
                   (g, f"{proj}_kernel"), heads, l),
            _Entry(f"{g}.{proj}_proj.{l}.bias", (K * H,), "params",
                   (g, f"{proj}_bias"), lambda b: b.reshape(K, H), l),
        ]
      if c.sparsity == "squared_relu" and c.threshold == "query":
        entries += [
            _Entry(f"{g}.threshold.{l}.weight", (1, H), "params",
                   (g, "threshold_kernel"), lambda w: w[0], l),
            _Entry(f"{g}.threshold.{l}.bias", (1,), "params",
                   (g, "threshold_bias"), lambda b: b[0], l),
        ]
      if c.composition == "residual":
        entries += [
            _Entry(f"{g}.value_proj.{l}.weight", (d, d), "params",
                   (f, "value_kernel"), _transpose, l),
            _Entry(f"{g}.value_proj.{l}.bias", (d,), "params", (f, "value_bias"), None, l),
        ]
    if c.sparsity == "squared_relu" and c.threshold == "scalar":
      entries.append(_Entry(f"{g}.sparse_bias", (L,), "params", (g, "threshold_bias")))
    if c.composition == "gru":
      entries += _gru_entries(f"{g}.gru", "", 2 * d, d, (f, "gru"))
    for n in range(c.decoder_layers):
      entries += _gru_entries(f"decoder_{x}", f"_l{n}", d, d,
                              (f"decoder_{x}", "gru", f"layer_{n}"))
  return entries


def _gru_entries(prefix, suffix, d_in, h, path):
  return [
      _Entry(f"{prefix}.weight_ih{suffix}", (3 * h, d_in), "params",
             path + ("input_kernel",), _transpose),
      _Entry(f"{prefix}.weight_hh{suffix}", (3 * h, h), "params",
             path + ("hidden_kernel",), _transpose),
      _Entry(f"{prefix}.bias_ih{suffix}", (3 * h,), "params", path + ("input_bias",)),
      _Entry(f"{prefix}.bias_hh{suffix}", (3 * h,), "params", path + ("hidden_bias",)),
  ]


@functools.lru_cache(maxsize=16)
def _target_shapes(config: ModelConfig) -> dict:
  """{collection: {path tuple: shape}} of GLoMo(config).init (dtypes are not
  taken from it: they depend on jax_enable_x64; see `config.param_dtype`)."""
  import jax
  import jax.numpy as jnp
  from glomo_jax.models.glomo import GLoMo
  length = max(config.context_length + 2, 2 * config.sentence_length)
  rngs = {k: jax.random.PRNGKey(0) for k in ("params", "sample", "dropout")}
  tree = jax.eval_shape(lambda: GLoMo(config).init(
      rngs, jnp.zeros((1, length), jnp.int32), train=False))
  out = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    keys = tuple(p.key for p in path)
    out.setdefault(keys[0], {})[keys[1:]] = tuple(leaf.shape)
  return out


def _nest(flat: dict) -> dict:
  tree = {}
  for path, value in sorted(flat.items()):
    node = tree
    for key in path[:-1]:
      node = node.setdefault(key, {})
    node[path[-1]] = value
  return tree


def variables_from_torch_state_dict(state_dict: Mapping[str, Any],
                                    config: ModelConfig) -> dict:
  """Converts a PyTorch GLoMo state_dict into glomo_jax variables.

  Args:
    state_dict: {name: tensor or array}, the release's or the peer's names
      (see the module docstring); a leading ``module.`` is ignored.
    config: the ModelConfig of the target model (e.g. from
      `config_from_torch_state_dict`).

  Returns:
    {"params": ..., "batch_stats": ...}: nested dicts of numpy arrays in the
    param dtype, the exact tree of ``GLoMo(config).init(...)``.

  Raises:
    ValueError listing missing names, unexpected names and shape mismatches
    (torch shapes, expected and given), or a tied output weight that differs
    from the embedding.
  """
  origin = {}
  arrays, tied = _normalize(state_dict, origin)
  entries = _expected(config)
  official = sum(origin[n] != n for n in origin) > len(origin) // 2
  shown = lambda n: peer_to_official_name(n) if official else n
  missing = [shown(e.name) for e in entries if e.name not in arrays]
  known = {e.name for e in entries}
  unexpected = sorted(origin[n] for n in set(arrays) - known)
  mismatched = [f"{origin[e.name]}: expected {e.shape}, got {arrays[e.name].shape}"
                for e in entries if e.name in arrays and arrays[e.name].shape != e.shape]
  if missing or unexpected or mismatched:
    lines = [f"state_dict does not fit ModelConfig({_summary(config)}):"]
    if missing:
      lines.append(f"  missing ({len(missing)}): {missing}")
    if unexpected:
      lines.append(f"  unexpected ({len(unexpected)}): {unexpected}")
    if mismatched:
      lines.append(f"  shape mismatches ({len(mismatched)}, torch layout):")
      lines += [f"    {m}" for m in mismatched]
    raise ValueError("\n".join(lines))
  emb = arrays["embed.weight"]
  for name, value in tied.items():
    if value.shape != emb.shape or not np.array_equal(value, emb):
      raise ValueError(f"{name} is tied to the embedding in the release, but it "
                       f"differs from it (shape {value.shape} vs {emb.shape})")

  targets = _target_shapes(config.replace(dtype="float32", param_dtype="float32"))
  dtype = np.dtype(config.param_dtype)
  flat = {col: {} for col in targets}
  for e in entries:
    shape = targets[e.collection][e.path]
    value = np.asarray(e.fn(arrays[e.name]))
    if e.layer is None:
      flat[e.collection][e.path] = value.astype(dtype)
      continue
    stacked = flat[e.collection].setdefault(e.path, np.zeros(shape, dtype))
    stacked[e.layer] = value
  for col, leaves in targets.items():
    for path, shape in leaves.items():
      got = flat[col].get(path)
      if got is None or got.shape != shape:   # a bug in `_expected`, not the input
        raise AssertionError(f"{col}/{'/'.join(path)}: converted "
                             f"{None if got is None else got.shape}, model {shape}")
  extra = {col: set(flat[col]) - set(targets[col]) for col in flat}
  if any(extra.values()):
    raise AssertionError(f"converted leaves the model does not have: {extra}")
  return {col: _nest(flat[col]) for col in ("params", "batch_stats") if col in flat}


def convert_tensor(name: str, value: Any, config: ModelConfig):
  """One torch tensor (either naming scheme) -> its glomo_jax leaf.

  For single tensors or gradients. Returns (collection, path, layer, array):
  the leaf ``variables[collection][path[0]]…[path[-1]]``, the index along its
  stacked layer axis (None: the whole leaf) and the value in glomo_jax layout
  (dtype unchanged). Raises KeyError for a name the config has no leaf for.
  """
  peer = official_to_peer_name(name[len("module."):] if name.startswith("module.") else name)
  for e in _expected(config):
    if e.name == peer:
      value = _to_numpy(value)
      if value.shape != e.shape:
        raise ValueError(f"{name}: expected {e.shape}, got {value.shape}")
      return e.collection, e.path, e.layer, np.asarray(e.fn(value))
  raise KeyError(f"{name!r} (peer name {peer!r}) has no glomo_jax leaf in this config")


def _summary(c: ModelConfig) -> str:
  return (f"vocab_size={c.vocab_size}, dim={c.dim}, num_heads={c.num_heads}, "
          f"head_dim={c.head_dim}, num_graph_layers={c.num_graph_layers}, "
          f"key_layers={c.key_layers}, query_layers={c.query_layers}, "
          f"kernel_size={c.kernel_size}, threshold={c.threshold!r}, "
          f"composition={c.composition!r}, decoder_layers={c.decoder_layers}")


# ---------------------------------------------------------------------------
# config inference
# ---------------------------------------------------------------------------
def _indices(arrays, pattern):
  return sorted({int(m.group(1)) for m in map(re.compile(pattern).match, arrays) if m})


def config_from_torch_state_dict(state_dict: Mapping[str, Any], **overrides) -> ModelConfig:
  """Infers a ModelConfig from a state_dict's shapes (either naming scheme).

  From shapes: vocab_size and dim (embedding), key_layers, query_layers,
  kernel_size (convs), num_graph_layers (key projections), threshold
  ('query' with sparse_trans / threshold Linear(H, 1): then head_dim = H and
  num_heads = K·H / H; 'scalar' with the release's sparse_bias; 'zero', the
  release's sparse_mode 1, only when asked for with threshold='zero', since
  its other modes store no threshold either), composition
  ('gru' with a GRU cell, else 'residual' with value maps) and
  decoder_layers. Everything else (context_length, sample_positions, …)
  comes from `ModelConfig.paper()`.

  num_heads cannot be told from the shapes when the threshold is 'scalar'
  or 'zero' (only the product K·H is stored): it is then `overrides['num_heads']`,
  else the release's hard-coded 8, and head_dim = K·H / num_heads.

  Args:
    state_dict: {name: tensor or array}.
    **overrides: ModelConfig fields; one that contradicts a value the shapes
      fix raises ValueError.

  Returns:
    a ModelConfig.
  """
  arrays, _ = _normalize(state_dict)
  shape = lambda name: arrays[name].shape
  if "embed.weight" not in arrays:
    raise ValueError("no embedding (enc_emb.weight or embed.weight) in the state_dict")
  vocab, d = shape("embed.weight")
  key_layers = len(_indices(arrays, r"^graph_fw\.key_convs\.(\d+)\.conv\.weight$"))
  query_layers = len(_indices(arrays, r"^graph_fw\.query_convs\.(\d+)\.conv\.weight$"))
  if not key_layers or not query_layers:
    raise ValueError("no key/query convolutions (st_predictor_fw.key_cnn.* / "
                     "graph_fw.key_convs.*): only the release's cnn_sa model loads")
  kernel = shape("graph_fw.key_convs.0.conv.weight")[2]
  layers = len(_indices(arrays, r"^graph_fw\.key_proj\.(\d+)\.weight$"))
  if not layers:
    raise ValueError("no key projections (key_dot_trans.* / key_proj.*)")
  kh = shape("graph_fw.key_proj.0.weight")[0]
  fixed = dict(vocab_size=vocab, dim=d, key_layers=key_layers, query_layers=query_layers,
               kernel_size=kernel, num_graph_layers=layers)
  if "graph_fw.threshold.0.weight" in arrays:
    h = shape("graph_fw.threshold.0.weight")[1]
    if kh % h:
      raise ValueError(f"key projection width {kh} is not a multiple of the "
                       f"threshold's input width {h}")
    fixed.update(threshold="query", sparsity="squared_relu", head_dim=h, num_heads=kh // h)
  elif "graph_fw.sparse_bias" in arrays or overrides.get("threshold") == "zero":
    heads = overrides.get("num_heads", 8)
    if kh % heads:
      raise ValueError(f"key projection width {kh} is not divisible by "
                       f"num_heads={heads}; pass num_heads=")
    threshold = "scalar" if "graph_fw.sparse_bias" in arrays else "zero"
    fixed.update(threshold=threshold, sparsity="squared_relu", head_dim=kh // heads,
                 num_heads=heads)
  else:
    raise ValueError("no sparsity threshold (sparse_trans.* for the release's "
                     "sparse_mode 4, sparse_bias for sparse_mode 2); for "
                     "sparse_mode 1 (no threshold) pass threshold='zero'; other "
                     "sparse modes have no glomo_jax counterpart")
  if "graph_fw.gru.weight_ih" in arrays:
    fixed["composition"] = "gru"
  elif "graph_fw.value_proj.0.weight" in arrays:
    fixed["composition"] = "residual"
  else:
    raise ValueError("neither a GRU cell (gru_cell.*) nor value maps "
                     "(value_trans.*): the release's no_gru with use_value 0 "
                     "has no glomo_jax counterpart")
  fixed["decoder_layers"] = len(_indices(arrays, r"^decoder_fw\.weight_ih_l(\d+)$"))
  for name, value in overrides.items():
    if name in fixed and fixed[name] != value:
      raise ValueError(f"override {name}={value!r} contradicts the state_dict, "
                       f"whose shapes give {fixed[name]!r}")
  return ModelConfig.paper(**{**fixed, **overrides})


