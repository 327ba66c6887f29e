"""launch/gpu_host.sh and launch/tpu_vm.sh: the commands their --dry-run
prints, their one-line errors, and a real run of gpu_host.sh on this CPU."""
import json
import os
import shlex
import subprocess
import sys

from conftest import REPO

sys.path.insert(0, REPO)
from experiments import kinds  # noqa: E402


def launch(script, *args, env=None):
  return subprocess.run(["bash", os.path.join(REPO, "launch", script), *args],
                        capture_output=True, text=True, env=env, timeout=600)


def lines(result):
  assert result.returncode == 0, result.stderr
  return [shlex.split(line) for line in result.stdout.splitlines()]


def test_gpu_host_dry_run_installs_then_runs_the_entry_of_the_config():
  absent = dict(os.environ, VENV="venv-absent")
  absent.pop("XLA_PYTHON_CLIENT_MEM_FRACTION", None)
  out = lines(launch("gpu_host.sh", "--dry-run", "cifar:cpu", "runs/c", "--config.seed=1",
                     "--config.train.location=my data.npz", env=absent))
  assert out[0] == ["python3", "-m", "venv", "venv-absent"]
  assert out[2][:3] == ["venv-absent/bin/pip", "install", "-q"] and "jax[cuda12]" in out[2]
  assert out[3] == ["export", "XLA_PYTHON_CLIENT_MEM_FRACTION=0.9"]
  assert out[4] == ["venv-absent/bin/python", "-m", "experiments.cifar",
                    "--config=experiments/configs/cifar.py:cpu", "--workdir=runs/c",
                    "--config.seed=1", "--config.train.location=my data.npz"]
  for config, entry in kinds.config_kinds().items():   # the RUN_KIND each states
    assert lines(launch("gpu_host.sh", "--dry-run", config, "w"))[-1][2] == f"experiments.{entry}"
  forced = lines(launch("gpu_host.sh", "--dry-run", "--entry=export", "demo", "w"))[-1]
  assert forced[2] == "experiments.export"


def test_tpu_vm_dry_run_creates_copies_installs_and_runs_on_the_right_workers():
  out = lines(launch("tpu_vm.sh", "--dry-run", "--name=pod", "--zone=us-central1-a",
                     "--project=p", "--spot=1", "paper", "gs://b/run",
                     "--config.loop.num_steps=5"))
  where = ["--zone=us-central1-a", "--project=p"]
  tpu = ["gcloud", "compute", "tpus", "tpu-vm"]
  assert out[0] == tpu + ["describe", "pod"] + where + ["||"] + tpu + [
      "create", "pod"] + where + ["--accelerator-type=v5litepod-8",
                                  "--version=v2-alpha-tpuv5-lite", "--spot"]
  archive = out[1][-2]
  assert out[1][:2] == ["git", "archive"] and out[1][-1] == "HEAD"
  assert out[2] == tpu + ["scp", archive, "pod:glomo_jax.tar.gz"] + where + ["--worker=all"]
  assert out[3][:-1] == tpu + ["ssh", "pod"] + where + ["--worker=all"]
  install = shlex.split(out[3][-1].removeprefix("--command="))
  assert "jax[tpu]" in install and ".[tf]" in install
  run = out[4]
  assert run[-2] == "--worker=all"
  assert shlex.split(run[-1].removeprefix("--command=")) == [
      "cd", "glomo_jax", "&&", ".venv/bin/python", "-m", "experiments.pretrain",
      "--config=experiments/configs/paper.py", "--workdir=gs://b/run", "--distributed",
      "--config.loop.num_steps=5"]
  for config in ("cifar", "sst2", "squad:cpu"):   # every run kind runs on every host
    on_all = lines(launch("tpu_vm.sh", "--dry-run", "--name=v", "--zone=z", config, "r"))[-1]
    assert on_all[-2] == "--worker=all" and "--distributed" in on_all[-1]
  single = lines(launch("tpu_vm.sh", "--dry-run", "--name=v", "--zone=z", "--entry=export",
                        "demo", "r"))[-1]
  assert single[-2] == "--worker=0" and "--distributed" not in single[-1]


def test_launch_errors_are_one_line():
  cases = [("gpu_host.sh", ["--dry-run", "nope", "w"], "no config experiments/configs/nope.py"),
           ("gpu_host.sh", ["--dry-run", "--entry=foo", "demo", "w"], "no entry point"),
           ("gpu_host.sh", ["--dry-run"], "a config name is needed"),
           ("gpu_host.sh", ["--dry-run", "common", "w"], "states no RUN_KIND"),
           ("tpu_vm.sh", ["--dry-run", "--zone=z", "paper", "w"], "--name=NAME"),
           ("tpu_vm.sh", ["--dry-run", "--name=n", "paper", "w"], "--zone=ZONE")]
  for script, args, message in cases:
    result = launch(script, *args)
    assert result.returncode == 2 and result.stdout == "", (script, args)
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_gpu_host_runs_the_command_it_prints(tmp_path):
  env = dict(os.environ, VENV=sys.prefix)
  args = ["demo:tiny", str(tmp_path / "run"), "--config.loop.num_steps=2",
          "--config.export=False", "--compilation_cache_dir="]
  printed = lines(launch("gpu_host.sh", "--dry-run", *args, env=env))
  assert printed[0][0] == "export"  # an existing environment is not reinstalled
  result = launch("gpu_host.sh", *args, env=env)
  assert result.returncode == 0, result.stderr[-2000:]
  assert json.loads(result.stdout[result.stdout.index("{"):])["step"] == 2
