"""Several hosts (jax.distributed), simulated by processes on 127.0.0.1 with
fake CPU devices:

* 2 processes × 2 devices (one global mesh of 4), SIGKILLed mid-run and
  restarted, then sent a SIGTERM on one process only: both save the same
  step and exit cleanly, and that save holds the parameters and BatchNorm
  statistics of 1 process × 4 devices run straight to that step (to float
  tolerance: the sums run in another order; bit-exact resume on one host:
  test_train_resume.py);
* each process reads its own rows of every global batch: over an epoch no
  window is read twice and none is skipped.
"""
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np

from conftest import REPO
from hosts import (HOST_DEVICES, assert_states_close, environment, free_port,
                   kill_hosts_after_a_checkpoint, resumed_step, saved_state, start_hosts,
                   wait_ok)

STEPS = 6


def pretrain_cmd(workdir, steps=STEPS, *extra):
  # SGD: Adam would turn the float noise of near-zero gradients (summed in
  # another order on another mesh) into ±learning-rate steps
  return [sys.executable, "-m", "experiments.pretrain",
          "--config=experiments/configs/demo.py:tiny", f"--workdir={workdir}",
          "--config.optimizer=sgd", "--config.learning_rate=1.0",
          f"--config.loop.num_steps={steps}", "--config.loop.checkpoint_every=2",
          "--config.loop.eval_every=5000", "--config.loop.log_every=1", "--config.export=False",
          "--compilation_cache_dir=", *extra]


def final_state(workdir, step=STEPS):
  return saved_state(workdir, "checkpoints", step)


def test_two_hosts_killed_resumed_and_stopped_by_sigterm_train_as_one(tmp_path):
  # SIGKILL one process after a random checkpoint; its partner is then lost too.
  killed, logs = tmp_path / "killed", [tmp_path / f"killed{i}.log" for i in range(2)]
  kill_hosts_after_a_checkpoint(pretrain_cmd(killed), logs, killed / "checkpoints", STEPS - 2,
                                "test_two_hosts_sigkill")
  before = {int(d) for d in os.listdir(killed / "checkpoints") if d.isdigit()}

  # Restarted for 2000 steps, no interval saves; a SIGTERM delivered to one
  # process only, once both train, makes both save the same step and exit cleanly.
  logs = [tmp_path / f"resumed{i}.log" for i in range(2)]
  procs = start_hosts(pretrain_cmd(killed, 2000, "--config.loop.checkpoint_every=5000"), logs)
  deadline = time.time() + 300
  while time.time() < deadline and not all(
      re.search(r"step \d+/2000", log.read_text()) for log in logs):
    assert all(p.poll() is None for p in procs), [log.read_text()[-2000:] for log in logs]
    time.sleep(0.2)
  procs[1].send_signal(signal.SIGTERM)                    # one host's notice only
  wait_ok(procs, logs)
  resumed = resumed_step(logs)
  assert 2 <= resumed < STEPS
  assert (f"process 1 of 2, {HOST_DEVICES} local / {2 * HOST_DEVICES} global devices"
          in logs[1].read_text())
  texts = [log.read_text() for log in logs]
  stopped = [re.findall(r"stopped at step (\d+) after SIGTERM", t) for t in texts]
  assert stopped[0] and stopped[0] == stopped[1], stopped
  step = int(stopped[0][0])
  saved = {int(d) for d in os.listdir(killed / "checkpoints") if d.isdigit()}
  assert saved - before == {step} and max(saved) == step and resumed < step < 2000

  # the SIGTERM's save holds what 1 process × 4 devices reach straight
  one = tmp_path / "one_host"
  out = subprocess.run(pretrain_cmd(one, step), cwd=REPO, env=environment(2 * HOST_DEVICES),
                       capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  a, b = final_state(one, step), final_state(killed, step)
  assert int(a["step"]) == int(b["step"]) == step
  assert_states_close(a, b, ("params", "batch_stats"))


def test_each_host_reads_its_own_rows_of_every_batch(tmp_path):
  port, logs = free_port(), [tmp_path / f"data{i}.log" for i in range(2)]
  procs = []
  for i, log in enumerate(logs):
    with open(log, "w") as f:
      procs.append(subprocess.Popen(
          [sys.executable, os.path.join(REPO, "tests", "multihost_data_worker.py"), str(port),
           str(i), "2", str(tmp_path / "run"), str(tmp_path / f"rows{i}.npz")],
          cwd=REPO, env=dict(environment(HOST_DEVICES), PYTHONPATH=REPO), stdout=f,
          stderr=subprocess.STDOUT))
  wait_ok(procs, logs)
  host = [np.load(tmp_path / f"rows{i}.npz") for i in range(2)]
  # per step, host 0's rows then host 1's are the global batch one process reads
  for key in ("window_index", "tokens"):
    joined = np.concatenate([h[key] for h in host], axis=1)
    np.testing.assert_array_equal(joined, host[0][f"single_{key}"])
  read = np.concatenate([h["window_index"].ravel() for h in host])
  batch = sum(h["window_index"].shape[1] for h in host)
  assert len(np.unique(read)) == len(read)                                # none twice
  # none skipped, but for the remainder of the shuffled epoch (fewer than a batch)
  assert len(read) == int(host[0]["num_windows"]) // batch * batch
  assert read.min() >= 0 and read.max() < int(host[0]["num_windows"])
