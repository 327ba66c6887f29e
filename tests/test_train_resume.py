"""Exact resume after a hard kill and a SIGTERM, corrupt checkpoints, non-finite losses."""
import functools
import gc
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from glomo_jax.pretraining import PretrainConfig, train_and_evaluate
from glomo_jax.train import Checkpointer, NonFiniteLossError, UnrestorableCheckpointError
from glomo_jax.train.checkpoint import shapes_by_path
from conftest import assert_trees_equal, kill_during_run, kill_seed

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 8
# In-process runs use one device (cheaper compiles), and so do the entry points
# started here (conftest); sharded saves and restores after a kill:
# test_train_multihost.py and test_downstream_multihost.py (2 × 2 devices).
ONE = jax.devices()[:1]


def pretrain_cmd(workdir, export=False):
  return [sys.executable, "-m", "experiments.pretrain",
          "--config=experiments/configs/demo.py:tiny", f"--workdir={workdir}",
          f"--config.loop.num_steps={STEPS}", "--config.loop.checkpoint_every=1",
          "--config.loop.eval_every=4", "--config.loop.log_every=1", f"--config.export={export}"]


def final_state(workdir, step=STEPS):
  return ocp.StandardCheckpointer().restore(
      os.path.join(workdir, "checkpoints", str(step), "state"))


def run(cmd, **kw):
  return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, **kw)


def test_sigkill_then_sigterm_then_resume_gives_identical_params(tmp_path):
  """SIGKILLed at a random moment, resumed for 400 steps and sent SIGTERM
  while training (a checkpoint saved off the 1000-step interval), resumed
  again from that checkpoint: the end state equals a straight run's."""
  straight, killed = str(tmp_path / "straight"), str(tmp_path / "killed")
  checkpoints = os.path.join(killed, "checkpoints")
  seed = kill_seed("test_sigkill_at_a_random_moment")
  print(f"kill seed {seed} (GLOMO_JAX_KILL_SEED={seed} replays this test's kill point)")
  kill_during_run(pretrain_cmd(killed), checkpoints, STEPS - 2, seed)
  before = {int(d) for d in os.listdir(checkpoints) if d.isdigit()}

  long = pretrain_cmd(killed) + ["--config.loop.checkpoint_every=1000",
                                 "--config.loop.num_steps=400"]
  env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "GLOMO_JAX_CPU_TUNING")}
  log = tmp_path / "stderr.txt"
  with open(log, "w", encoding="utf-8") as stderr:
    proc = subprocess.Popen(long, cwd=REPO, stdout=subprocess.DEVNULL, stderr=stderr, env=env)
  # SIGTERM once the resumed run has logged a step of 400: training, well before the end
  deadline = time.time() + 300
  while (time.time() < deadline and proc.poll() is None
         and not re.search(r"step \d+/400", log.read_text())):
    time.sleep(0.05)
  # the run's own environment: no glibc settings unless GLOMO_JAX_CPU_TUNING=1
  # (tests/test_entry_point_errors.py runs the pretraining entry point with it)
  with open(f"/proc/{proc.pid}/environ", "rb") as f:
    assert b"GLIBC_TUNABLES=" not in f.read()
  proc.send_signal(signal.SIGTERM)
  proc.wait(timeout=300)
  err = log.read_text()
  assert proc.returncode == 0, err[-3000:]
  assert "SIGTERM" in err
  resumed = re.findall(r"resumed from the checkpoint at step (\d+)", err)
  assert len(resumed) == 1 and 2 <= int(resumed[0]) < STEPS, resumed
  saved = {int(d) for d in os.listdir(checkpoints) if d.isdigit()}
  new = saved - before                  # saved off the 1000-step interval
  assert len(new) == 1 and max(saved) in new and int(resumed[0]) < max(new) < 400
  steps = max(new) + 2
  out = run(long[:-2] + [f"--config.loop.num_steps={steps}"])
  assert out.returncode == 0, out.stderr[-3000:]
  assert f"resumed from the checkpoint at step {max(new)}" in out.stderr

  # without the suite's shared cache (conftest), so the default place is used
  default_cache = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
  out = run(pretrain_cmd(straight, export=True) + [f"--config.loop.num_steps={steps}"],
            env=default_cache)
  assert out.returncode == 0, out.stderr[-3000:]
  a, b = final_state(straight, steps), final_state(killed, steps)
  assert int(a["step"]) == int(b["step"]) == steps
  assert_trees_equal(a, b)
  assert os.listdir(os.path.join(killed, "tensorboard"))
  # the compiled steps went to <workdir>/compile_cache (experiments.pretrain default)
  assert os.listdir(os.path.join(straight, "compile_cache"))
  export_matches_the_trained_model(straight, a)


