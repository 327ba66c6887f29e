"""Shared pieces of the experiment configs: a ConfigDict holding every field
of one of the library's config dataclasses (pretraining, transfer), and the
transfer configs' tiny preset.

Every field is present (so `--config.x.y=...` overrides are checked against
the real field names, and a typo fails before any work), and a field whose
default is None becomes a placeholder of its type (so it can be overridden
with a value). The entry points turn the ConfigDict back into the dataclass
with `<Config>.from_dict(config.to_dict())`.
"""
from __future__ import annotations

import dataclasses
import typing

import ml_collections
from ml_collections import config_dict as cd

from glomo_jax import ModelConfig
from glomo_jax.config import field_type
from glomo_jax.data.corpus import CorpusSpec
from glomo_jax.pretraining import PretrainConfig
from glomo_jax.tasks.transfer_config import ClassifierOptions, OptimOptions, TransferConfig


def config_dict(obj) -> ml_collections.ConfigDict:
  """Dataclass instance `obj` (nested dataclasses too) as a ConfigDict."""
  hints = typing.get_type_hints(type(obj))
  values = {}
  for field in dataclasses.fields(obj):
    value = getattr(obj, field.name)
    if dataclasses.is_dataclass(value):
      value = config_dict(value)
    elif value is None:
      value = cd.placeholder(field_type(hints[field.name]))
    elif isinstance(value, tuple):
      value = list(value)
    values[field.name] = value
  return ml_collections.ConfigDict(values)


def base_config(model: ModelConfig, corpus: dict, **fields) -> ml_collections.ConfigDict:
  """A pretraining config: every PretrainConfig field, with `model`, the
  corpus (CorpusSpec fields) and `fields` set."""
  return config_dict(PretrainConfig(model=model, corpus=CorpusSpec.from_dict(corpus),
                                    **fields))


def transfer_config(task: str, *, max_words: int, model: dict, optim: dict,
                    **fields) -> ml_collections.ConfigDict:
  """A transfer config: every TransferConfig field, with the task's model
  and optimiser values set."""
  return config_dict(TransferConfig(
      task=task, max_words=max_words, model=ClassifierOptions(**model),
      optim=OptimOptions(**optim), **fields))


def tiny_preset(config: ml_collections.ConfigDict, max_words: int) -> None:
  """Shrinks a transfer config in place to a seconds-long smoke run."""
  config.max_words = max_words
  config.max_train_examples, config.max_eval_examples = 64, 32
  config.vocab.max_size = 2000
  config.model.embed_dim, config.model.hidden = 16, 16
  config.optim.batch_size, config.optim.steps, config.optim.eval_every = 8, 6, 3
  config.optim.log_every = 3
  config.optim.patience = None
  config.compile_fast = True
