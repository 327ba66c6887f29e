"""Model configuration: every hyper-parameter of the GLoMo pretraining network.

`ModelConfig` is a frozen dataclass (hashable, so it can be a static argument of
`jax.jit` and a field of a linen module). Presets:

* `ModelConfig.paper()`: the authors' recommended run (kimiyoung/glomo
  `pretrain/`, ``--dec_len 3 --nlayers 3 --nlayers_key 4 --nlayers_query 4
  --sparse_mode 4 --no_gru 0 --use_value 1``): d 512, 8 heads of 256, 3 graph
  layers, 4+4 conv layers, kernel 3, D 3, 2 decoder layers, 20 sampled positions.
* `ModelConfig.tiny()`: a few thousand parameters, for tests and CPU smoke runs.

`from_dict(cls, values)` builds any config dataclass of the library (nested
ones included) from plain dicts, as experiments do from a ConfigDict;
`DictConfig` gives those dataclasses `from_dict`, `to_dict` and `replace`.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Mapping, TypeVar

import jax.numpy as jnp
import numpy as np

from glomo_jax.errors import InputError


def field_type(hint):
  """The type a field's hint names: X for `X` and for `X | None` (generic
  aliases reduced to their origin, e.g. tuple for tuple[str, ...])."""
  if typing.get_origin(hint) in (typing.Union, types.UnionType):
    kinds = [a for a in typing.get_args(hint) if a is not type(None)]
    if len(kinds) == 1:
      hint = kinds[0]
  return typing.get_origin(hint) or hint


def _accepts(hint, value) -> bool:
  """Whether `value` fits the type hint of a config field: int (not bool),
  float (or int), str, bool, None for `X | None`, a tuple (or list) of the
  element type, a dataclass instance; other hints accept anything."""
  if typing.get_origin(hint) in (typing.Union, types.UnionType):
    return any(_accepts(arg, value) for arg in typing.get_args(hint))
  if hint is type(None):
    return value is None
  if hint is bool:
    return isinstance(value, (bool, np.bool_))
  if hint is int:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)
  if hint is float:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
  if hint is str:
    return isinstance(value, str)
  if typing.get_origin(hint) is tuple or hint is tuple:
    args = [a for a in typing.get_args(hint) if a is not Ellipsis]
    return isinstance(value, (tuple, list)) and all(
        not args or _accepts(args[0], v) for v in value)
  if dataclasses.is_dataclass(hint):
    return isinstance(value, hint)
  return True


def _type_name(hint) -> str:
  if typing.get_origin(hint) in (typing.Union, types.UnionType):
    return " or ".join(_type_name(arg) for arg in typing.get_args(hint))
  return "None" if hint is type(None) else getattr(hint, "__name__", str(hint))


def set_fields(group: Mapping[str, Any]) -> dict | None:
  """The entries of an optional group's mapping that are set (not None;
  nested groups alike), or None when none is: how a `X | None` dataclass
  field is given field by field (e.g. from command-line flags), its unset
  fields taking their defaults."""
  out = {}
  for key, value in group.items():
    if isinstance(value, Mapping):
      value = set_fields(value)
    if value is not None:
      out[key] = value
  return out or None


def moved_fields(values: Mapping[str, Any], moved: Mapping[str, str],
                 fields: Mapping[str, Any]) -> Mapping[str, Any]:
  """`values` with the keys of an earlier layout (`moved`: old key -> dotted
  path of its field now, e.g. 'num_steps' -> 'loop.num_steps') put where
  their fields are now, so a run's recorded config.json of that layout still
  reads. A top-level key that is a field now stays where it is; an old key
  inside a group ('optim.steps' -> 'loop.num_steps') names a field that
  left that group, and moves whenever the group has it."""
  old = [k for k in moved if _has(values, k) and not (k in values and k in fields)]
  if not old:
    return values
  out = _copy(values)
  for key in old:
    *parents, leaf = key.split(".")
    node = out
    for part in parents:
      node = node[part]
    value = node.pop(leaf)
    *parents, leaf = moved[key].split(".")
    node = out
    for part in parents:
      node = node.setdefault(part, {})
    node.setdefault(leaf, value)
  return out


def _has(values: Mapping[str, Any], dotted: str) -> bool:
  """Whether the nested mapping `values` holds the dotted key."""
  for part in dotted.split("."):
    if not isinstance(values, Mapping) or part not in values:
      return False
    values = values[part]
  return True


def _copy(values: Mapping[str, Any]) -> dict:
  """A copy of nested mappings (the leaves shared)."""
  return {k: (_copy(v) if isinstance(v, Mapping) else v) for k, v in values.items()}


def from_dict(cls, values: Mapping[str, Any], where: str | None = None, defaults=None):
  """An instance of dataclass `cls` from a (nested) mapping of its fields.

  Fields whose type is a dataclass are built from mappings too. Missing keys
  take their defaults: `defaults`' values when given (an instance of `cls`),
  else the class's; a group's (a field of dataclass type X) are those of its
  field's default when that is an instance (the downstream configs' `loop`:
  `DOWNSTREAM_LOOP`). A field of type `X | None` given as a mapping is built
  from its set entries (`set_fields`; the others: X's defaults), or is None
  when it sets none. `where` names the section in messages (default the class name).

  Raises:
    InputError: an unknown key (naming it and the known ones), or a value
      whose type does not fit its field's hint (`_accepts`; naming the field).
  """
  where = where or cls.__name__
  if not isinstance(values, Mapping):
    raise InputError(where, f"must be a mapping of its fields, got {type(values).__name__}")
  fields = {f.name: f for f in dataclasses.fields(cls)}
  values = moved_fields(values, getattr(cls, "MOVED_FIELDS", {}), fields)
  unknown = sorted(set(values) - set(fields), key=str)
  if unknown:
    raise InputError(where, f"unknown fields {unknown}; known: {sorted(fields)}")
  hints = typing.get_type_hints(cls)
  kwargs = {}
  for name, value in values.items():
    hint = hints.get(name)
    inner = field_type(hint)
    if dataclasses.is_dataclass(inner) and isinstance(value, Mapping) and inner is not hint:
      value = set_fields(value)          # an optional group: its unset fields take defaults
    if dataclasses.is_dataclass(inner) and isinstance(value, Mapping):
      default = fields[name].default     # a group's own defaults (not an optional one's)
      value = from_dict(inner, value, f"{where}.{name}",
                        default if inner is hint and isinstance(default, inner) else None)
    elif not _accepts(hint, value):
      raise InputError(f"{where}.{name}", f"{value!r:.100} is a {type(value).__name__}, "
                       f"expected {_type_name(hint)}")
    kwargs[name] = value
  if defaults is not None:
    kwargs = {**{f.name: getattr(defaults, f.name) for f in dataclasses.fields(cls)
                 if f.init}, **kwargs}
  return cls(**kwargs)


_Config = TypeVar("_Config", bound="DictConfig")


def fused_graph_unsupported(config) -> str | None:
  """What of `config` the fused graph kernel (`ops.pallas.graph_mix`) does not
  compute, or None: it forms Eq. 1's squared-ReLU graph of a decoupled
  predictor, for the context objective's start states."""
  if config.sparsity != "squared_relu":
    return f"sparsity={config.sparsity!r} (only 'squared_relu')"
  if not config.decoupled:
    return "the coupled predictor (decoupled=False)"
  if config.objective != "context":
    return f"objective={config.objective!r} (only 'context')"
  if config.distance_prior:
    return "distance_prior (only 0)"
  return None


class DictConfig:
  """Base of the library's config dataclasses: built from and written to
  plain (nested) dicts, copied with changes."""

  @classmethod
  def from_dict(cls: type[_Config], values: Mapping[str, Any]) -> _Config:
    """From a mapping of the fields; unknown keys raise (`from_dict`)."""
    return from_dict(cls, values)

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)

  def replace(self: _Config, **changes) -> _Config:
    return dataclasses.replace(self, **changes)