def export_matches_the_trained_model(workdir, state):
  """The run's export gives the trained model's graphs (loaded here; a fresh
  process loads exports in test_export.py)."""
  from glomo_jax import GLoMo  # noqa: PLC0415
  from glomo_jax.export import load_graph_predictor  # noqa: PLC0415
  tokens = np.array([[5, 9, 30, 7, 12, 40, 41, 3, 8, 9], [11, 12, 13, 14, 15, 16, 0, 0, 0, 0]],
                    np.int32)
  mask = tokens > 0
  predictor = load_graph_predictor(os.path.join(workdir, "export"))
  exported = np.asarray(predictor(tokens, mask))
  variables = {"params": state["params"], "batch_stats": state["batch_stats"]}
  graphs = jax.jit(functools.partial(GLoMo(predictor.config).apply, method=GLoMo.graphs))
  ref = np.asarray(graphs(variables, tokens, mask))
  assert ref.shape == exported.shape and ref.any()
  # same weights; the export's program and this one may round differently
  np.testing.assert_allclose(exported, ref, rtol=0, atol=1e-5)


def test_checkpoint_fingerprints_on_the_host_equal_the_compiled_ones():
  """CPU arrays are fingerprinted in numpy (no compile); anything else (here
  a typed key in the tree) sends the whole tree through the compiled program:
  both give the same numbers, sharded or not, for every dtype a state holds."""
  from glomo_jax.train import checkpoint
  rng = np.random.default_rng(0)
  mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
  rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
  arrays = {"f32": jnp.asarray(rng.normal(size=(16, 5)), jnp.float32),
            "sharded": jax.device_put(jnp.asarray(rng.normal(size=(8 * 3, 4)), jnp.float32), rows),
            "bf16": jnp.asarray(rng.normal(size=(7, 3)), jnp.bfloat16),
            "f16": jnp.asarray(rng.normal(size=(5,)), jnp.float16),
            "i32": jnp.asarray(rng.integers(-2**31, 2**31 - 1, size=(33,)), jnp.int32),
            "u8": jnp.asarray(rng.integers(0, 256, size=(9,)), jnp.uint8),
            "bool": jnp.asarray([True, False, True]), "scalar": jnp.int32(-7)}
  assert all(checkpoint._on_this_host_cpu(x) for x in arrays.values())
  host = checkpoint.fingerprints(arrays)
  compiled = checkpoint.fingerprints(dict(arrays, key=jax.random.key(0)))
  assert compiled.pop("key") is not None and host == compiled
  assert len(set(host.values())) == len(host)
  # one changed element, or two swapped, changes it
  f32 = np.asarray(arrays["f32"])
  swapped = f32.copy()
  swapped[[0, 1]] = swapped[[1, 0]]
  changed = f32.copy()
  changed[3, 2] = np.nextafter(changed[3, 2], np.float32(np.inf))
  for other in (swapped, changed):
    assert checkpoint.fingerprints({"f32": jnp.asarray(other)})["f32"] != host["f32"]


