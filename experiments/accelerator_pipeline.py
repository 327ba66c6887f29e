r"""The paper-sized pipeline on one accelerator host, in resumable stages.

  python -m experiments.accelerator_pipeline --data=../shared/data \
      --workdir=runs/accelerator --out=OUT [--budget_minutes=9] [--pretrain_minutes=4]

Stages, in order (each is skipped once done; `--stages` picks some):

  tokenizer  a 32k-piece SentencePiece model of the named Wikipedia parts, on
             every CPU core (WORKDIR/tokenizer.model; train it on any machine
             and copy it there to spare the accelerator's time)
  pretrain   experiments.pretrain, config wiki_accelerator.py (the paper's
             model with a learned distance prior, bfloat16), until
             `--pretrain_minutes` of pretraining wall time are spent over all
             invocations or the config's steps are done
  export     the newest checkpoint's graph predictor (WORKDIR/pretrain/export)
  analysis   graph statistics of 256 MNLI premises, the alignment with the UD
             English EWT dev trees, a drawing of one sentence's graphs; on
             UD EWT train's verbs, the subject-arc table
             (experiments.verb_number_arcs) and the whole model as a
             language model on verb number (experiments.verb_number_lm)
  imdb, mnli baseline / uniform / GLoMo (embeddings) × seeds at the CPU-scale
             task settings of experiments/results/text_tasks.md (the same
             runs, another predictor, all at once: `--parallel`): one run
             builds the graph cache, then the grid

The defaults aim at 15 minutes of accelerator time in all: pretraining
gets 4 of them, the other stages the rest. The short stages
(graph caches, analysis, transfer runs) compile many programs and run each
briefly, so on a GPU they compile without Triton GEMM fusions
(`tuning.SHORT_GPU_RUN_XLA_FLAGS`), and their batches come in few shapes:
predictor batches at the accelerator multiples of `glomo_jax.graphs.shapes`,
task batches padded to max_words (benchmarks/RESULTS.md compares runs with
and without these).

An invocation stops at `--budget_minutes`: the running stage gets SIGTERM
(pretraining and every transfer run save a checkpoint on it) and the next
invocation of the same command resumes it. Every invocation ends by writing
the report (`experiments.pipeline_report`): OUT/report.md (pretraining
progress, held-out loss, the analysis and the two tables) and
OUT/graphs.png; nothing else leaves the host (no checkpoints).
`--preset=tiny` runs every stage in a few minutes on a CPU.

DATA is a folder laid out as ../shared/data: wiki_text/ (the parts named by
`--wiki_parts`), imdb/, mnli/, glove/ and ud_english_ewt/.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

from absl import flags

from experiments import cli, pipeline_report

STAGES = ("tokenizer", "pretrain", "export", "analysis", "imdb", "mnli")
GRAPH_SENTENCE = "The old man who lived by the sea told the children a story they never forgot."

_DATA = flags.DEFINE_string("data", None, "Folder laid out as ../shared/data.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Where every stage works (checkpoints too).")
_OUT = flags.DEFINE_string("out", None, "Where the report goes (default WORKDIR/report).")
_PRESET = flags.DEFINE_enum("preset", "", ["", "tiny"], "'tiny': a CPU smoke run of it all.")
_STAGES = flags.DEFINE_list("stages", list(STAGES), f"Stages to run, of {list(STAGES)}.")
_WIKI_PARTS = flags.DEFINE_string("wiki_parts", "1-8",
                                  "wiki_text parts to read, as a glob character class.")
_BUDGET = flags.DEFINE_float("budget_minutes", 9.0,
                             "This invocation's time: running work gets SIGTERM then.")
_PRETRAIN_MINUTES = flags.DEFINE_float("pretrain_minutes", 4.0,
                                       "Pretraining wall time over all invocations.")
_PRETRAIN_FLAGS = flags.DEFINE_string(
    "pretrain_flags", "", "More flags of the pretraining run, e.g. the authors' graphs: "
    "'--config.model.distance_prior=0 --config.model.distance_prior_init=0' (with them "
    "'--config.model.kernels=fused' can run; benchmarks/gpu_run.sh stage pipeline).")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds of every transfer variant.")
_VARIANTS = flags.DEFINE_list("variants", ["baseline", "uniform", "embeddings"],
                              "Transfer variants.")
_PARALLEL = flags.DEFINE_integer("parallel", 9, "Transfer runs at once (one accelerator).")
_GRACE = 60.0    # seconds between SIGTERM and SIGKILL
flags.mark_flags_as_required(["data", "workdir"])


class Pipeline:
  """The stages of one invocation, with its deadline and the state file
  WORKDIR/pipeline.json ({'done': [stages], 'pretrain_seconds': float,
  'pretrain_chunks': [the pretraining summaries]})."""

  def __init__(self, data: str, workdir: str, preset: str, deadline: float):
    self.data, self.workdir, self.preset = data, os.path.abspath(workdir), preset
    self.deadline = deadline
    os.makedirs(self.workdir, exist_ok=True)
    self.state_path = os.path.join(self.workdir, "pipeline.json")
    self.state = {"done": [], "pretrain_seconds": 0.0, "pretrain_chunks": []}
    if os.path.exists(self.state_path):
      with open(self.state_path, encoding="utf-8") as f:
        self.state.update(json.load(f))
    self.pretrain_dir = os.path.join(self.workdir, "pretrain")
    self.export_dir = os.path.join(self.pretrain_dir, "export")
    self.logs = os.path.join(self.workdir, "logs")
    os.makedirs(self.logs, exist_ok=True)

  # ---- bookkeeping -------------------------------------------------------------

  def save(self) -> None:
    from glomo_jax.io import write_json  # noqa: PLC0415
    write_json(self.state_path, self.state)

  def done(self, stage: str) -> bool:
    return stage in self.state["done"]

  def mark_done(self, stage: str) -> None:
    self.state["done"].append(stage)
    self.save()

  def left(self) -> float:
    return self.deadline - time.time()

  def path(self, *parts: str) -> str:
    return os.path.join(self.data, *parts)

  @staticmethod
  def short_run_env(**env: str) -> dict:
    """The environment of a short stage (module docstring): `env` and
    XLA_FLAGS with `tuning.SHORT_GPU_RUN_XLA_FLAGS` added."""
    from glomo_jax.tuning import SHORT_GPU_RUN_XLA_FLAGS, with_xla_flags  # noqa: PLC0415
    return dict(env, XLA_FLAGS=with_xla_flags(SHORT_GPU_RUN_XLA_FLAGS))

  def config(self, config: str) -> str:
    return f"experiments/configs/{config}.py" + (f":{self.preset}" if self.preset else "")

  def run(self, name: str, cmd: list[str], until: float | None = None,
          env: dict | None = None, stdout: str | None = None) -> tuple[int | None, str]:
    """Runs `cmd` (its own process group, output to logs/NAME.txt) until it
    ends or `until` (default the deadline): then SIGTERM, SIGKILL after a
    grace period. stdout: a file for the standard output alone. Returns
    (exit status or None if cut, the log of this run)."""
    until = self.deadline if until is None else min(until, self.deadline)
    log = os.path.join(self.logs, f"{name}.txt")
    print(f"[{time.strftime('%H:%M:%S')}] {name}: " + " ".join(shlex.quote(c) for c in cmd),
          flush=True)
    with open(log, "a", encoding="utf-8") as out:
      extra = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
      out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}"
                + (f"  [env {extra}]" if extra else "") + "\n")
      out.flush()
      sink = open(stdout, "w", encoding="utf-8") if stdout else out
      proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT if sink is out else out,
                              start_new_session=True,
                              env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})))
      cut = False
      while True:       # waits for the end (noticed at once), else for `until`
        try:
          proc.wait(timeout=max(0.0, until - time.time()))
          break
        except subprocess.TimeoutExpired:
          if not cut:
            os.killpg(proc.pid, signal.SIGTERM)
            cut, until = True, time.time() + _GRACE
          else:
            os.killpg(proc.pid, signal.SIGKILL)
            until = time.time() + 1
      if sink is not out:
        sink.close()
    with open(log, encoding="utf-8") as f:
      text = f.read()
    text = text[text.rindex("\n=== "):]
    if proc.returncode and not cut:
      tail = "\n".join(text.splitlines()[-5:])
      raise ChildProcessError(f"{name} failed (exit {proc.returncode}; {log}):\n{tail}")
    return (None if cut else proc.returncode), text

  # ---- stages ------------------------------------------------------------------

  def corpus_pattern(self, parts: str) -> str:
    return self.path("wiki_text", f"enwiki2015_wikiextractor_part[{parts}].jsonl.xz")

  def tokenizer(self, parts: str) -> bool:
    target = os.path.join(self.workdir, "tokenizer.model")
    if not os.path.exists(target):
      code = ("import sys; from experiments.accelerator_pipeline import train_tokenizer; "
              "train_tokenizer(*sys.argv[1:])")
      status, _ = self.run("tokenizer", [sys.executable, "-c", code, self.config(
          "wiki_accelerator"), self.corpus_pattern(parts), target])
      if status is None:
        return False
    return True

  def pretrain(self, parts: str, minutes: float) -> bool:
    if os.path.exists(os.path.join(self.export_dir, "glomo_export.json")):
      return True
    remaining = minutes * 60 - self.state["pretrain_seconds"]
    if remaining <= 0:
      return True
    began = time.time()
    status, text = self.run("pretrain", [
        sys.executable, "-m", "experiments.pretrain", f"--config={self.config('wiki_accelerator')}",
        f"--config.corpus.pattern={self.corpus_pattern(parts)}",
        f"--config.tokenizer_path={os.path.join(self.workdir, 'tokenizer.model')}",
        f"--workdir={self.pretrain_dir}"] + shlex.split(_PRETRAIN_FLAGS.value),
        until=began + remaining)
    self.state["pretrain_seconds"] += time.time() - began
    summary = last_json(text)
    if summary is not None:
      summary["wall_s"] = round(time.time() - began, 1)
      summary["progress"] = [line for line in text.splitlines() if "steps/s" in line][-3:]
      self.state["pretrain_chunks"].append(summary)
    self.save()
    finished = status == 0 and summary is not None and not summary.get("preempted")
    return finished or self.state["pretrain_seconds"] >= minutes * 60

  def export(self) -> bool:
    if not os.path.exists(os.path.join(self.export_dir, "glomo_export.json")):
      status, _ = self.run("export", [sys.executable, "-m", "experiments.export",
                                      f"--workdir={self.pretrain_dir}"])
      return status == 0
    return True

  def analysis(self) -> bool:
    out = os.path.join(self.workdir, "analysis")
    os.makedirs(out, exist_ok=True)
    tiny = self.preset == "tiny"
    ud_train, ud_dev = (self.path("ud_english_ewt", f"en_ewt-ud-{split}.conllu.gz")
                        for split in ("train", "dev"))
    few = ["--max_sentences=60"] if tiny else []
    jobs = [
        ("graph_stats", ["-m", "experiments.graph_stats", f"--export={self.export_dir}",
                         f"--data={self.path('mnli', 'mnli_train_subset_9k.jsonl.xz')}",
                         "--field=premise"] + (["--num=16"] if tiny else [])),
        ("syntax_alignment", ["-m", "experiments.syntax_alignment",
                              f"--export={self.export_dir}",
                              f"--conllu={self.path('ud_english_ewt', 'en_ewt-ud-dev.conllu.gz')}",
                              f"--output={os.path.join(out, 'syntax_alignment.json')}"]
         + (["--max_sentences=20"] if tiny else [])),
        ("plot_graphs", ["-m", "experiments.plot_graphs", f"--export={self.export_dir}",
                         f"--text={GRAPH_SENTENCE}", f"--out={os.path.join(out, 'graphs.png')}"]),
        ("subject_arcs", ["-m", "experiments.verb_number_arcs", f"--export={self.export_dir}",
                          f"--conllu={ud_train}", f"--select_conllu={ud_dev}",
                          f"--output_json={os.path.join(out, 'subject_arcs.json')}"] + few),
        ("lm_agreement", ["-m", "experiments.verb_number_lm", f"--workdir={self.pretrain_dir}",
                          f"--conllu={ud_train}",
                          f"--output_json={os.path.join(out, 'lm_agreement.json')}"] + few),
    ]
    for name, args in jobs:
      target = os.path.join(out, f"{name}.md")
      if os.path.exists(target):
        continue
      status, _ = self.run(name, [sys.executable] + args, stdout=target + ".tmp",
                           env=self.short_run_env())
      if status is None:
        return False
      os.replace(target + ".tmp", target)
    return True

  def classify(self, task: str, seeds, variants, parallel: int) -> bool:
    args = task_arguments(task, self.data, self.export_dir,
                          os.path.join(self.workdir, f"{task}_graph_cache"),
                          tiny=self.preset == "tiny")
    config = self.config(task)
    env = self.short_run_env(
        XLA_PYTHON_CLIENT_PREALLOCATE="false",
        JAX_COMPILATION_CACHE_DIR=os.path.join(self.workdir, f"{task}_compile_cache"))
    root = os.path.join(self.workdir, "grid", task)
    build = os.path.join(self.workdir, "grid", f"{task}_cache_build")
    if "embeddings" in variants and not os.path.exists(os.path.join(build, "results.json")):
      status, _ = self.run(f"{task}_cache", [
          sys.executable, "-m", "experiments.classify", f"--config={config}",
          "--config.variant=embeddings", f"--workdir={build}", "--config.loop.num_steps=1"] + args,
          env=env)
      if status is None:
        return False
    status, _ = self.run(f"{task}_grid", [
        sys.executable, "-m", "experiments.classify_grid", f"--config={config}",
        f"--root={root}", f"--variants={','.join(variants)}", f"--seeds={','.join(seeds)}",
        f"--parallel={parallel}", "--pin=false", "--"] + args, env=env)
    return status == 0


# The CPU-scale task settings of experiments/results/text_tasks.md
# (run_experiments.sh), but every batch padded to max_words (one step shape to
# compile). The CPU grids pad to multiples of 32: the model is the same, the
# dropout draws and the summation order differ.
GRID_TRAINING = {
    "imdb": ["--config.max_words=128", "--config.length_multiple=128",
             "--config.max_train_examples=8000", "--config.loop.epochs=2",
             "--config.loop.eval_every=125", "--config.loop.patience=100"],
    "mnli": ["--config.length_multiple=64", "--config.model.hidden=100",
             "--config.loop.epochs=2", "--config.loop.eval_every=127",
             "--config.loop.patience=100"]}


def task_arguments(task: str, data: str, export: str, cache: str, tiny: bool = False
                   ) -> list[str]:
  """The arguments of a task's runs: data, predictor, cache and (unless
  tiny: the config's own tiny preset) word vectors and the CPU-scale settings."""
  train = {"imdb": os.path.join(data, "imdb", "imdb_train.jsonl.gz"),
           "mnli": os.path.join(data, "mnli", "mnli_train_subset_9k.jsonl.xz")}[task]
  args = [f"--config.files.train={train}", f"--config.predictor_export={export}",
          f"--config.graph_cache_dir={cache}"]
  if tiny:
    return args
  glove = os.path.join(data, "glove", "glove.6B.100d.top2604.txt.gz")
  return args + [f"--config.glove_path={glove}"] + GRID_TRAINING[task]


