"""A run's config in its workdir (`config.json`), and the rule that a resumed
run has the same one: a task calls `check_run_config` in its `check_resume`
(before anything compiles), naming the fields a resumed run may change (how
long it trains, how often it reports or saves; any other change would mix two
configs' results), and `record_run_config` in its `on_start`."""
from __future__ import annotations

import json
import os
from typing import Any, Mapping, Sequence

from glomo_jax.errors import InputError
from glomo_jax.io import write_json

CONFIG_FILE = "config.json"


def changed_fields(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
  """Dotted names of the fields whose values differ between two config dicts.
  A field only `new` has is a field added to the code since `old` was
  written; its default keeps the old behaviour, so it is not a change."""
  out = []
  for key in sorted(set(old) | set(new)):
    if key not in old:
      continue
    a, b = old.get(key), new.get(key)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
      out += changed_fields(a, b, f"{prefix}{key}.")
    elif a != b:
      out.append(f"{prefix}{key}")
  return out


def check_run_config(workdir: str, config: Mapping[str, Any], resumable: Sequence[str] = (),
                     config_class=None) -> None:
  """Before a run resumes in `workdir` (a task's `check_resume`, called by the
  loop before anything compiles): the config recorded there must be `config`
  up to the dotted fields of `resumable`. config_class: the config's
  dataclass; the recorded dict is read through its `from_dict`, so a
  config.json of an earlier layout (fields that moved, `MOVED_FIELDS`)
  compares field by field. No config.json: nothing to compare.

  Raises:
    ValueError: the workdir holds a run of another config (naming the
      changed fields).
  """
  path = os.path.join(workdir, CONFIG_FILE)
  if not os.path.exists(path):
    return
  with open(path, encoding="utf-8") as f:
    recorded = json.load(f)
  if config_class is not None:
    try:
      recorded = json.loads(json.dumps(config_class.from_dict(recorded).to_dict()))
    except (InputError, TypeError, ValueError):
      pass                            # compared as written: its fields name the change
  changed = [k for k in changed_fields(recorded, json.loads(json.dumps(config)))
             if k not in resumable]
  if changed:
    raise ValueError(f"{workdir} holds a run of another config (changed: "
                     f"{', '.join(changed)}); rerun with its settings ({path}) or use a "
                     "new --workdir")


def record_run_config(ctx, config: Mapping[str, Any]) -> None:
  """Writes a run's config dict to <workdir>/config.json (process 0), in a
  task's on_start. ctx: the training loop's RunContext."""
  if ctx.is_main:
    write_json(os.path.join(ctx.workdir, CONFIG_FILE), json.loads(json.dumps(config)))
