"""A run's config in its workdir (`config.json`), and the rule that a resumed
run has the same one: a task calls `record_run_config` in its `on_start`,
naming the fields a resumed run may change (how long it trains, how often it
reports or saves); any other change would mix two configs' results."""
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


def record_run_config(ctx, config: Mapping[str, Any], resumable: Sequence[str] = (),
                      config_class=None) -> None:
  """Writes a run's config dict to <workdir>/config.json; a resumed run
  (ctx.state.step > 0) must have the same one up to the dotted fields of
  `resumable`. ctx: the training loop's RunContext (in a task's on_start).
  config_class: the config's dataclass; the recorded dict is read through its
  `from_dict`, so a config.json of an earlier layout (fields that moved,
  `MOVED_FIELDS`) compares field by field.

  Raises:
    ValueError: the workdir holds a run of another config (naming the
      changed fields).
  """
  path = os.path.join(ctx.workdir, CONFIG_FILE)
  now = json.loads(json.dumps(config))
  if int(ctx.state.step) > 0 and os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      recorded = json.load(f)
    if config_class is not None:
      try:
        recorded = json.loads(json.dumps(config_class.from_dict(recorded).to_dict()))
      except (InputError, TypeError, ValueError):
        pass                          # compared as written: its fields name the change
    changed = [k for k in changed_fields(recorded, now) if k not in resumable]
    if changed:
      raise ValueError(f"{ctx.workdir} holds a run of another config (changed: "
                       f"{', '.join(changed)}); rerun with its settings ({path}) or use a "
                       "new --workdir")
  if ctx.is_main:
    write_json(path, now)
