"""Every pretraining config loads, builds a PretrainConfig, and rejects typos;
the CPU tuning is opt-in; the demo end to end."""
import json
import importlib
import os
import subprocess
import sys

import pytest

from glomo_jax.pretraining import PretrainConfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from experiments import kinds  # noqa: E402

# the pretraining configs, by the RUN_KIND each states (classify:
# tests/test_classify_experiment.py; squad: tests/test_squad_run.py; images:
# tests/test_images_pretraining.py, tests/test_cifar.py)
CONFIGS = kinds.configs_of("pretrain")


def test_every_config_file_states_a_run_kind_of_the_registry():
  assert set(kinds.config_kinds().values()) == set(kinds.KINDS)   # raises on a bad one


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("arg", ["", "tiny"])
def test_config_builds_a_pretrain_config(name, arg):
  sys.path.insert(0, REPO)
  module = importlib.import_module(f"experiments.configs.{name}")
  raw = module.get_config(arg)
  config = PretrainConfig.from_dict(raw.to_dict())
  assert config.model.dim % config.model.num_heads == 0
  with pytest.raises(ValueError, match="unknown"):
    module.get_config("nonsense")


def test_paper_config_is_the_authors_run():
  sys.path.insert(0, REPO)
  from experiments.configs import paper  # noqa: PLC0415
  from glomo_jax import ModelConfig  # noqa: PLC0415
  c = PretrainConfig.from_dict(paper.get_config().to_dict())
  assert c.model == ModelConfig.paper()
  assert (c.batch_size, c.bptt, c.shift, c.optimizer, c.learning_rate, c.momentum,
          c.clip_norm, c.loop.plateau_patience, c.loop.plateau_factor) == (
              32, 200, 100, "sgd", 8.0, 0.2, 0.25, 3, 0.5)


def test_demo_trains_with_the_authors_optimiser_and_keeps_adam_one_preset_away():
  sys.path.insert(0, REPO)
  from experiments.configs import demo  # noqa: PLC0415
  preset = {arg: PretrainConfig.from_dict(demo.get_config(arg).to_dict()) for arg in ("", "adam")}
  assert (preset[""].optimizer, preset[""].learning_rate, preset[""].momentum,
          preset[""].clip_norm) == ("sgd", 8.0, 0.2, 0.25)
  assert (preset["adam"].optimizer, preset["adam"].learning_rate,
          preset["adam"].clip_norm) == ("adam", 3e-3, 1.0)
  assert preset["adam"].replace(optimizer="sgd", learning_rate=8.0, clip_norm=0.25) == preset[""]


def test_accelerator_preset_departs_from_the_authors_model_only_by_the_distance_prior():
  sys.path.insert(0, REPO)
  from experiments.configs import wiki_accelerator  # noqa: PLC0415
  from glomo_jax import ModelConfig  # noqa: PLC0415
  authors = ModelConfig.paper(dtype="bfloat16", embed_grad_scale_by_freq=False)
  preset = {arg: PretrainConfig.from_dict(wiki_accelerator.get_config(arg).to_dict())
            for arg in ("", "authors", "adam")}
  assert preset["authors"].model == authors == preset["adam"].model
  assert preset[""].model == authors.replace(distance_prior=16, distance_prior_init=1.0)
  assert preset[""].optimizer == preset["authors"].optimizer == "sgd"
  assert preset["adam"].optimizer == "adam"


def test_unknown_fields_are_errors():
  with pytest.raises(ValueError, match="PretrainConfig: unknown fields"):
    PretrainConfig.from_dict({"num_stepz": 3})
  with pytest.raises(ValueError, match=r"PretrainConfig.corpus: unknown fields \['patern'\]"):
    PretrainConfig.from_dict({"corpus": {"patern": "x"}})
  with pytest.raises(ValueError, match="must exceed"):
    PretrainConfig(bptt=3)


def test_cpu_tuning_is_opt_in():
  """Off by default: no glibc settings, asynchronous dispatch, no malloc_trim.
  GLOMO_JAX_CPU_TUNING=1: glibc took the settings (a 100 MiB block comes from
  the heap, not from a fresh mmap) and JAX's CPU dispatch is synchronous.
  (tests/test_train_resume.py checks a real pretraining run's environment.)"""
  from glomo_jax import tuning  # noqa: PLC0415
  env = tuning.tuned_environment({"GLIBC_TUNABLES": "glibc.foo=1"})
  assert env["GLIBC_TUNABLES"] == "glibc.foo=1:" + tuning.MALLOC_TUNABLES
  assert tuning.tuned_environment(env) == env
  code = ("import ctypes, os, jax\n"
          "from glomo_jax import tuning\n"
          "on = tuning.start_process()\n"
          "libc = ctypes.CDLL('libc.so.6'); libc.malloc.restype = ctypes.c_void_p\n"
          "p = libc.malloc(100 << 20)\n"
          "spans = [[int(x, 16) for x in l.split()[0].split('-')]\n"
          "         for l in open('/proc/self/maps') if '[heap]' in l]\n"
          "in_heap = any(a <= p < b for a, b in spans)\n"
          "print(on, 'GLIBC_TUNABLES' in os.environ, tuning.malloc_tuned(),\n"
          "      not jax.config.read('jax_cpu_enable_async_dispatch'), in_heap,\n"
          "      tuning.release_free_memory())")
  tuned, untuned = "True True True True True True", "False False False False False False"
  for setting, expected in (("1", tuned), (None, untuned), ("0", untuned)):
    env = {k: v for k, v in os.environ.items()
           if k not in ("GLIBC_TUNABLES", tuning.ENV_VAR)}
    env["PYTHONPATH"] = REPO
    if setting is not None:
      env[tuning.ENV_VAR] = setting
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.stdout.strip() == expected, (setting, out.stderr[-2000:])


def test_demo_main_job_end_to_end(tmp_path):
  """`make demo` at tiny sizes: pretrain, export, heatmap, arc scores, and the
  agreement transfer runs (baseline, uniform, GLoMo, the oracle: the built-in
  task's splits, a test score, the predictor only where graphs are read) with
  their table. (GLoMo with a predictor whose tokenizer never saw the task's
  words: tests/test_classify_experiment.py.)"""
  workdir = tmp_path / "demo"
  out = subprocess.run(
      [sys.executable, "-m", "experiments.demo", "--config=experiments/configs/demo.py:tiny",
       f"--workdir={workdir}", "--agreement_preset=tiny"],
      cwd=REPO, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  assert (workdir / "graphs.png").exists() and (workdir / "export").is_dir()
  assert "graph weight on the planted true arcs" in out.stdout
  table = out.stdout[out.stdout.index("downstream:"):]
  for variant in ("baseline", "uniform", "embeddings", "arcs"):
    assert variant in table
    results = json.loads((workdir / "agreement" / variant / "results.json").read_text())
    assert results["task"] == "agreement" and 0 <= results["test"] <= 1
    assert results["examples"] == {"train": 64, "validation": 32, "test": 32}
    assert "note" not in results
    assert (results["predictor"] is None) == (variant != "embeddings")
  assert "planted arcs (oracle)" in table and results["graph_source"] == "arcs"