def test_corrupt_newest_checkpoint_is_skipped_with_a_warning(tmp_path, caplog):
  ckpt = Checkpointer(str(tmp_path), keep=5, save_every=1, async_save=False)
  state = {"w": jnp.arange(4.0), "step": jnp.int32(0)}
  for step in (1, 2):
    ckpt.save(step, {"w": state["w"] * step, "step": jnp.int32(step)}, {"data": step})
  ckpt.wait()
  # corrupt every file of the newest step's state
  for root, _, files in os.walk(tmp_path / "2" / "state"):
    for name in files:
      with open(os.path.join(root, name), "wb") as f:
        f.write(b"\x00garbage")
  os.makedirs(tmp_path / "3.orbax-checkpoint-tmp-123")        # a half-written save
  abstract = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state)
  fresh = Checkpointer(str(tmp_path), keep=5, save_every=1, async_save=False)
  with caplog.at_level(logging.WARNING):
    restored, extra, step = fresh.restore_latest(abstract)
  assert step == 1 and extra == {"data": 1}
  np.testing.assert_array_equal(restored["w"], np.arange(4.0))
  assert "step 2" in caplog.text and "previous" in caplog.text
  assert fresh.steps() == [1] and os.listdir(str(tmp_path) + "-unreadable") == ["2"]
  fresh.close()
  ckpt.close()


def test_stored_shapes_come_from_the_metadata_without_a_restore(tmp_path):
  ckpt = Checkpointer(str(tmp_path), keep=None, async_save=False)
  state = {"params": {"dense": {"kernel": jnp.ones((3, 5)), "bias": jnp.zeros(5)}},
           "batch_stats": {}, "step": jnp.int32(4)}
  ckpt.save(4, state, {})
  ckpt.close()
  fresh = Checkpointer(str(tmp_path), keep=None)
  want = {"params/dense/kernel": (3, 5), "params/dense/bias": (5,), "step": ()}
  assert fresh.stored_shapes(4) == want == shapes_by_path(state)
  assert fresh.shape_difference(4, state) is None
  wider = {**state, "params": {"dense": {"kernel": jnp.ones((3, 6)), "bias": jnp.zeros(6)}}}
  assert fresh.shape_difference(4, wider) == "params/dense/bias is (5,) there and (6,) here"
  more = {**state, "mu": jnp.zeros(2)}
  assert fresh.shape_difference(4, more) == "it lacks mu (2,)"
  fewer = {k: v for k, v in state.items() if k != "step"}
  assert fresh.shape_difference(4, fewer) == "it holds step, which this run's state has not"
  with pytest.raises(UnrestorableCheckpointError, match=r"step 4 .*another model.*\(6,\) here"):
    fresh.restore_latest(wider)
  assert fresh.steps() == [4]
  fresh.close()


def two_step_config():
  """demo:tiny for 2 steps, a checkpoint after each, no evaluation or export."""
  sys.path.insert(0, REPO)
  from experiments.configs import demo  # noqa: PLC0415
  cfg = demo.get_config("tiny")
  cfg.loop.num_steps, cfg.loop.checkpoint_every, cfg.loop.eval_every, cfg.export = 2, 1, 100, False
  cfg.loop.log_every = 1
  return cfg


@pytest.fixture(scope="module")
def two_step_run(tmp_path_factory):
  """The workdir of a finished `two_step_config` run (checkpoints at steps 1
  and 2), trained once for the tests below: each works on its own copy."""
  workdir = tmp_path_factory.mktemp("two_steps") / "run"
  train_and_evaluate(PretrainConfig.from_dict(two_step_config().to_dict()), str(workdir),
                     devices=ONE)
  return workdir


def copy_of(workdir, tmp_path):
  return shutil.copytree(workdir, tmp_path / "run")


def test_non_finite_loss_stops_the_run_and_keeps_the_last_good_checkpoint(two_step_run,
                                                                          tmp_path):
  tmp_path = copy_of(two_step_run, tmp_path)
  cfg = two_step_config()
  cfg.loop.num_steps, cfg.learning_rate = 4, float("inf")
  with pytest.raises(NonFiniteLossError, match=r"step 3.*last good checkpoint is step 2"):
    train_and_evaluate(PretrainConfig.from_dict(cfg.to_dict()), str(tmp_path), devices=ONE)
  assert sorted(int(d) for d in os.listdir(tmp_path / "checkpoints") if d.isdigit()) == [1, 2]


