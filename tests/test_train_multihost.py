"""Several hosts (jax.distributed), simulated by processes on 127.0.0.1 with
fake CPU devices:

* 2 processes × 2 devices (one global mesh of 4), SIGKILLed mid-run and
  restarted, end with the parameters and BatchNorm statistics of 1 process ×
  4 devices run straight (to float tolerance: the sums run in another order;
  bit-exact resume on one host: test_train_resume.py);
* a SIGTERM delivered to one process only makes both save the same step and
  exit cleanly;
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


def test_two_hosts_killed_and_resumed_train_as_one(tmp_path):
  one = tmp_path / "one_host"
  out = subprocess.run(pretrain_cmd(one), cwd=REPO, env=environment(2 * HOST_DEVICES),
                       capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]

  # SIGKILL one process after a random checkpoint; its partner is then lost too.
  killed, logs = tmp_path / "killed", [tmp_path / f"killed{i}.log" for i in range(2)]
  kill_hosts_after_a_checkpoint(pretrain_cmd(killed), logs, killed / "checkpoints", STEPS - 2,
                                "test_two_hosts_sigkill")
  wait_ok(start_hosts(pretrain_cmd(killed), logs), logs)
  assert 2 <= resumed_step(logs) < STEPS
  assert (f"process 1 of 2, {HOST_DEVICES} local / {2 * HOST_DEVICES} global devices"
          in logs[1].read_text())
  a, b = final_state(one), final_state(killed)
  assert int(a["step"]) == STEPS
  assert_states_close(a, b, ("params", "batch_stats"))


def test_sigterm_on_one_host_saves_the_same_step_on_every_host(tmp_path):
  workdir, logs = tmp_path / "run", [tmp_path / f"process{i}.log" for i in range(2)]
  procs = start_hosts(pretrain_cmd(workdir, 2000, "--config.loop.log_every=5",
                                   "--config.loop.checkpoint_every=5000"), logs)
  deadline = time.time() + 300
  while time.time() < deadline and not all(
      re.search(r"step \d+/2000", log.read_text()) for log in logs):
    assert all(p.poll() is None for p in procs), [log.read_text()[-2000:] for log in logs]
    time.sleep(0.2)
  procs[1].send_signal(signal.SIGTERM)                    # one host's notice only
  wait_ok(procs, logs)
  texts = [log.read_text() for log in logs]
  stopped = [re.findall(r"stopped at step (\d+) after SIGTERM", t) for t in texts]
  assert stopped[0] and stopped[0] == stopped[1], stopped
  saved = sorted(int(d) for d in os.listdir(workdir / "checkpoints") if d.isdigit())
  assert saved == [int(stopped[0][0])] and 0 < saved[0] < 2000


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
