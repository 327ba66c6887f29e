"""Two processes on 127.0.0.1 (jax.distributed, 4 fake CPU devices each, one
global mesh of 8): a SIGTERM delivered to one process only makes both save
the same step and exit cleanly."""
import os
import re
import signal
import socket
import subprocess
import sys
import time

from conftest import REPO


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_sigterm_on_one_host_saves_the_same_step_on_every_host(tmp_path):
  workdir, port = tmp_path / "run", free_port()
  env = {k: v for k, v in os.environ.items() if k != "GLOMO_JAX_CPU_TUNING"}
  env.update(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4")
  logs = [tmp_path / f"process{i}.log" for i in range(2)]
  procs = []
  for i in range(2):
    cmd = [sys.executable, "-m", "experiments.pretrain",
           "--config=experiments/configs/demo.py:tiny", f"--workdir={workdir}",
           "--config.num_steps=2000", "--config.checkpoint_every=5000",
           "--config.eval_every=5000", "--config.log_every=50", "--config.export=False",
           "--compilation_cache_dir=", "--distributed",
           f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2",
           f"--process_id={i}"]
    with open(logs[i], "w") as log:
      procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log,
                                    stderr=subprocess.STDOUT))
  deadline = time.time() + 300
  while time.time() < deadline and not all(
      re.search(r"step \d+/2000", log.read_text()) for log in logs):
    assert all(p.poll() is None for p in procs), [log.read_text()[-2000:] for log in logs]
    time.sleep(0.2)
  procs[1].send_signal(signal.SIGTERM)                    # one host's notice only
  codes = [p.wait(timeout=300) for p in procs]
  texts = [log.read_text() for log in logs]
  assert codes == [0, 0], [t[-3000:] for t in texts]
  stopped = [re.findall(r"stopped at step (\d+) after SIGTERM", t) for t in texts]
  assert stopped[0] and stopped[0] == stopped[1], stopped
  saved = sorted(int(d) for d in os.listdir(workdir / "checkpoints") if d.isdigit())
  assert saved == [int(stopped[0][0])] and 0 < saved[0] < 2000
