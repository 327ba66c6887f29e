"""experiments.accelerator_pipeline at its tiny preset on CPU: each stage once,
resumed across invocations, cut at the budget and resumed, the report."""
import gzip
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, SHARED_DATA

pytestmark = pytest.mark.skipif(not os.path.isdir(os.path.join(SHARED_DATA, "wiki_text")),
                                reason="needs ../shared/data")


def _small_data(root) -> str:
  """../shared/data's folders, linked, but IMDB cut to every 125th review (200
  reviews, 100 of each label; the tiny preset reads 96, and tokenizing all
  25,000 takes longer than the stage's runs)."""
  data = root / "data"
  data.mkdir()
  for name in os.listdir(SHARED_DATA):
    if name != "imdb":
      (data / name).symlink_to(os.path.join(SHARED_DATA, name))
  (data / "imdb").mkdir()
  with gzip.open(os.path.join(SHARED_DATA, "imdb", "imdb_train.jsonl.gz"), "rt") as f:
    head = [line for i, line in enumerate(f) if i % 125 == 0]
  with gzip.open(data / "imdb" / "imdb_train.jsonl.gz", "wt") as f:
    f.writelines(head)
  return str(data)


def _pipeline(workdir, data, *flags, timeout=600):
  cmd = [sys.executable, "-m", "experiments.accelerator_pipeline", f"--data={data}",
         f"--workdir={workdir}", "--preset=tiny", "--wiki_parts=1", "--seeds=0",
         "--variants=embeddings", "--parallel=1", *flags]
  out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  with open(os.path.join(workdir, "pipeline.json"), encoding="utf-8") as f:
    return out.stdout, json.load(f)


def _runs(workdir, name):
  with open(os.path.join(workdir, "logs", f"{name}.txt"), encoding="utf-8") as f:
    return f.read().count("\n=== ")


def test_stages_resume_across_invocations_and_report(tmp_path):
  work, out, data = tmp_path / "w", tmp_path / "out", _small_data(tmp_path)
  _, state = _pipeline(work, data, "--stages=tokenizer,pretrain")
  assert state["done"] == ["tokenizer", "pretrain"]
  assert len(state["pretrain_chunks"]) == 1 and state["pretrain_chunks"][0]["step"] == 12
  assert os.path.exists(work / "pretrain" / "export" / "glomo_export.json")

  stdout, state = _pipeline(work, data, "--stages=tokenizer,pretrain,export,analysis,imdb",
                            f"--out={out}")
  assert state["done"] == ["tokenizer", "pretrain", "export", "analysis", "imdb"]
  assert _runs(work, "tokenizer") == 1 and _runs(work, "pretrain") == 1   # not rerun
  assert "stages left" not in stdout and "all stages done" in stdout
  assert os.path.exists(work / "grid" / "imdb" / "embeddings_s0" / "results.json")
  for short in ("graph_stats", "syntax_alignment", "plot_graphs", "imdb_cache", "imdb_grid"):
    with open(work / "logs" / f"{short}.txt", encoding="utf-8") as f:
      assert "--xla_gpu_enable_triton_gemm=false" in f.read().splitlines()[1], short
  report = (out / "report.md").read_text()
  assert "| 0 | " in report and "## syntax_alignment" in report and "## graph_stats" in report
  assert "## subject_arcs" in report and "distance 2+" in report
  assert "## lm_agreement" in report and "attractors_0" in report
  assert "| embeddings | 0 |" in report
  assert (out / "graphs.png").read_bytes()[:4] == b"\x89PNG"
  assert sorted(os.listdir(out)) == ["graphs.png", "report.md"]       # nothing else leaves


# run in its own process: the pipeline module defines absl flags (--data, ...)
# that other entry points imported into a test worker define too
DEADLINE_CHECKS = r"""
import json, sys, time
from experiments import accelerator_pipeline as ap
ap._GRACE = 2.0
root = sys.argv[1]
pipeline = ap.Pipeline(root + "/data", root + "/w", "tiny", deadline=time.time() + 3600)
saved = root + "/saved"
polite = ("import signal, sys, time\n"
          "def save(*_):\n"
          f"  open({saved!r}, 'w').write('step 7')\n"
          "  sys.exit(0)\n"
          "signal.signal(signal.SIGTERM, save)\n"
          "print('training', flush=True)\n"
          "time.sleep(60)\n")
woke = root + "/woke"
out = {}
status, log = pipeline.run("polite", [sys.executable, "-c", polite], until=time.time() + 2)
out["polite"] = [status, open(saved).read(), "training" in log]
stubborn = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            f"time.sleep(60); open({woke!r}, 'w')")
import os
status, _ = pipeline.run("stubborn", [sys.executable, "-c", stubborn], until=time.time() + 1)
out["stubborn"] = [status, os.path.exists(woke)]
status, log = pipeline.run("quick", [sys.executable, "-c", "print('ok')"])
out["quick"] = [status, "ok" in log]
try:
  pipeline.run("broken", [sys.executable, "-c", "raise SystemExit(3)"])
except ChildProcessError as e:
  out["broken"] = str(e)
print(json.dumps(out))
"""


def test_work_running_at_the_deadline_gets_sigterm_then_sigkill(tmp_path):
  done = subprocess.run([sys.executable, "-c", DEADLINE_CHECKS, str(tmp_path)], cwd=REPO,
                        capture_output=True, text=True, timeout=120)
  assert done.returncode == 0, done.stderr[-3000:]
  out = json.loads(done.stdout.strip().splitlines()[-1])
  status, saved, logged = out["polite"]
  assert status is None and saved == "step 7" and logged  # saved on SIGTERM
  status, woke = out["stubborn"]
  assert status is None and not woke                      # killed after the grace period
  assert out["quick"] == [0, True]
  assert "broken failed (exit 3" in out["broken"]




SETTINGS = r"""
import json, os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
from experiments import accelerator_pipeline as ap
from experiments.configs import imdb, mnli
print(json.dumps({"env": ap.Pipeline.short_run_env(A="1"),
                  "args": {t: ap.task_arguments(t, "D", "E", "C") for t in ("imdb", "mnli")},
                  "max_words": {"imdb": imdb.get_config().max_words,
                                "mnli": mnli.get_config().max_words}}))
"""


def test_short_stages_compile_without_triton_gemms_and_one_task_shape():
  done = subprocess.run([sys.executable, "-c", SETTINGS], cwd=REPO, capture_output=True,
                        text=True, timeout=120)
  assert done.returncode == 0, done.stderr[-3000:]
  out = json.loads(done.stdout.strip().splitlines()[-1])
  assert out["env"] == {"A": "1", "XLA_FLAGS": "--xla_force_host_platform_device_count=8 "
                                               "--xla_gpu_enable_triton_gemm=false"}
  for task, args in out["args"].items():
    options = dict(a.split("=", 1) for a in args)
    words = int(options.get("--config.max_words", out["max_words"][task]))
    assert int(options["--config.length_multiple"]) == words == {"imdb": 128, "mnli": 64}[task]
