"""A downstream run on several hosts (jax.distributed, processes on
127.0.0.1 with 2 fake CPU devices each): 2 processes × 2 devices, SIGKILLed
after a random checkpoint and restarted, train the one-text classifier as 1
process × 4 devices does straight (losses and parameters to float tolerance,
as the sums run in another order; accuracies, best step and test score
equal). Bit-exact resume on one host: test_classification_task.py."""
import json
import subprocess
import sys

import numpy as np

from conftest import REPO, reviews, write_jsonl
from hosts import (HOST_DEVICES, assert_states_close, environment,
                   kill_hosts_after_a_checkpoint, resumed_step, saved_state, start_hosts,
                   wait_ok)

STEPS = 8
TIMING = ("train_time_s", "wall_time_s")


def transfer_cmd(workdir, train, test):
  # SGD: Adam would turn the float noise of near-zero gradients (summed in
  # another order on another mesh) into ±learning-rate steps
  return [sys.executable, "-m", "experiments.classify",
          "--config=experiments/configs/imdb.py:tiny", f"--workdir={workdir}",
          f"--config.files.train={train}", f"--config.files.test={test}",
          "--config.optim.optimizer=sgd", "--config.optim.learning_rate=0.05",
          "--config.optim.batch_size=8", "--config.optim.eval_batch_size=8",
          f"--config.loop.num_steps={STEPS}", "--config.loop.eval_every=4",
          "--config.loop.checkpoint_every=2", "--config.loop.log_every=2"]


def results(workdir):
  out = json.loads((workdir / "results.json").read_text())
  return {k: v for k, v in out.items() if k not in TIMING}


def test_two_hosts_killed_and_resumed_train_as_one(tmp_path):
  train = write_jsonl(tmp_path / "train.jsonl", reviews(80, 0))
  test = write_jsonl(tmp_path / "test.jsonl", reviews(16, 1))
  one = tmp_path / "one_host"
  out = subprocess.run(transfer_cmd(one, train, test), cwd=REPO,
                       env=environment(2 * HOST_DEVICES), capture_output=True, text=True,
                       timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]

  # SIGKILL one process after a random checkpoint; its partner is then killed too.
  killed, logs = tmp_path / "killed", [tmp_path / f"killed{i}.log" for i in range(2)]
  kill_hosts_after_a_checkpoint(transfer_cmd(killed, train, test), logs, killed / "checkpoints",
                                STEPS - 2, "test_downstream_two_hosts_sigkill")
  wait_ok(start_hosts(transfer_cmd(killed, train, test), logs), logs)
  assert 2 <= resumed_step(logs) < STEPS
  assert (f"process 1 of 2, {HOST_DEVICES} local / {2 * HOST_DEVICES} global devices"
          in logs[1].read_text())
  a, b = results(one), results(killed)
  np.testing.assert_allclose([c["train_loss"] for c in a["curves"]],
                             [c["train_loss"] for c in b["curves"]], rtol=1e-5)
  assert [c["validation_accuracy"] for c in a["curves"]] == [
      c["validation_accuracy"] for c in b["curves"]]
  assert (a["test"], a["best_step"]) == (b["test"], b["best_step"])
  assert_states_close(saved_state(str(one), "checkpoints", STEPS),
                      saved_state(str(killed), "checkpoints", STEPS), ("params",))
  assert_states_close(*(saved_state(str(d), "best", a["best_step"]) for d in (one, killed)),
                      ("params",), exact=())
