"""The parameter subset of an export: exactly what `GLoMo.graphs` reads
(units 'tokens') or `PixelGLoMo.graphs` (units 'pixels').

An export holds the embedding, the two graph predictors (and, for a coupled
config, the two feature predictors) with their BatchNorm statistics; the
decoders are never exported. This module says which leaves those are for a
ModelConfig and units, and checks a variables tree against that list.

Trees are handled flat, as {'collection/path/to/leaf': leaf}, e.g.
{'params/graph_fw/key_kernel': [L, d, K, H], 'batch_stats/graph_fw/...': ...}.
"""
from __future__ import annotations

import functools
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from glomo_jax.config import ModelConfig
from glomo_jax.models.glomo import GLoMo
from glomo_jax.models.pixel_glomo import PixelGLoMo

COLLECTIONS = ("params", "batch_stats")
UNITS = ("tokens", "pixels")


def check_units(units: str) -> str:
  if units not in UNITS:
    raise ValueError(f"units {units!r} is not one of {list(UNITS)}")
  return units


@functools.lru_cache(maxsize=32)
def expected_leaves(config: ModelConfig, units: str = "tokens"
                     ) -> dict[str, jax.ShapeDtypeStruct]:
  """{'collection/path/to/leaf': ShapeDtypeStruct} of what the model's
  `graphs` method reads.

  Initialising through `graphs` creates exactly the parameters and
  BatchNorm statistics that method uses (abstractly: nothing is allocated).
  """
  def init():
    key = jax.random.PRNGKey(0)
    if check_units(units) == "pixels":   # no parameter depends on the image size
      return PixelGLoMo(config, (2, 2)).init(key, jnp.zeros((1, 2, 2, 3), jnp.uint8),
                                             method=PixelGLoMo.graphs)
    return GLoMo(config).init(key, jnp.zeros((1, 1), jnp.int32), method=GLoMo.graphs)
  return flatten_tree(jax.eval_shape(init))


def flatten_tree(tree: Mapping, prefix: str = "") -> dict[str, Any]:
  """Nested mappings -> {'a/b/c': leaf}; empty mappings vanish."""
  out = {}
  for key, value in tree.items():
    path = f"{prefix}{key}"
    if isinstance(value, Mapping):
      out.update(flatten_tree(value, path + "/"))
    else:
      out[path] = value
  return out


def unflatten_tree(flat: Mapping[str, Any]) -> dict:
  """{'a/b/c': leaf} -> nested dicts, always with both collections."""
  tree: dict = {name: {} for name in COLLECTIONS}
  for path, value in flat.items():
    node = tree
    *parents, last = path.split("/")
    for key in parents:
      node = node.setdefault(key, {})
    node[last] = value
  return tree


def check_tree(config: ModelConfig, flat: Mapping[str, Any], where: str,
                allow_extra: bool, units: str = "tokens") -> None:
  """Raises ValueError naming every missing, unexpected or misshaped leaf."""
  expected = expected_leaves(config, units)
  missing = sorted(set(expected) - set(flat))
  extra = [] if allow_extra else sorted(set(flat) - set(expected))
  shapes = [f"{path}: {where} has shape {tuple(np.shape(flat[path]))} but the "
            f"config expects {tuple(spec.shape)}"
            for path, spec in sorted(expected.items())
            if path in flat and tuple(np.shape(flat[path])) != tuple(spec.shape)]
  problems = []
  if missing:
    problems.append(f"missing from {where}: {_listing(missing)}")
  if extra:
    problems.append(f"not expected by the config, in {where}: {_listing(extra)}")
  if shapes:
    problems.append("shape mismatch: " + "; ".join(shapes[:8])
                    + (f" (+{len(shapes) - 8} more)" if len(shapes) > 8 else ""))
  if problems:
    raise ValueError(f"the parameter tree of {where} does not match the "
                     f"ModelConfig: " + " | ".join(problems))


def _listing(paths: Sequence[str], limit: int = 8) -> str:
  shown = ", ".join(paths[:limit])
  return shown + (f" (+{len(paths) - limit} more)" if len(paths) > limit else "")


def graph_predictor_variables(config: ModelConfig, variables: Mapping,
                              units: str = "tokens") -> dict:
  """The variables `GLoMo.graphs` (or `PixelGLoMo.graphs`) needs, taken from
  the whole model's variables.

  Args:
    config: the model's ModelConfig.
    variables: {'params': {...}, 'batch_stats': {...}} of the whole model (or
      already the subset); dicts or FrozenDicts, any array type.
    units: 'tokens' (GLoMo) or 'pixels' (PixelGLoMo).

  Returns:
    {'params': {embedding, graph_fw, graph_bw (+ features_fw, features_bw if
    config is coupled)}, 'batch_stats': {graph_fw, graph_bw} or {}}: plain
    nested dicts holding the same leaf objects (nothing is copied). Decoders,
    and the feature predictors of a decoupled config, are left out.

  Raises:
    ValueError: a needed leaf is missing or has a shape the config does not
      give (the message names the path and both shapes).
  """
  if not isinstance(variables, Mapping):
    raise TypeError("variables must be a mapping {'params': ..., 'batch_stats': ...}, "
                    f"got {type(variables).__name__}")
  flat = flatten_tree({k: variables[k] for k in COLLECTIONS if k in variables})
  check_tree(config, flat, "the variables", allow_extra=True, units=units)
  return unflatten_tree({path: flat[path] for path in expected_leaves(config, units)})