_CHOICES = {
    "norm": ("batch", "layer"),
    "threshold": ("query", "scalar", "zero"),
    "sparsity": ("squared_relu", "softmax"),
    "composition": ("gru", "residual"),
    "objective": ("context", "sentence"),
    "dtype": ("float32", "bfloat16", "float64", "float16"),
    "param_dtype": ("float32", "float64"),
    "bn_scale_init": ("ones", "uniform"),
    "kernels": ("reference", "fused", "fused_loss", "fused_graph"),
}


@dataclasses.dataclass(frozen=True)
class ModelConfig(DictConfig):
  """Hyper-parameters of `glomo_jax.GLoMo` (the paper's symbols, the authors' values:
  docs/design.md §3 and §6).

  Attributes:
    vocab_size: V, rows of the embedding (= columns of the tied output layer).
    dim: d, width of embeddings, CNN features, feature-predictor states and the
      decoder GRU.
    num_heads: K, graph heads per layer. `dim` must be divisible by it (the
      feature predictor splits d features into K slices of d/K).
    head_dim: width of each head's key and query (authors: d/2).
    num_graph_layers: L.
    key_layers, query_layers: depth of the key and query causal CNN stacks.
    kernel_size: width of the causal convolutions.
    norm: 'batch' (authors: BatchNorm over the T+k-1 conv outputs) or 'layer'.
    threshold: 'query' (θ_j = w·q_j + c, authors' sparse_mode 4), 'scalar'
      (one learned bias per layer, the paper's Eq. 1; authors' sparse_mode 2)
      or 'zero' (θ = 0, a plain ReLU before squaring; authors' sparse_mode 1).
      The last two were tried against dead heads (`experiments.predictor_table`);
      at CPU scale they leave more heads dead than 'query'.
    sparsity: 'squared_relu' (Eq. 1) or 'softmax' (the "− sparse" ablation).
    composition: 'gru' (one GRU cell shared by all layers, authors' default) or
      'residual' (F + G·Linear_l(F)).
    decoupled: False gives the "− decouple" ablation: graphs are computed from
      the feature predictor's own layer features (no key/query CNNs).
    context_length: D, future tokens predicted from each position.
    decoder_layers: depth of the context decoder GRU.
    sample_positions: decoder start positions drawn per batch and direction
      (authors: 20); 0 decodes every position that has D real future tokens.
    objective: 'context' (Eq. 3) or 'sentence' (the "− unit-level" ablation: a
      pooled vector of each segment predicts the next segment).
    sentence_length: segment length of the 'sentence' objective.
    dropout: locked dropout on the CNN inputs and the decoder's initial state
      (authors: 0).
    embed_grad_scale_by_freq: divide the embedding lookup's gradient by each
      token's count in the batch (PyTorch ``scale_grad_by_freq``; authors: on).
    loss_chunk_size: rows of the tied softmax computed at once: its memory is
      O(chunk · V) whatever B·T·D is (at the paper's V = 100k, 512 rows are
      205 MB of logits; the full [B·T·D, V] array exists only if it is
      itself no larger than one chunk).
    dtype: compute dtype of matmuls and convolutions (their operands and
      activations); they accumulate in at least float32, and graph
      normalisation and the softmax cross-entropy always run in at least
      float32. 'bfloat16' is mixed precision: on a CPU with AVX512-BF16 its
      GEMMs run at twice the float32 rate.
    param_dtype: storage dtype of parameters.
    bn_momentum: weight of the old running statistics (PyTorch 0.1 ⇒ 0.9).
    bn_epsilon: BatchNorm / LayerNorm epsilon (PyTorch 1e-5).
    bn_scale_init: BatchNorm's scale γ starts at 'ones' (PyTorch ≥ 0.4) or
      'uniform' ~ U(0, 1), as the authors' PyTorch 0.3.1 drew it.
    distance_prior: beyond the paper (0 = off, the authors' graphs): a
      learned prior over the distance j − i of each layer and head,
      G_ji ∝ ReLU(s_ji − θ_j)² · exp(β_{l,h}(j − i)), with one β for each
      distance 1 … distance_prior − 1 and one for all longer ones
      (`ops.sparse_graph.distance_reweight`). Text units only.
    distance_prior_init: β starts at −distance_prior_init · ln(d): 0 leaves
      the graphs of the initial parameters unchanged, 1 weights each source
      by 1/d.
    kernels: the ops of the training path: 'reference' (the jax ops), or the
      fused Pallas kernels of `glomo_jax.ops.pallas`, the same numbers to
      float tolerance: 'fused_loss' (the tied softmax cross-entropy),
      'fused_graph' (Eq. 1's graphs mixed into the features without forming
      them, for `GLoMo`'s loss; its `graphs` and `features`, the export and
      the transfer keep the dense graphs) or 'fused' (both). Interpreted,
      slowly, off GPUs and TPUs (tests); 'fused_graph' needs squared_relu
      sparsity, a decoupled predictor, the context objective and no
      distance prior (`fused_graph_unsupported`).
  """

  vocab_size: int = 1000
  dim: int = 64
  num_heads: int = 4
  head_dim: int = 32
  num_graph_layers: int = 2
  key_layers: int = 2
  query_layers: int = 2
  kernel_size: int = 3
  norm: str = "batch"
  threshold: str = "query"
  sparsity: str = "squared_relu"
  composition: str = "gru"
  decoupled: bool = True
  context_length: int = 3
  decoder_layers: int = 2
  sample_positions: int = 0
  objective: str = "context"
  sentence_length: int = 16
  dropout: float = 0.0
  embed_grad_scale_by_freq: bool = False
  loss_chunk_size: int = 512
  dtype: str = "float32"
  param_dtype: str = "float32"
  bn_momentum: float = 0.9
  bn_epsilon: float = 1e-5
  bn_scale_init: str = "ones"
  distance_prior: int = 0
  distance_prior_init: float = 0.0
  kernels: str = "reference"

  def __post_init__(self):
    for name, allowed in _CHOICES.items():
      value = getattr(self, name)
      if value not in allowed:
        raise ValueError(
            f"ModelConfig.{name}={value!r} is not one of {list(allowed)}")
    positive = ("vocab_size", "dim", "num_heads", "head_dim", "num_graph_layers",
                "kernel_size", "context_length", "decoder_layers",
                "sentence_length", "loss_chunk_size")
    for name in positive:
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"ModelConfig.{name} must be a positive int, got {value!r}")
    for name in ("key_layers", "query_layers", "sample_positions", "distance_prior"):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"ModelConfig.{name} must be an int >= 0, got {value!r}")
    if self.decoupled and (self.key_layers < 1 or self.query_layers < 1):
      raise ValueError("a decoupled graph predictor needs key_layers >= 1 and "
                       "query_layers >= 1")
    if self.dim % self.num_heads:
      raise ValueError(f"ModelConfig.dim={self.dim} must be divisible by "
                       f"num_heads={self.num_heads} (features are split into "
                       "one slice per head)")
    if not 0.0 <= self.dropout < 1.0:
      raise ValueError(f"ModelConfig.dropout must be in [0, 1), got {self.dropout}")
    unsupported = fused_graph_unsupported(self)
    if self.fused_graph and unsupported:
      raise ValueError(f"ModelConfig.kernels={self.kernels!r}: the fused graph kernel does "
                       f"not compute {unsupported}; use kernels='reference' or 'fused_loss'"
                       + (", or the authors' graphs (distance_prior=0: the presets' "
                          "':authors')" if self.distance_prior else ""))

  # ---- kernels ------------------------------------------------------------
  @property
  def fused_loss(self) -> bool:
    """The tied softmax cross-entropy runs as the fused Pallas kernel."""
    return self.kernels in ("fused", "fused_loss")

  @property
  def fused_graph(self) -> bool:
    """The training path mixes features with the fused graph kernel."""
    return self.kernels in ("fused", "fused_graph")

  # ---- dtypes -------------------------------------------------------------
  @property
  def compute_dtype(self) -> Any:
    return jnp.dtype(self.dtype)

  @property
  def params_dtype(self) -> Any:
    return jnp.dtype(self.param_dtype)

  @property
  def graph_dtype(self) -> Any:
    """dtype of scores, graphs and softmax: at least float32."""
    return jnp.promote_types(self.compute_dtype, jnp.float32)

  # ---- presets -------------------------------------------------------------
  @classmethod
  def paper(cls, **changes) -> "ModelConfig":
    """The authors' recommended pretraining run (a vocabulary of 100k, their word count)."""
    base = cls(vocab_size=100_000, dim=512, num_heads=8, head_dim=256,
               num_graph_layers=3, key_layers=4, query_layers=4, kernel_size=3,
               norm="batch", threshold="query", sparsity="squared_relu",
               composition="gru", decoupled=True, context_length=3,
               decoder_layers=2, sample_positions=20, objective="context",
               dropout=0.0, embed_grad_scale_by_freq=True)
    return base.replace(**changes)

  @classmethod
  def tiny(cls, **changes) -> "ModelConfig":
    """A few-thousand-parameter model for tests."""
    base = cls(vocab_size=50, dim=16, num_heads=4, head_dim=8,
               num_graph_layers=2, key_layers=2, query_layers=2, kernel_size=3,
               context_length=3, decoder_layers=2, sample_positions=0,
               sentence_length=4, loss_chunk_size=64)
    return base.replace(**changes)
