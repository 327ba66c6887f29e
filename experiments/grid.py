"""Running a config for several variants and seeds, and tabulating them
(`experiments.classify_grid`, `experiments.data_efficiency`); no flags here.

Every run is `python -m experiments.ENTRY --config=CONFIG --config.variant=V
--config.seed=S --workdir=ROOT/V_sS` plus extra arguments
(`predictor_export` is dropped for variants that read no graphs). A run
whose results.json exists is not repeated. With parallel > 1, runs are
pinned one per CPU core (taskset) with one XLA thread, unless pin is False
(runs that share an accelerator).
"""
from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import time

ACCURACIES = ("validation_accuracy", "test", "matched", "mismatched")


def metrics(result: dict) -> dict[str, float]:
  """A results.json's scores in percent: accuracies (classify) or EM / F1
  of validation and dev (SQuAD)."""
  if "validation_accuracy" in result:
    return {m.replace("_accuracy", ""): 100 * result[m] for m in ACCURACIES
            if result.get(m) is not None}
  return {f"{split} {short}": result[split][name] for split in ("validation", "dev")
          if result.get(split) for short, name in (("EM", "exact_match"), ("F1", "f1"))}


def run_command(config: str, variant: str, seed: str, workdir: str,
                extra: list[str], entry: str = "classify") -> list[str]:
  from glomo_jax.transfer.options import GRAPH_VARIANTS  # noqa: PLC0415 (flags first)
  args = [a for a in extra
          if variant in GRAPH_VARIANTS or not a.startswith("--config.predictor_export")]
  return [sys.executable, "-m", f"experiments.{entry}", f"--config={config}",
          f"--config.variant={variant}", f"--config.seed={seed}",
          f"--workdir={workdir}"] + args


def _pinned_env(core: int | None) -> dict:
  """The environment of a run; pinned runs get one XLA (Eigen) thread."""
  from glomo_jax.tuning import ONE_CORE_XLA_FLAGS, with_xla_flags  # noqa: PLC0415
  env = dict(os.environ)
  if core is not None:
    env["XLA_FLAGS"] = with_xla_flags(ONE_CORE_XLA_FLAGS, env)
  return env


def run_grid(config: str, root: str, variants, seeds, parallel: int,
             extra: list[str], entry: str = "classify", pin: bool = True) -> None:
  todo = []
  for variant in variants:
    for seed in seeds:
      workdir = os.path.join(root, f"{variant}_s{seed}")
      todo.append((run_command(config, variant, seed, workdir, extra, entry), workdir))
  run_commands(todo, parallel, pin)


def run_commands(todo: list[tuple[list[str], str]], parallel: int, pin: bool = True) -> None:
  """Runs each (command, workdir) whose workdir has no results.json yet, N at
  once (`parallel`), each pinned to a core with one XLA thread when `pin`;
  output to WORKDIR/log.txt. Raises SystemExit naming the failed runs."""
  done = [w for _, w in todo if os.path.exists(os.path.join(w, "results.json"))]
  for workdir in done:
    print(f"done already: {workdir}")
  todo = [(cmd, workdir) for cmd, workdir in todo if workdir not in done]
  cores = list(range(os.cpu_count() or 1))
  running = []          # (process, core, workdir, log file)
  failed = []
  while todo or running:
    while todo and len(running) < max(1, parallel):
      busy = {r[1] for r in running}
      core = next((c for c in cores if c not in busy), None) if parallel > 1 and pin else None
      cmd, workdir = todo.pop(0)
      if core is not None:
        cmd = ["taskset", "-c", str(core)] + cmd
      os.makedirs(workdir, exist_ok=True)
      log = open(os.path.join(workdir, "log.txt"), "w", encoding="utf-8")
      where = "" if core is None else f" (core {core})"
      print(f"[{time.strftime('%H:%M:%S')}] start{where}: "
            + " ".join(shlex.quote(c) for c in cmd), flush=True)
      proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                              env=_pinned_env(core))
      running.append((proc, core, workdir, log))
    time.sleep(0.1)     # a finished run is noticed (and the next started) at once
    for item in list(running):
      proc, _, workdir, log = item
      if proc.poll() is None:
        continue
      log.close()
      running.remove(item)
      ok = proc.returncode == 0
      print(f"[{time.strftime('%H:%M:%S')}] {'done' if ok else 'FAILED'}: {workdir}",
            flush=True)
      if not ok:
        failed.append(workdir)
  if failed:
    raise SystemExit(f"{len(failed)} run(s) failed; see log.txt in {failed}")


def write_table(root: str, text: str) -> None:
  """Writes ROOT/table.md and prints it."""
  os.makedirs(root, exist_ok=True)
  with open(os.path.join(root, "table.md"), "w", encoding="utf-8") as f:
    f.write(text)
  print(text)