def test_checkpoints_that_no_longer_fit_the_config_are_an_error_not_a_restart(two_step_run,
                                                                             tmp_path, caplog):
  tmp_path = copy_of(two_step_run, tmp_path)
  cfg = two_step_config()
  cfg.model.dim, cfg.model.head_dim = 24, 6
  with caplog.at_level(logging.INFO, logger="glomo_jax.train"), pytest.raises(
      UnrestorableCheckpointError,
      match=r"step 2 .*another model.*/mean is \(16,\) there and \(24,\) here"):
    train_and_evaluate(PretrainConfig.from_dict(cfg.to_dict()), str(tmp_path), devices=ONE)
  assert sorted(os.listdir(tmp_path / "checkpoints")) == ["1", "2"]
  assert "compiled in" not in caplog.text         # named before anything compiles


def test_the_train_step_compiles_once_across_evaluations_and_saves(tmp_path, caplog,
                                                                  monkeypatch):
  sys.path.insert(0, REPO)
  from experiments.configs import demo  # noqa: PLC0415
  from glomo_jax.pretraining import GLoMoObjective  # noqa: PLC0415
  traced = {"loss": 0, "init_variables": 0}
  for name in traced:
    def counted(self, *args, _name=name, _fn=getattr(GLoMoObjective, name)):
      traced[_name] += 1
      return _fn(self, *args)
    monkeypatch.setattr(GLoMoObjective, name, counted)
  cfg = demo.get_config("tiny")
  cfg.loop.num_steps, cfg.loop.checkpoint_every, cfg.loop.eval_every, cfg.export = 6, 2, 2, False
  jax.config.update("jax_log_compiles", True)
  try:
    with caplog.at_level(logging.WARNING):
      summary = train_and_evaluate(PretrainConfig.from_dict(cfg.to_dict()), str(tmp_path), devices=ONE)
  finally:
    jax.config.update("jax_log_compiles", False)
  assert summary["step"] == 6
  # the step with its metric sums (`train.step.accumulating_step`), compiled once
  assert caplog.text.count("Compiling jit(accumulating_step)") == 1
  assert "Compiling jit(train_step)" not in caplog.text
  # and traced once: the metric shapes' and the state shapes' traces serve the
  # compiles (`train.step.jitted_train_step`, `state_creator`)
  assert traced == {"loss": 1, "init_variables": 1}


# orbax leaves its reads of the garbage files below as coroutines that are
# never awaited; Python reports them when they are collected (the test collects
# them before it ends, so that the report falls under these filters): noise here
@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning",
                            "ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_finished_run_reruns_without_compiling_unless_its_newest_checkpoint_fails(
    two_step_run, tmp_path, caplog):
  tmp_path = copy_of(two_step_run, tmp_path)
  config = PretrainConfig.from_dict(two_step_config().to_dict())
  with caplog.at_level(logging.INFO, logger="glomo_jax.train"):
    summary = train_and_evaluate(config, str(tmp_path), devices=ONE)
  assert summary["step"] == 2 and summary["first_step"] == 2
  assert "resumed from the checkpoint at step 2" in caplog.text
  assert "train step compiled" not in caplog.text
  # the newest checkpoint unreadable: the run falls back to step 1, compiles
  # the step after the restore and trains step 2 again
  for root, _, files in os.walk(tmp_path / "checkpoints" / "2" / "state"):
    for name in files:
      with open(os.path.join(root, name), "wb") as f:
        f.write(b"\x00garbage")
  caplog.clear()
  with caplog.at_level(logging.INFO, logger="glomo_jax.train"):
    summary = train_and_evaluate(config, str(tmp_path), devices=ONE)
  assert summary["first_step"] == 1 and summary["step"] == 2
  assert "resumed from the checkpoint at step 1" in caplog.text
  assert caplog.text.count("train step compiled") == 1
  # the unreadable step was moved aside (kept), and step 2 saved anew
  assert os.listdir(tmp_path / "checkpoints-unreadable") == ["2"]
  assert sorted(d for d in os.listdir(tmp_path / "checkpoints") if d.isdigit()) == ["1", "2"]
  gc.collect(1)
