"""experiments.accelerator_pipeline at its tiny preset on CPU: each stage once,
resumed across invocations, cut at the budget and resumed, the report."""
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import REPO, SHARED_DATA

pytestmark = pytest.mark.skipif(not os.path.isdir(os.path.join(SHARED_DATA, "wiki_text")),
                                reason="needs ../shared/data")


def _pipeline(workdir, *flags, timeout=600):
  cmd = [sys.executable, "-m", "experiments.accelerator_pipeline", f"--data={SHARED_DATA}",
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
  work, out = tmp_path / "w", tmp_path / "out"
  _, state = _pipeline(work, "--stages=tokenizer,pretrain")
  assert state["done"] == ["tokenizer", "pretrain"]
  assert len(state["pretrain_chunks"]) == 1 and state["pretrain_chunks"][0]["step"] == 12
  assert os.path.exists(work / "pretrain" / "export" / "glomo_export.json")

  stdout, state = _pipeline(work, "--stages=tokenizer,pretrain,export,analysis,imdb",
                            f"--out={out}")
  assert state["done"] == ["tokenizer", "pretrain", "export", "analysis", "imdb"]
  assert _runs(work, "tokenizer") == 1 and _runs(work, "pretrain") == 1   # not rerun
  assert "stages left" not in stdout and "all stages done" in stdout
  assert os.path.exists(work / "grid" / "imdb" / "embeddings_s0" / "results.json")
  report = (out / "report.md").read_text()
  assert "| 0 | " in report and "## syntax_alignment" in report and "## graph_stats" in report
  assert "| embeddings | 0 |" in report
  assert (out / "graphs.png").read_bytes()[:4] == b"\x89PNG"
  assert sorted(os.listdir(out)) == ["graphs.png", "report.md"]       # nothing else leaves


def test_work_running_at_the_deadline_gets_sigterm_then_sigkill(tmp_path, monkeypatch):
  sys.path.insert(0, REPO)
  from experiments import accelerator_pipeline as ap
  monkeypatch.setattr(ap, "_GRACE", 2.0)
  pipeline = ap.Pipeline(str(tmp_path / "data"), str(tmp_path / "w"), "tiny",
                         deadline=time.time() + 3600)
  saved = tmp_path / "saved"
  polite = ("import signal, sys, time\n"
            "def save(*_):\n"
            f"  open({str(saved)!r}, 'w').write('step 7')\n"
            "  sys.exit(0)\n"
            "signal.signal(signal.SIGTERM, save)\n"
            "print('training', flush=True)\n"
            "time.sleep(60)\n")
  began = time.time()
  status, log = pipeline.run("polite", [sys.executable, "-c", polite], until=time.time() + 2)
  assert status is None and saved.read_text() == "step 7" and "training" in log
  assert time.time() - began < 10
  stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
  began = time.time()
  status, _ = pipeline.run("stubborn", [sys.executable, "-c", stubborn], until=time.time() + 1)
  assert status is None and time.time() - began < 10       # killed after the grace period
  status, log = pipeline.run("quick", [sys.executable, "-c", "print('ok')"])
  assert status == 0 and "ok" in log
  with pytest.raises(ChildProcessError, match="failed .exit 3"):
    pipeline.run("broken", [sys.executable, "-c", "raise SystemExit(3)"])