def train_tokenizer(config_spec: str, pattern: str, target: str) -> None:
  """Trains the config's SentencePiece model on `pattern` with every core."""
  import importlib  # noqa: PLC0415
  from glomo_jax.data.corpus import CorpusSpec, iter_documents  # noqa: PLC0415
  from glomo_jax.data.tokenizer import train_tokenizer as train  # noqa: PLC0415
  path, _, preset = config_spec.partition(":")
  module = importlib.import_module(path[:-3].replace("/", "."))
  config = module.get_config(preset)
  spec = CorpusSpec.from_dict(dict(config.corpus.to_dict(), pattern=pattern))
  tokenizer = train(iter_documents(spec), config.vocab_size, target + ".tmp/",
                    sample_chars=config.tokenizer_sample_chars,
                    model_type=config.tokenizer_model_type, num_threads=os.cpu_count() or 1)
  tokenizer.save(target)
  shutil.rmtree(target + ".tmp/", ignore_errors=True)


def last_json(text: str) -> dict | None:
  """The last top-level JSON object printed in `text` (a run's summary)."""
  found = None
  for match in re.finditer(r"^\{\n.*?^\}$", text, flags=re.S | re.M):
    try:
      found = json.loads(match.group(0))
    except json.JSONDecodeError:
      continue
  return found


