"""Several hosts (jax.distributed) simulated by processes on 127.0.0.1, each
with its own fake CPU devices (`HOST_DEVICES`: 2 processes × 2 devices form
a mesh of 4, as many as the one-process run they are compared with; more
fake devices only slow the CPU collectives): the helpers of the multi-host
tests."""
import os
import random
import re
import signal
import socket
import subprocess

import jax
import numpy as np
import orbax.checkpoint as ocp

from conftest import REPO, kill_seed, wait_for_checkpoint, xla_flags_with_devices


HOST_DEVICES = 2


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def environment(devices: int) -> dict:
  """The test's environment for a process of `devices` fake CPU devices."""
  env = {k: v for k, v in os.environ.items() if k != "GLOMO_JAX_CPU_TUNING"}
  env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags_with_devices(devices))
  return env


def start_hosts(cmd, logs, port=None):
  """Starts the entry-point command `cmd` as process i of len(logs)
  (HOST_DEVICES devices each), output to logs[i]."""
  port = port or free_port()
  procs = []
  for i, log in enumerate(logs):
    with open(log, "w") as f:
      procs.append(subprocess.Popen(
          cmd + ["--distributed", f"--coordinator_address=127.0.0.1:{port}",
                 f"--num_processes={len(logs)}", f"--process_id={i}"],
          cwd=REPO, env=environment(HOST_DEVICES), stdout=f, stderr=subprocess.STDOUT))
  return procs


def wait_ok(procs, logs):
  codes = [p.wait(timeout=600) for p in procs]
  assert codes == [0] * len(procs), [log.read_text()[-3000:] for log in logs]


def saved_state(workdir, folder: str, step: int):
  """The state saved at `step` in workdir/folder ('checkpoints', 'best'), on
  this process's first device, whatever mesh and hosts saved it."""
  path = os.path.join(workdir, folder, str(step), "state")
  checkpointer = ocp.StandardCheckpointer()
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  target = jax.tree_util.tree_map(
      lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device),
      checkpointer.metadata(path).item_metadata.tree)
  return checkpointer.restore(path, target)


def kill_hosts_after_a_checkpoint(cmd, logs, checkpoints, last_target: int, name: str):
  """Starts `cmd` on len(logs) hosts and SIGKILLs one of them (then the
  others) once `checkpoints` holds a step drawn from [2, last_target]; the
  step and the victim come from the seed `kill_seed(name)`, printed."""
  seed = kill_seed(name)
  print(f"kill seed {seed} (GLOMO_JAX_KILL_SEED={seed} replays this test's kill point)")
  rng = random.Random(seed)
  target, victim = rng.randint(2, last_target), rng.randrange(len(logs))
  procs = start_hosts(cmd, logs)
  wait_for_checkpoint(checkpoints, target, procs)
  for i in [victim] + [i for i in range(len(procs)) if i != victim]:
    procs[i].send_signal(signal.SIGKILL)
    procs[i].wait()
  assert procs[victim].returncode == -signal.SIGKILL, "the run ended before the kill"


def resumed_step(logs) -> int:
  """The checkpoint step every host's log says it resumed from (the same on
  each; fails if a host did not resume)."""
  steps = [re.findall(r"resumed from the checkpoint at step (\d+)", log.read_text())
           for log in logs]
  assert all(len(s) == 1 for s in steps) and len({s[0] for s in steps}) == 1, steps
  return int(steps[0][0])


def assert_states_close(a, b, parts, exact=("rng", "step", "lr_scale")) -> None:
  """Two saved states: the `parts` (e.g. 'params') to float tolerance (sums
  in another order on another mesh), the `exact` entries bit for bit."""
  for part in parts:
    leaves = jax.tree_util.tree_leaves_with_path(a[part])
    assert len(leaves) == len(jax.tree_util.tree_leaves(b[part])) > 0, part
    for (path, x), y in zip(leaves, jax.tree_util.tree_leaves(b[part])):
      np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-5, atol=2e-6,
                                 err_msg=f"{part}{jax.tree_util.keystr(path)}")
  for name in exact:
    np.testing.assert_array_equal(np.asarray(a[name]), np.asarray(b[name]), err_msg=name)
