"""Rows of `experiments.predictor_table` (no flags here, so benchmarks can
import them): parsing '--row' values, the named sets, and one row's config.
"""
from __future__ import annotations

import ast
import json

from experiments.predictor_rows import ROW_SETS


def parse_value(text: str):
  """A row value: a Python literal (number, bool, None, quoted string) or
  else the text itself."""
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def parse_row(text: str) -> tuple[str, dict]:
  """'NAME: a=1 b.c=x' -> ('NAME', {'a': 1, 'b.c': 'x'})."""
  name, sep, rest = text.partition(":")
  if not sep or not name.strip():
    raise ValueError(f"--row={text!r}: write 'NAME: field=value field=value'")
  changes = {}
  for item in rest.split():
    key, eq, value = item.partition("=")
    if not eq or not key:
      raise ValueError(f"--row={text!r}: {item!r} is not field=value")
    changes[key] = parse_value(value)
  return name.strip(), changes


def table_rows(sets: list[str], only: list[str] | None, extra: list[str]) -> dict[str, dict]:
  """{name: changes} in order: the named sets' rows (those in `only`), then
  the --row ones."""
  rows = {}
  for name in sets:
    if name not in ROW_SETS:
      raise ValueError(f"unknown row set {name!r}: one of {sorted(ROW_SETS)}")
    rows.update(ROW_SETS[name])
  if only is not None:
    missing = sorted(set(only) - set(rows))
    if missing:
      raise ValueError(f"--only names rows {missing} that the sets {sets} do not have")
    rows = {k: v for k, v in rows.items() if k in only}
  for text in extra:
    name, changes = parse_row(text)
    rows[name] = changes
  if not rows:
    raise ValueError("no rows: give --rows and/or --row")
  return rows


def row_config(base: dict, changes: dict, steps: int | None, root: str, seed: int):
  """The PretrainConfig of one row and seed."""
  from glomo_jax.pretraining import PretrainConfig  # noqa: PLC0415
  values = json.loads(json.dumps(base))
  if steps is not None:
    values["loop"]["num_steps"] = steps
  values["seed"] = seed
  for key, value in changes.items():
    if key == "steps_fraction":
      values["loop"]["num_steps"] = max(1, round(values["loop"]["num_steps"] * float(value)))
      continue
    if isinstance(value, str):
      value = value.format(root=root, seed=seed)
    *parents, leaf = key.split(".")
    node = values
    for part in parents:
      if not isinstance(node.get(part), dict):
        raise ValueError(f"row field {key!r}: {part!r} is not a section of the config")
      node = node[part]
    if leaf not in node:
      raise ValueError(f"row field {key!r} is not a config field; known here: {sorted(node)}")
    node[leaf] = value
  if values.get("graph_source", "predicted") != "predicted":
    values["export"] = False      # no predictor was trained
  return PretrainConfig.from_dict(values)
