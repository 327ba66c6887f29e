"""Every run kind's config from command-line flags, as `experiments.entry`
parses them: each optional group (a dataclass field that is None by
default, e.g. CIFAR's held-out `test` images) is settable field by field,
and stays None when no field of it is set."""
import dataclasses
import os
import sys
import typing
from unittest import mock

import pytest
from absl import flags
from ml_collections import config_flags

from glomo_jax.config import field_type

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from experiments import entry, kinds  # noqa: E402

# run kind -> the first of its config files (by RUN_KIND), tiny preset
CONFIG_FILES = {kind: f"{kinds.configs_of(kind)[0]}.py:tiny" for kind in kinds.KINDS
                if kinds.configs_of(kind)}
# a value of each type, for fields whose default cannot be written as a flag
SAMPLES = {str: "/data/x", int: 3, float: 0.5, bool: True}


def optional_groups(cls, prefix=()):
  """(dotted path, dataclass) of every `X | None` dataclass field of `cls`."""
  hints = typing.get_type_hints(cls)
  for field in dataclasses.fields(cls):
    inner = field_type(hints[field.name])
    if dataclasses.is_dataclass(inner):
      if inner is not hints[field.name]:
        yield prefix + (field.name,), inner
      yield from optional_groups(inner, prefix + (field.name,))


def from_flags(kind, *overrides):
  """The kind's config built from `--config=FILE` and `overrides` (which
  ml_collections reads from sys.argv)."""
  values = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "", flag_values=values, lock_config=True)
  argv = ["entry", f"--config={REPO}/experiments/configs/{CONFIG_FILES[kind]}", *overrides]
  with mock.patch.object(sys, "argv", argv):
    values(argv)
  config_class, _ = entry.KINDS[kind]()
  return config_class.from_dict(values.config.to_dict())


def at(config, path):
  for name in path:
    config = getattr(config, name)
  return config


def test_every_run_kind_has_a_config_file_here():
  assert set(CONFIG_FILES) == set(entry.KINDS)
  groups = {kind: [p for p, _ in optional_groups(entry.KINDS[kind]()[0])]
            for kind in entry.KINDS}
  assert ("test",) in groups["cifar"]   # the group of the example


@pytest.mark.parametrize("kind", sorted(CONFIG_FILES))
def test_each_optional_group_is_set_field_by_field_from_flags(kind):
  config_class, _ = entry.KINDS[kind]()
  unset = from_flags(kind)
  for path, group in optional_groups(config_class):
    assert at(unset, path) is None
    hints = typing.get_type_hints(group)
    for field in dataclasses.fields(group):
      value = field.default
      if value is None or value == "":
        value = SAMPLES[field_type(hints[field.name])]
      flag = f"--config.{'.'.join(path + (field.name,))}={value}"
      assert at(from_flags(kind, flag), path) == dataclasses.replace(
          group(), **{field.name: value}), flag
  assert from_flags(kind, "--config.seed=7").seed == 7   # the flags reach the config