def main(argv):
  if len(argv) > 1:
    raise ValueError(f"unexpected arguments {argv[1:]}")
  unknown = [s for s in _STAGES.value if s not in STAGES]
  if unknown:
    raise ValueError(f"unknown stages {unknown}: of {list(STAGES)}")
  if not re.fullmatch(r"[0-9-]+", _WIKI_PARTS.value):
    raise ValueError(f"--wiki_parts={_WIKI_PARTS.value!r}: digits and ranges, e.g. 1-8")
  if not os.path.isdir(os.path.join(_DATA.value, "wiki_text")):
    raise ValueError(f"--data={_DATA.value}: no wiki_text/ in it (a folder laid out as "
                     "../shared/data)")
  pipeline = Pipeline(_DATA.value, _WORKDIR.value, _PRESET.value,
                      time.time() + 60 * _BUDGET.value)
  steps = {"tokenizer": lambda: pipeline.tokenizer(_WIKI_PARTS.value),
           "pretrain": lambda: pipeline.pretrain(_WIKI_PARTS.value, _PRETRAIN_MINUTES.value),
           "export": pipeline.export, "analysis": pipeline.analysis,
           "imdb": lambda: pipeline.classify("imdb", _SEEDS.value, _VARIANTS.value,
                                             _PARALLEL.value),
           "mnli": lambda: pipeline.classify("mnli", _SEEDS.value, _VARIANTS.value,
                                             _PARALLEL.value)}
  try:
    for stage in STAGES:
      if stage not in _STAGES.value or pipeline.done(stage):
        continue
      if pipeline.left() <= 0:
        break
      began = time.time()
      if steps[stage]():
        pipeline.mark_done(stage)
        print(f"[{time.strftime('%H:%M:%S')}] {stage}: done in {time.time() - began:.0f} s",
              flush=True)
      else:
        print(f"[{time.strftime('%H:%M:%S')}] {stage}: stopped at the budget; rerun to go on",
              flush=True)
        break
  finally:
    print(pipeline_report.report(pipeline, _OUT.value or os.path.join(pipeline.workdir, "report")))
  left = [s for s in STAGES if s in _STAGES.value and not pipeline.done(s)]
  print("all stages done" if not left else f"stages left: {', '.join(left)}")


if __name__ == "__main__":
  cli.run(main)
