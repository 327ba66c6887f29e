"""Shared pieces of the experiment configs."""
import ml_collections
from ml_collections import config_dict

from glomo_jax import ModelConfig
from glomo_jax.train import TrainConfig

# Optional string fields: None by default, overridable with a string.
_OPTIONAL_STR = {"tokenizer_path": str}
_OPTIONAL_CORPUS = {"data_dir": str, "max_documents": int}


def base_config(model: ModelConfig, corpus: dict, **overrides) -> ml_collections.ConfigDict:
  """A ConfigDict with every TrainConfig field (so --config.x=... overrides
  are checked against the real field names) and the given corpus."""
  values = TrainConfig(model=model).to_dict()
  values.update(overrides)
  for key, kind in _OPTIONAL_STR.items():
    if values.get(key) is None:
      values[key] = config_dict.placeholder(kind)
  corpus = dict(corpus)
  for key, kind in _OPTIONAL_CORPUS.items():
    if corpus.get(key) is None:
      corpus[key] = config_dict.placeholder(kind)
  values["corpus"] = corpus
  return ml_collections.ConfigDict(values)
