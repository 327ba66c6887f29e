"""A user's mistake at an entry point is one line on stderr naming the problem
and the fix, with exit status 1 and no traceback (`--debug` shows one)."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, xla_flags_with_devices

PRETRAIN = ["-m", "experiments.pretrain"]
WIKI_TINY = "--config=experiments/configs/wiki_cpu.py:tiny"


def run(args, timeout=300, env=None):
  """The entry point's process, CPU tuning off unless `env` asks for it."""
  base = {k: v for k, v in os.environ.items() if k not in ("GLOMO_JAX_CPU_TUNING",
                                                           "GLIBC_TUNABLES")}
  return subprocess.run([sys.executable] + args, cwd=REPO, capture_output=True, text=True,
                        timeout=timeout, env={**base, **(env or {})})


def assert_one_line(out, *fragments):
  """Exit status 1, no traceback, one 'error:' line holding every fragment."""
  errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
  assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-3000:]
  assert len(errors) == 1, out.stderr[-3000:]
  for fragment in fragments:
    assert fragment in errors[0], errors[0]


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
  root = tmp_path_factory.mktemp("corpora")
  (root / "random.bin").write_bytes(os.urandom(20_000))
  (root / "blank.txt").write_text("   \n\n  \n")
  (root / "short.txt").write_text("A short text. It has a few sentences, no more.\n" * 20)
  return root


@pytest.mark.parametrize("name, flags, fragments", [
    ("empty", ["--config.corpus.pattern={root}/blank.txt"], ["empty corpus", "blank.txt"]),
    ("not text", ["--config.corpus.pattern={root}/random.bin"],
     ["does not look like text", "random.bin", "use UTF-8 text"]),
    ("vocabulary", ["--config.corpus.pattern={root}/short.txt", "--config.vocab_size=5000"],
     ["vocab_size 5000 is too large", "lower vocab_size"]),
    ("no pattern", [], ["needs a file pattern", "--config.corpus.pattern"]),
    ("typo", ["--config.loop.num_stepz=3"], ["unknown config field 'num_stepz'", "num_steps"]),
])
def test_pretraining_corpus_and_config_mistakes(corpora, tmp_path, name, flags, fragments):
  del name
  out = run(PRETRAIN + [WIKI_TINY, f"--workdir={tmp_path / 'run'}"]
            + [f.format(root=corpora) for f in flags])
  assert_one_line(out, *fragments)
  assert not os.path.exists(tmp_path / "run" / "checkpoints")


def test_a_batch_that_does_not_split_over_the_devices(corpora, tmp_path):
  out = run(PRETRAIN + [WIKI_TINY, f"--workdir={tmp_path / 'run'}",
                        f"--config.corpus.pattern={corpora}/short.txt", "--config.vocab_size=24",
                        "--config.batch_size=4", "--config.heldout_fraction=0"],
            env={"XLA_FLAGS": xla_flags_with_devices(8)})
  assert_one_line(out, "a batch of 4 rows cannot be split over the 8 devices", "multiples of 8")


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
  """A one-step pretraining workdir with a checkpoint (no export), run with
  the CPU tuning asked for: the run says it is on, with glibc's settings."""
  workdir = tmp_path_factory.mktemp("pretrained") / "run"
  out = run(PRETRAIN + ["--config=experiments/configs/demo.py:tiny", f"--workdir={workdir}",
                        "--config.loop.num_steps=1", "--config.export=False",
                        "--compilation_cache_dir="], env={"GLOMO_JAX_CPU_TUNING": "1"})
  assert out.returncode == 0, out.stderr[-3000:]
  assert "CPU tuning on (glibc heap settings in place)" in out.stderr
  return workdir


def corrupt_checkpoints(workdir):
  for root, _, files in os.walk(os.path.join(workdir, "checkpoints")):
    for name in files:
      with open(os.path.join(root, name), "wb") as f:
        f.write(b"\x00garbage")


def test_checkpoint_mistakes(pretrained, tmp_path):
  exported = tmp_path / "exported"               # a relative --workdir works (orbax
  out = run(["-m", "experiments.export", f"--workdir={os.path.relpath(pretrained, REPO)}",
             f"--out={exported}"])              # wants absolute paths)
  assert out.returncode == 0 and (exported / "glomo_export.json").is_file(), out.stderr[-2000:]
  out = run(["-m", "experiments.export", f"--workdir={tmp_path / 'nowhere'}"])
  assert_one_line(out, "is not a pretraining workdir", "--workdir")
  workdir = tmp_path / "corrupt"
  shutil.copytree(pretrained, workdir)
  corrupt_checkpoints(workdir)
  out = run(["-m", "experiments.export", f"--workdir={workdir}"])
  assert_one_line(out, "checkpoint at step 1", "cannot be read")
  out = run(PRETRAIN + ["--config=experiments/configs/demo.py:tiny", f"--workdir={workdir}",
                        "--config.loop.num_steps=2", "--config.export=False",
                        "--compilation_cache_dir="])
  assert_one_line(out, "none could be restored", "new --workdir")
  out = run(["-m", "experiments.export", f"--workdir={workdir}", "--debug"])
  assert out.returncode != 0 and "Traceback" in out.stderr       # --debug: the traceback


