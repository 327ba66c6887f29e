"""Shared pieces of the experiment configs: a ConfigDict holding every field
of one of the library's config dataclasses (pretraining, downstream), and
the text classification configs' tiny preset.

Every field is present, so `--config.x.y=...` overrides are checked against
the real field names, and a typo fails before any work. A field whose
default is None becomes a placeholder of its type, so it can be set to a
value; an optional group (a dataclass field whose default is None, e.g.
CIFAR's `test` images) becomes a group of its own fields, each a
placeholder, so it can be set field by field
(`--config.test.source=npz --config.test.location=PATH`): the library's
`from_dict` builds the group from the fields that are set (the others take
their defaults), or leaves it None when none is. The entry points turn the
ConfigDict back into the dataclass with `<Config>.from_dict(config.to_dict())`.
"""
from __future__ import annotations

import dataclasses
import typing

import ml_collections
from ml_collections import config_dict as cd

from glomo_jax import ModelConfig
from glomo_jax.config import field_type
from glomo_jax.data.corpus import CorpusSpec
from glomo_jax.downstream.options import OptimOptions
from glomo_jax.pretraining import PretrainConfig
from glomo_jax.classification.config import ClassifierOptions, ClassificationConfig
from glomo_jax.train.config import DOWNSTREAM_LOOP, LoopOptions


def config_dict(obj) -> ml_collections.ConfigDict:
  """Dataclass instance `obj` (nested dataclasses too) as a ConfigDict."""
  hints = typing.get_type_hints(type(obj))
  values = {}
  for field in dataclasses.fields(obj):
    value, kind = getattr(obj, field.name), field_type(hints[field.name])
    if dataclasses.is_dataclass(value):
      value = config_dict(value)
    elif value is None and dataclasses.is_dataclass(kind):
      value = unset_group(kind)
    elif value is None:
      value = cd.placeholder(kind)
    values[field.name] = value
  return ml_collections.ConfigDict(values)


def unset_group(cls) -> ml_collections.ConfigDict:
  """An optional group of dataclass `cls` that is not set: each field a
  placeholder of its type (nested groups alike)."""
  hints = typing.get_type_hints(cls)
  values = {}
  for field in dataclasses.fields(cls):
    kind = field_type(hints[field.name])
    values[field.name] = (unset_group(kind) if dataclasses.is_dataclass(kind)
                          else cd.placeholder(kind))
  return ml_collections.ConfigDict(values)


def base_config(model: ModelConfig, corpus: dict, loop: dict, **fields
                ) -> ml_collections.ConfigDict:
  """A pretraining config: every PretrainConfig field, with `model`, the
  corpus (CorpusSpec fields), the loop (LoopOptions fields) and `fields` set."""
  return config_dict(PretrainConfig(model=model, corpus=CorpusSpec.from_dict(corpus),
                                    loop=LoopOptions(**loop), **fields))


def classification_config(task: str, *, max_words: int, model: dict, optim: dict,
                          loop: dict, **fields) -> ml_collections.ConfigDict:
  """A text classification config: every ClassificationConfig field, with the
  task's model, optimiser and loop values set (the loop's others: the
  downstream defaults, `DOWNSTREAM_LOOP`)."""
  return config_dict(ClassificationConfig(
      task=task, max_words=max_words, model=ClassifierOptions(**model),
      optim=OptimOptions(**optim), loop=dataclasses.replace(DOWNSTREAM_LOOP, **loop),
      **fields))


def tiny_preset(config: ml_collections.ConfigDict, max_words: int) -> None:
  """Shrinks a text classification config in place to a seconds-long smoke run."""
  config.max_words = max_words
  config.max_train_examples, config.max_eval_examples = 64, 32
  config.vocab.max_size = 2000
  config.model.embed_dim, config.model.hidden = 16, 16
  config.optim.batch_size = 8
  config.loop.num_steps, config.loop.eval_every, config.loop.log_every = 6, 3, 3
  config.loop.patience = None
  config.loop.compile_fast = True