def finished_results(root: str, variant: str) -> list[dict]:
  """The results.json of every finished run ROOT/VARIANT_sSEED, by name."""
  found = []
  for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
    path = os.path.join(root, name, "results.json")
    if name.startswith(f"{variant}_s") and os.path.exists(path):
      with open(path, encoding="utf-8") as f:
        found.append(json.load(f))
  return found


def mean_std(values: list[float]) -> str:
  """'mean ± sample std' of values (one value alone; '–' for none)."""
  if not values:
    return "–"
  if len(values) == 1:
    return f"{values[0]:.2f}"
  return f"{statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f}"


def table(config: str, root: str, variants, extra: list[str], entry: str = "classify") -> str:
  results, columns = {}, []
  for variant in variants:
    found = results[variant] = finished_results(root, variant)
    for r in found:
      columns += [m for m in metrics(r) if m not in columns]
  head = ["variant", "seeds"] + columns + [
      "train time / run (min)", "command (add --config.seed=S --workdir=DIR)"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for variant, found in results.items():
    if not found:
      continue
    cells = [variant, ",".join(str(r["seed"]) for r in found)]
    for c in columns:
      cells.append(mean_std([metrics(r)[c] for r in found if c in metrics(r)]))
    cells.append(f"{statistics.fmean(r['train_time_s'] for r in found) / 60:.1f}")
    cmd = [a for a in run_command(config, variant, "S", "DIR", extra, entry)[1:]
           if a not in ("--config.seed=S", "--workdir=DIR")]
    cells.append("`python " + " ".join(shlex.quote(c) for c in cmd) + "`")
    lines.append("| " + " | ".join(cells) + " |")
  what = "exact match and F1" if entry == "squad" else "accuracy"
  return "\n".join(lines) + f"\n\nIn %: {what}, mean ± sample std over seeds.\n"


# ---- the verb-number grid's table (experiments/verb_number_grid.py) ------------
SCORES = (("validation", ("validation_accuracy",)), ("test", ("test",)),
          ("gold", ("gold",)), ("gold 0 attr", ("groups", "gold", "attractors_0")),
          ("gold ≥1 attr", ("groups", "gold", "attractors_1+")),
          ("gold d 1", ("groups", "gold", "distance_1")),
          ("gold d 2–3", ("groups", "gold", "distance_2-3")),
          ("gold d ≥4", ("groups", "gold", "distance_4+")))


def score(result: dict, path: tuple[str, ...]) -> float | None:
  """A result's accuracy in % at `path` (None where the run has none)."""
  value = result
  for key in path:
    value = value.get(key) if isinstance(value, dict) else None
  if isinstance(value, dict):
    value = value["accuracy"]
  return None if value is None else 100 * value


def paired(rows: dict, row: str, other: str, path) -> str:
  """'mean ± standard error' of row − other over the seeds both have."""
  a = {r["seed"]: score(r, path) for r in rows.get(row, [])}
  b = {r["seed"]: score(r, path) for r in rows.get(other, [])}
  diffs = [a[s] - b[s] for s in a if s in b and a[s] is not None and b[s] is not None]
  if len(diffs) < 2:
    return "–"
  return (f"{statistics.fmean(diffs):+.2f} ± "
          f"{statistics.stdev(diffs) / len(diffs) ** 0.5:.2f}")


def paired_table(root: str, names) -> str:
  """ROOT/table.md of the verb-number grid: per row, each score of `SCORES`
  (mean ± std over seeds), then each row paired with the baseline and the
  uniform graph (`paired`)."""
  rows = {n: finished_results(root, n) for n in names}
  shown = [(label, path) for label, path in SCORES
           if any(score(r, path) is not None for found in rows.values() for r in found)]
  lines = ["| row | seeds | " + " | ".join(label for label, _ in shown) + " |",
           "|" + "---|" * (len(shown) + 2)]
  for name, found in rows.items():
    if not found:
      continue
    cells = []
    for _, path in shown:
      values = [v for r in found if (v := score(r, path)) is not None]
      cells.append("–" if not values else f"{statistics.fmean(values):.1f}"
                   + (f" ± {statistics.stdev(values):.1f}" if len(values) > 1 else ""))
    lines.append(f"| {name} | {len(found)} | " + " | ".join(cells) + " |")
  for other in ("baseline", "uniform"):
    for name in rows:
      if name not in ("baseline", other) and rows[name] and rows.get(other):
        lines.append(f"| {name} − {other} (paired) | | "
                     + " | ".join(paired(rows, name, other, p) for _, p in shown) + " |")
  n = {r["seed"] for found in rows.values() for r in found}
  example = next((r for found in rows.values() for r in found), {})
  counts = example.get("groups", {}).get("gold", {})
  return ("\n".join(lines) + f"\n\nAccuracy in %, mean ± std over seeds ({len(n)}); paired: "
          "mean ± standard error of the per-seed difference. Gold items per group: "
          + ", ".join(f"{k} {v['examples']}" for k, v in counts.items()) + "\n")
