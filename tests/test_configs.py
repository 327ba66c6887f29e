"""Every experiment config loads, builds a TrainConfig, and rejects typos."""
import glob
import json
import importlib
import os
import subprocess
import sys

import pytest

from glomo_jax.train import TrainConfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(REPO, "experiments",
                                                                          "configs", "*.py"))
                 if not os.path.basename(p).startswith(("_", "common")))


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("arg", ["", "tiny"])
def test_config_builds_a_train_config(name, arg):
  sys.path.insert(0, REPO)
  module = importlib.import_module(f"experiments.configs.{name}")
  raw = module.get_config(arg)
  if "corpus" not in raw:
    pytest.skip(f"{name} is not a pretraining config")
  config = TrainConfig.from_dict(raw.to_dict())
  assert config.model.dim % config.model.num_heads == 0
  with pytest.raises(ValueError, match="unknown"):
    module.get_config("nonsense")


def test_paper_config_is_the_authors_run():
  sys.path.insert(0, REPO)
  from experiments.configs import paper  # noqa: PLC0415
  from glomo_jax import ModelConfig  # noqa: PLC0415
  c = TrainConfig.from_dict(paper.get_config().to_dict())
  assert c.model == ModelConfig.paper()
  assert (c.batch_size, c.bptt, c.shift, c.optimizer, c.learning_rate, c.momentum,
          c.clip_norm, c.plateau_patience, c.plateau_factor) == (
              32, 200, 100, "sgd", 8.0, 0.2, 0.25, 3, 0.5)


def test_unknown_fields_are_errors():
  with pytest.raises(ValueError, match="unknown TrainConfig fields"):
    TrainConfig.from_dict({"num_stepz": 3})
  with pytest.raises(ValueError, match="must exceed"):
    TrainConfig(bptt=3)


def test_a_typo_in_a_command_line_override_fails_before_any_work(tmp_path):
  out = subprocess.run(
      [sys.executable, "-m", "experiments.pretrain", "--config=experiments/configs/demo.py",
       f"--workdir={tmp_path}", "--config.num_stepz=5"],
      cwd=REPO, capture_output=True, text=True, timeout=300)
  assert out.returncode != 0
  assert "num_stepz" in out.stderr
  assert not os.path.exists(tmp_path / "checkpoints")


def test_malloc_tuning_environment():
  from glomo_jax import host_memory  # noqa: PLC0415
  env = host_memory.tuned_environment({"GLIBC_TUNABLES": "glibc.foo=1"})
  assert env["GLIBC_TUNABLES"] == "glibc.foo=1:" + host_memory.MALLOC_TUNABLES
  assert host_memory.tuned_environment(env) == env
  # Tuned: glibc took the settings (a 100 MiB block comes from the heap, not
  # from a fresh mmap) and JAX's CPU dispatch is synchronous.
  code = ("import ctypes, jax\n"
          "from glomo_jax.host_memory import *\n"
          "reexec_with_tuned_malloc()\n"
          "sync = use_synchronous_cpu_dispatch()\n"
          "libc = ctypes.CDLL('libc.so.6'); libc.malloc.restype = ctypes.c_void_p\n"
          "p = libc.malloc(100 << 20)\n"
          "spans = [[int(x, 16) for x in l.split()[0].split('-')]\n"
          "         for l in open('/proc/self/maps') if '[heap]' in l]\n"
          "in_heap = any(a <= p < b for a, b in spans)\n"
          "print(malloc_tuned(), sync, not jax.config.read('jax_cpu_enable_async_dispatch'), in_heap,\n"
          "      release_free_memory())")
  tuned, untuned = "True True True True True", "False False False False True"
  for setting, expected in (("1", tuned), (None, tuned), ("0", untuned)):
    env = {**os.environ, "PYTHONPATH": REPO, "GLIBC_TUNABLES": ""}
    env.pop("GLOMO_JAX_MALLOC_TUNE", None)
    if setting is not None:
      env["GLOMO_JAX_MALLOC_TUNE"] = setting
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.stdout.strip() == expected, (setting, out.stderr[-2000:])


def test_demo_main_job_end_to_end(tmp_path):
  """`make demo` at tiny sizes: pretrain, export, heatmap, arc scores, and the
  agreement transfer runs (baseline, uniform, GLoMo) with their table."""
  workdir = tmp_path / "demo"
  out = subprocess.run(
      [sys.executable, "-m", "experiments.demo", "--config=experiments/configs/demo.py:tiny",
       f"--workdir={workdir}", "--transfer_preset=tiny"],
      cwd=REPO, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  assert (workdir / "graphs.png").exists() and (workdir / "export").is_dir()
  assert "graph weight on the planted true arcs" in out.stdout
  table = out.stdout[out.stdout.index("downstream:"):]
  for variant in ("baseline", "uniform", "embeddings"):
    assert variant in table
    results = json.loads((workdir / "agreement" / variant / "results.json").read_text())
    assert results["task"] == "agreement" and 0 <= results["test"] <= 1
