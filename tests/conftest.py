"""Shared fixtures. Tests run on CPU; XLA_FLAGS (set by the Makefile) gives
pytest's processes 8 fake devices for the sharding tests, and the entry points
they start one (unless a test asks for more).

Every test process (pytest's workers and the entry points the tests start,
which inherit the environment) shares one JAX persistent compilation cache,
.pytest_cache/jax_compilation (delete it to start cold): a program that took
0.3 s or more to compile in one test or subprocess, such as the train step
of a resume test's straight run, is loaded by the next (the killed and the
resumed run) instead of compiled again. They also compile with
TEST_XLA_FLAGS (cheap compiles), which subprocesses inherit."""
import gc
import json
import os
import random
import signal
import subprocess
import time
import zlib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# JAX caches the programs whose compile took at least 0.3 s (its default is
# 1 s, which the cheap compiles below rarely reach); caching every program,
# however quick, made the cold suite slower
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                      os.path.join(REPO, ".pytest_cache", "jax_compilation"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.3")
# Tests compile far more than they run, so every program compiles cheaply, as
# the loop's `compile_fast` does (no LLVM optimisation, XLA:CPU's older
# emitters; WORKSPACE.md, "Tests"). A test-suite setting only: the product
# keeps XLA's defaults. (Importing glomo_jax imports JAX, which reads the
# variables above then, and XLA_FLAGS below when it first uses a device.)
from glomo_jax.tuning import FAST_COMPILE_XLA_FLAGS as TEST_XLA_FLAGS  # noqa: E402


def xla_flags_with_devices(devices: int) -> str:
  """XLA_FLAGS for a test's subprocess that needs its own device count."""
  return f"--xla_force_host_platform_device_count={devices} {TEST_XLA_FLAGS}"


# pytest's processes (the first one and the xdist workers it starts, which
# inherit this variable) run with 8 fake devices for the sharding tests; the
# entry points that tests start get one device unless a test gives them more
# (`xla_flags_with_devices`, `hosts.environment`): on 2 cores an 8-device mesh
# only adds partitioned compiles, collectives and sharded checkpoint writes.
_PYTEST_XLA_FLAGS = "GLOMO_JAX_PYTEST_XLA_FLAGS"
if _PYTEST_XLA_FLAGS not in os.environ:
  flags = os.environ.get("XLA_FLAGS", "")
  if "xla_force_host_platform_device_count" not in flags:
    flags += " --xla_force_host_platform_device_count=8"
  if "xla_backend_optimization_level" not in flags:
    flags += " " + TEST_XLA_FLAGS
  os.environ[_PYTEST_XLA_FLAGS] = flags.strip()
os.environ["XLA_FLAGS"] = os.environ[_PYTEST_XLA_FLAGS]

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

jax.devices()   # JAX reads XLA_FLAGS once, when its CPU backend starts
os.environ["XLA_FLAGS"] = xla_flags_with_devices(1)
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# The fuzz tests (tests/fuzzing.py): 'ci' (the default) tries a fixed,
# derandomized set of examples per reader, keeps no example database and
# sets no deadline; 'long' (HYPOTHESIS_PROFILE=long) draws from a random
# seed, which a failure prints, and `fuzzing.examples` multiplies the counts.
_FUZZ = dict(deadline=None, print_blob=True,
             suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                    HealthCheck.function_scoped_fixture,
                                    HealthCheck.large_base_example])
settings.register_profile("ci", derandomize=True, database=None, **_FUZZ)
settings.register_profile("long", derandomize=False, database=None, **_FUZZ)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

from glomo_jax import GLoMo, ModelConfig  # noqa: E402

# Tracing makes many short-lived objects, and a pytest process's heap grows
# with every test's traced and compiled programs, so Python's default
# thresholds run full collections over it again and again: collect the young
# generation every 100,000 allocations instead of 700 (the middle one every
# 50 of those, the oldest every 10 of those), and leave the imported modules
# out of every collection.
gc.freeze()
gc.set_threshold(100_000, 50, 10)


@pytest.fixture
def tiny_config():
  return ModelConfig.tiny()


def init_model(config, batch=2, length=10, seed=0):
  """Returns (model, variables, tokens [batch, length])."""
  model = GLoMo(config)
  tokens = jax.random.randint(jax.random.PRNGKey(seed + 100), (batch, length), 1,
                              config.vocab_size)
  variables = model.init(jax.random.PRNGKey(seed), tokens)
  return model, variables, tokens