def test_export_mistakes(tiny_export, tmp_path):
  config = ["--config=experiments/configs/agreement.py:tiny", f"--workdir={tmp_path / 'run'}",
            "--config.variant=embeddings"]
  out = run(["-m", "experiments.classify"] + config
            + [f"--config.predictor_export={tmp_path / 'missing'}"])
  assert_one_line(out, "no graph predictor export at", "missing")
  broken = tmp_path / "broken"
  shutil.copytree(tiny_export, broken)
  with open(broken / "params.msgpack", "r+b") as f:
    f.seek(100)
    f.write(b"\xff\xfe")
  out = run(["-m", "experiments.classify"] + config + [f"--config.predictor_export={broken}"])
  assert_one_line(out, "corrupt export", "sha256")
  typo = ["--config=experiments/configs/mnli.py:tiny", f"--workdir={tmp_path / 'typo'}",
          "--config.loop.num_stepz=3"]
  out = run(["-m", "experiments.classify"] + typo)
  assert_one_line(out, "unknown config field 'num_stepz'", "num_steps")
  assert not os.path.exists(tmp_path / "typo")                   # before any work
  out = run(["-m", "experiments.plot_graphs", f"--export={tmp_path / 'missing'}", "--text=a b"])
  assert_one_line(out, "no graph predictor export at")
  out = run(["-m", "experiments.demo", f"--workdir={tmp_path / 'demo'}",
             "--config=experiments/configs/wiki_cpu.py:tiny"])
  assert_one_line(out, "the demo reads the built-in synthetic corpus", "experiments.pretrain")


def test_squad_mistakes(tmp_path):
  squad = ["-m", "experiments.squad", "--config=experiments/configs/squad.py:tiny",
           f"--workdir={tmp_path / 'run'}"]
  out = run(squad)
  assert_one_line(out, "needs --config.files.train=PATH")
  (tmp_path / "not_squad.json").write_text('[{"question": "?"}]')
  out = run(squad + [f"--config.files.train={tmp_path / 'not_squad.json'}"])
  assert_one_line(out, "not the SQuAD JSON layout", "not_squad.json")
  out = run(["-m", "experiments.squad_answer", f"--workdir={tmp_path}", "--passage=A b.",
             "--question=What?"])
  assert_one_line(out, "is not a SQuAD run", "experiments.squad")


def cut_copy(source, size, target, fallback):
  """The first `size` bytes of `source` (a shared file; `fallback()`'s bytes,
  compressed alike, where the shared data is absent) written to `target`."""
  if os.path.exists(source):
    with open(source, "rb") as f:
      data = f.read(size)
  else:
    data = fallback()[:size]
  target.write_bytes(data)
  return target


def test_downloads_cut_short_are_one_line(tmp_path):
  """The two accidents of issue 47: the first 3,000 bytes of a shared .xz
  corpus, the first 2,000 of a .gz SQuAD file."""
  import gzip  # noqa: PLC0415
  import json  # noqa: PLC0415
  import lzma  # noqa: PLC0415
  from conftest import SHARED_DATA  # noqa: PLC0415
  from test_squad_parts import squad_articles  # noqa: PLC0415
  corpus = cut_copy(
      os.path.join(SHARED_DATA, "wiki_text", "enwiki2015_wikiextractor_part1.jsonl.xz"), 3000,
      tmp_path / "part1_cut_short.jsonl.xz",
      lambda: lzma.compress(b"".join(json.dumps({"text": f"Article {i}. " * 200}).encode()
                                     + b"\n" for i in range(50))))
  out = run(PRETRAIN + [WIKI_TINY, f"--config.corpus.pattern={corpus}",
                        f"--workdir={tmp_path / 'cut'}"])
  assert_one_line(out, "part1_cut_short.jsonl.xz", "cut short", "fetch it again")
  squad = cut_copy(
      os.path.join(SHARED_DATA, "squad_v1.1", "squad_dev_v1.1_part1_reconstructed.json.gz"),
      2000, tmp_path / "dev_cut_short.json.gz",
      lambda: gzip.compress(json.dumps({"data": squad_articles() * 20}).encode()))
  out = run(["-m", "experiments.squad", "--config=experiments/configs/squad.py:tiny",
             f"--config.files.train={squad}", f"--workdir={tmp_path / 'cut2'}"])
  assert_one_line(out, "dev_cut_short.json.gz", "cut short")
  for workdir in (tmp_path / "cut", tmp_path / "cut2"):   # nothing written before the error
    assert not (workdir.exists() and os.listdir(workdir))
  config = tmp_path / "cut_config.py"              # a config file cut short
  with open(os.path.join(REPO, "experiments", "configs", "wiki_cpu.py"), "rb") as f:
    config.write_bytes(f.read()[:700])
  out = run(PRETRAIN + [f"--config={config}:tiny", f"--workdir={tmp_path / 'cut3'}"])
  assert_one_line(out, "in the command-line flags")
