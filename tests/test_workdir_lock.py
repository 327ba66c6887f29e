"""One run per workdir: a second run on a workdir whose run is alive is one
line and exit status 1; the lock of a killed run is taken over; nested
holds in one process hold it once."""
import fcntl
import os
import signal
import subprocess
import sys

import pytest

from conftest import REPO
from glomo_jax.errors import InputError
from glomo_jax.train import WorkdirInUseError, hold_workdir
from glomo_jax.train.workdir import LOCK_FILENAME


def pretrain(workdir, steps):
  return [sys.executable, "-m", "experiments.pretrain",
          "--config=experiments/configs/demo.py:tiny", f"--workdir={workdir}",
          f"--config.loop.num_steps={steps}", "--config.loop.checkpoint_every=100000",
          "--config.loop.eval_every=100000", "--config.loop.log_every=1", "--config.export=False"]


def locked_elsewhere(workdir) -> bool:
  """Whether another process holds `workdir`'s lock (tried without waiting)."""
  with open(os.path.join(workdir, LOCK_FILENAME), "rb") as f:
    try:
      fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      return True
    fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    return False


def test_a_second_run_is_refused_and_a_killed_runs_lock_is_taken_over(tmp_path):
  workdir = tmp_path / "run"
  env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES",
                                                          "GLOMO_JAX_CPU_TUNING")}
  first = subprocess.Popen(pretrain(workdir, 100000), cwd=REPO, env=env, text=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  try:
    for line in first.stderr:                # the first run is training: it holds the lock
      if "training steps" in line:
        break
    assert first.poll() is None and locked_elsewhere(workdir)
    second = subprocess.run(pretrain(workdir, 2), cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=300)
    errors = [line for line in second.stderr.splitlines() if line.startswith("error:")]
    assert second.returncode == 1 and "Traceback" not in second.stderr, second.stderr[-3000:]
    assert len(errors) == 1 and "another run is using this workdir" in errors[0], errors
    assert f"pid {first.pid}" in errors[0] and str(workdir) in errors[0]
    assert first.poll() is None                                  # the first run goes on
  finally:
    first.send_signal(signal.SIGKILL)
    first.wait()
  assert not locked_elsewhere(workdir)       # the OS dropped the killed run's lock
  with hold_workdir(str(workdir)):           # and the next run takes it over
    with open(workdir / LOCK_FILENAME) as f:
      assert f.read().startswith(f"pid {os.getpid()} ")


def test_nested_holds_in_one_process_and_the_error(tmp_path):
  workdir = str(tmp_path / "w")
  with hold_workdir(workdir):
    with hold_workdir(workdir):               # a run function around the loop: no
      assert locked_elsewhere(workdir)        # second flock (it would fail on a new file)
    with open(os.path.join(workdir, LOCK_FILENAME)) as f:
      assert f"pid {os.getpid()}" in f.read()
    # another process cannot take it
    code = ("import sys; from glomo_jax.train import hold_workdir\n"
            "try:\n  hold_workdir(sys.argv[1]).__enter__()\n"
            "except Exception as e:\n  print(type(e).__name__, e); sys.exit(1)\n")
    out = subprocess.run([sys.executable, "-c", code, workdir], capture_output=True,
                         text=True, timeout=300, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": REPO})
    assert out.returncode == 1 and out.stdout.startswith("WorkdirInUseError"), out.stderr
    assert f"pid {os.getpid()}" in out.stdout and "\n" not in out.stdout.strip()
  with hold_workdir(workdir):                 # released at the end of the block
    pass
  assert issubclass(WorkdirInUseError, InputError)
  with pytest.raises(ZeroDivisionError):      # released when the run raises, too
    with hold_workdir(workdir):
      1 / 0
  with hold_workdir(workdir):
    pass