def random_variables(config, seed=0, graphs_only=False):
  """Variables of `GLoMo(config)` without compiling its init: the init's tree
  (traced abstractly; with graphs_only, the subset `GLoMo.graphs` uses) filled
  from numpy, BatchNorm variances positive, thresholds lowered by 2 so that
  every layer's graph carries weight."""
  method = GLoMo.graphs if graphs_only else None
  shapes = jax.eval_shape(lambda: GLoMo(config).init(
      jax.random.PRNGKey(0), jnp.ones((1, 6), jnp.int32), method=method))
  rng = np.random.default_rng(seed)

  def fill(path, spec):
    name = jax.tree_util.keystr(path)
    if "'var'" in name:
      return jnp.asarray(rng.uniform(0.5, 1.5, spec.shape), spec.dtype)
    value = 0.3 * rng.standard_normal(spec.shape) - (2.0 if "threshold_bias" in name else 0.0)
    return jnp.asarray(value, spec.dtype)
  return jax.tree_util.tree_map_with_path(fill, dict(shapes))


def write_jsonl(path, records):
  """Writes records as JSON lines; returns the path as a string."""
  with open(path, "w", encoding="utf-8") as f:
    for r in records:
      f.write(json.dumps(r) + "\n")
  return str(path)


SHARED_DATA = os.path.join(os.path.dirname(REPO), "shared", "data")   # ../shared/data
FILLER = "the a movie film plot actor scene story one it was is and of".split()
NLI = [("a man sleeps on the sofa", "a person rests", "entailment"),
       ("the dog runs in the park", "an animal is outside", "entailment"),
       ("two kids play football", "children sleep at home", "contradiction"),
       ("a woman sings a song", "the woman is a famous singer", "neutral"),
       ("the cat sat on the mat", "a cat is sitting", "entailment"),
       ("people dance at night", "nobody is dancing", "contradiction"),
       ("a boy reads a book", "the boy likes reading novels", "neutral"),
       ("the car is red", "the car is blue", "contradiction")]


def reviews(n, seed):
  """Reviews whose label is told by one word ('great' / 'awful') among filler."""
  rng = np.random.default_rng(seed)
  out = []
  for i in range(n):
    label = int(i % 2)
    words = list(rng.choice(FILLER, rng.integers(3, 9)))
    words.insert(int(rng.integers(0, len(words) + 1)), "great" if label else "awful")
    out.append({"text": " ".join(words) + ("<br />" if i % 3 == 0 else ""),
                "label": label, "id": f"r{i}"})
  return out


def nli_records(repeat=1):
  return [{"premise": p, "hypothesis": h, "label": y} for p, h, y in NLI] * repeat


@pytest.fixture(scope="session")
def tiny_export(tmp_path_factory):
  """Path of an exported GLoMo(tiny) graph predictor (L = 2, K = 4) with
  random weights that give every layer's graphs weight, and a 40-piece
  tokenizer trained on the NLI sentences."""
  from glomo_jax.data.tokenizer import train_tokenizer  # noqa: PLC0415
  from glomo_jax.export import export_graph_predictor  # noqa: PLC0415
  root = tmp_path_factory.mktemp("tiny_export")
  config = ModelConfig.tiny()
  sentences = [p for p, _, _ in NLI] + [h for _, h, _ in NLI]
  tokenizer = train_tokenizer(sentences, 40, str(root / "tok") + "/")
  return export_graph_predictor(str(root / "export"), config,
                                random_variables(config, graphs_only=True), tokenizer)


def kill_seed(name: str) -> int:
  """The seed of a test's kill points: $GLOMO_JAX_KILL_SEED if set (to replay
  a failure), else fixed by the test's name."""
  return int(os.environ.get("GLOMO_JAX_KILL_SEED", zlib.crc32(name.encode())))


def wait_for_checkpoint(checkpoints, target: int, procs) -> None:
  """Waits until `checkpoints` holds a step ≥ target or a process ends."""
  deadline = time.time() + 300
  while time.time() < deadline and all(p.poll() is None for p in procs):
    done = ([int(d) for d in os.listdir(checkpoints) if d.isdigit()]
            if os.path.isdir(checkpoints) else [])
    if done and max(done) >= target:
      return
    time.sleep(0.02)


def kill_during_run(cmd, checkpoints, last_target: int, seed: int) -> None:
  """Starts `cmd` (from the repository root) and kills it with SIGKILL once
  its checkpoint directory holds a step at or past a target drawn from
  [2, last_target], after a drawn delay of up to 0.3 s (both from `seed`,
  which a failure names); fails if the run ended first."""
  rng = random.Random(seed)
  target, delay = rng.randint(2, last_target), rng.random() * 0.3
  proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  wait_for_checkpoint(checkpoints, target, [proc])
  time.sleep(delay)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  assert proc.returncode == -signal.SIGKILL, (
      f"the run finished before it could be killed (kill seed {seed}: target step "
      f"{target}, delay {delay:.3f} s; GLOMO_JAX_KILL_SEED={seed} replays it)")


def assert_trees_equal(a, b) -> None:
  """Every leaf of two pytrees bit for bit (the path named on a mismatch)."""
  leaves_a, leaves_b = jax.tree_util.tree_leaves_with_path(a), jax.tree_util.tree_leaves(b)
  assert len(leaves_a) == len(leaves_b)
  for (path, x), y in zip(leaves_a, leaves_b):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y),
                                  err_msg=jax.tree_util.keystr(path))
