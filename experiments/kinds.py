"""The registry of run kinds: every list of them derives from `KINDS`.

A run kind is a module experiments/<kind>.py that calls
`entry.run_kind(<kind>)`; its config dataclass and run function come from
`KINDS[kind]()` (imported only then), and each config file of
experiments/configs/ states the kind it is for as a module constant
(`RUN_KIND = "classify"`), which `config_kinds` reads and
launch/common.sh greps. This module defines no flags, so the entry points
and the tests import it beside flags of their own.
"""
from __future__ import annotations

import dataclasses
import glob
import importlib
import importlib.util
import os
from typing import Callable

CONFIGS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
NOT_CONFIGS = ("__init__", "common")     # helpers in experiments/configs/


def _pretrain():
  from glomo_jax.pretraining import PretrainConfig, train_and_evaluate  # noqa: PLC0415
  return PretrainConfig, train_and_evaluate


def _pretrain_images():
  from glomo_jax.pretraining.pixels import (ImagePretrainConfig,  # noqa: PLC0415
                                            pretrain_images)
  return ImagePretrainConfig, pretrain_images


def _classify():
  from glomo_jax.classification import ClassificationConfig, run_classification  # noqa: PLC0415
  return ClassificationConfig, run_classification


def _squad():
  from glomo_jax.squad import SquadConfig, run_squad  # noqa: PLC0415
  return SquadConfig, run_squad


def _cifar():
  from glomo_jax.images.cifar import CifarConfig, run_cifar  # noqa: PLC0415
  return CifarConfig, run_cifar


def _picking():
  from glomo_jax.focused import PickingConfig, run_picking  # noqa: PLC0415
  return PickingConfig, run_picking


def _lstm_lm():
  from experiments.lstm_control import LstmLmConfig, train_lstm_lm  # noqa: PLC0415
  return LstmLmConfig, train_lstm_lm


@dataclasses.dataclass(frozen=True)
class Kind:
  """A run kind. Calling it gives (its config dataclass, its run
  function(config, workdir, ...)). downstream: its runs train a task model
  with a variant and a seed and write results.json (the kinds
  `experiments.classify_grid` runs)."""
  load: Callable[[], tuple[type, Callable]]
  downstream: bool = False

  def __call__(self) -> tuple[type, Callable]:
    return self.load()


KINDS = {"pretrain": Kind(_pretrain), "pretrain_images": Kind(_pretrain_images),
         "classify": Kind(_classify, downstream=True), "squad": Kind(_squad, downstream=True),
         "cifar": Kind(_cifar, downstream=True), "picking": Kind(_picking, downstream=True),
         "lstm_lm": Kind(_lstm_lm)}
DOWNSTREAM_KINDS = tuple(name for name, kind in KINDS.items() if kind.downstream)


def config_names() -> list[str]:
  """The config files of experiments/configs/ (names without .py), sorted."""
  names = (os.path.basename(p)[:-3] for p in glob.glob(os.path.join(CONFIGS_DIR, "*.py")))
  return sorted(n for n in names if n not in NOT_CONFIGS)


def config_kinds() -> dict[str, str]:
  """{config name: the RUN_KIND it states} of every config file.

  Raises:
    ValueError: a config file states no RUN_KIND, or one that is not in KINDS.
  """
  out = {}
  for name in config_names():
    kind = getattr(importlib.import_module(f"experiments.configs.{name}"), "RUN_KIND", None)
    if kind not in KINDS:
      raise ValueError(f"experiments/configs/{name}.py states RUN_KIND = {kind!r}; "
                       f"one of {sorted(KINDS)} is needed")
    out[name] = kind
  return out


def kind_of_file(path: str) -> str:
  """The RUN_KIND a config file states (any path; a ':preset' suffix is
  ignored).

  Raises:
    ValueError: it states none, or one that is not in KINDS.
  """
  path = path.split(":", 1)[0]
  spec = importlib.util.spec_from_file_location("_config_file", path)
  if spec is None or spec.loader is None:
    raise ValueError(f"{path}: not a Python config file")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  kind = getattr(module, "RUN_KIND", None)
  if kind not in KINDS:
    raise ValueError(f"{path} states RUN_KIND = {kind!r}; one of {sorted(KINDS)} is needed")
  return kind


def configs_of(kind: str) -> list[str]:
  """The config files (names) of run kind `kind`, sorted."""
  return [name for name, k in config_kinds().items() if k == kind]
