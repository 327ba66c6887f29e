"""The benchmark tooling, checked on the CPU (CI has no GPU): the peer's
command line on a device, device-memory columns, the workers' CPU tuning
environment, the XLA_FLAGS, batch and kernels choices of gpu_run.sh, and the trace attribution
of profile_step.py (to instructions, and to parts of a model)."""
import contextlib
import importlib.util
import io
import json
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(REPO, "benchmarks")
sys.path.insert(0, BENCH)

import pick_batch  # noqa: E402
import pick_kernels  # noqa: E402
import pick_xla_flags  # noqa: E402
import pretrain_step  # noqa: E402
import profile_step  # noqa: E402
from stepbench import configs, driver  # noqa: E402


def bench_args(*argv):
  return configs.resolve(pretrain_step.build_parser().parse_args(list(argv)))


def test_peer_on_a_gpu_runs_through_the_device_wrapper_with_the_same_config():
  args = bench_args("--config", "small", "--peer", "peer.py", "--peer_device", "cuda",
                    "--float32_matmul", "tf32", "--dtype", "bfloat16")
  argv = driver.peer_argv(args)
  assert argv[1] == configs.PEER_ON_DEVICE
  flags = dict(zip(argv[2::2], argv[3::2]))
  assert flags["--peer"] == os.path.abspath("peer.py")
  assert flags["--device"] == "cuda" and flags["--tf32"] == "1"
  assert (flags["--bsz"], flags["--bptt"], flags["--sample_len"], flags["--dtype"]) == (
      "16", "100", "20", "bfloat16")
  # float32 everywhere unless tf32 is asked for; on the CPU the peer runs as it is
  highest = driver.peer_argv(bench_args("--peer", "p.py", "--peer_device", "cuda"))
  assert highest[highest.index("--tf32") + 1] == "0"
  cpu = driver.peer_argv(bench_args("--peer", "p.py"))
  assert cpu[1] == os.path.abspath("p.py") and "--device" not in cpu


def test_glomo_jax_workers_get_the_float32_matmul_precision():
  argv = driver.worker_argv(bench_args("--float32_matmul", "highest"), "step")
  assert argv[argv.index("--float32_matmul") + 1] == "highest"
  assert "--float32_matmul" not in driver.worker_argv(bench_args(), "step")


def test_a_baseline_checkout_runs_its_own_step_worker_with_the_same_config():
  argv = driver.baseline_argv(bench_args("--baseline_repo", "/prev", "--bsz", "4",
                                         "--baseline_args", "--malloc_tune 1"))
  assert argv[1] == "/prev/benchmarks/pretrain_step.py" and argv[2:4] == ["--worker", "step"]
  assert argv[argv.index("--bsz") + 1] == "4" and argv[-2:] == ["--malloc_tune", "1"]
  assert argv[argv.index("--config") + 1] == "small"


def test_cpu_tuning_switches_the_workers_environment_on_and_off():
  tuning = driver.tuning()
  parent = {"PATH": "/bin", tuning.ENV_VAR: "1",
            "GLIBC_TUNABLES": "glibc.pthread.rseq=0:" + tuning.MALLOC_TUNABLES}
  on = driver.worker_environment(True, {"PATH": "/bin"})
  assert on[tuning.ENV_VAR] == "1" and tuning.MALLOC_TUNABLES in on["GLIBC_TUNABLES"]
  off = driver.worker_environment(False, parent)
  assert tuning.ENV_VAR not in off and off["GLIBC_TUNABLES"] == "glibc.pthread.rseq=0"
  assert "GLIBC_TUNABLES" not in driver.worker_environment(False, {"PATH": "/bin"})
  argv = driver.worker_argv(bench_args("--cpu_tuning", "0"), "step")
  assert argv[argv.index("--cpu_tuning") + 1] == "0"


def test_pooled_device_peak_is_the_largest_of_either_programs_record():
  glomo = {"step_s": [0.01], "median_step_s": 0.01, "peak_rss_mb": 3000.0,
           "first_step_s": 3.0, "device_memory": {"peak_bytes_in_use": 548.0}}
  peer = {"step_s": [0.03], "median_step_s": 0.03, "peak_rss_mb": 1400.0,
          "first_step_s": 0.7, "device_peak_mb": 721.0}
  assert driver.pooled([glomo, dict(glomo, device_memory={"peak_bytes_in_use": 1593.0})],
                              16, 100)["device_peak_mb"] == 1593.0
  assert driver.pooled([peer], 16, 100)["device_peak_mb"] == 721.0
  cpu = dict(glomo, device_memory=None)
  assert driver.pooled([cpu], 16, 100)["device_peak_mb"] is None


@pytest.mark.parametrize("second_step, chosen", [(0.025, "--a"), (0.0115, "--b")])
def test_xla_flags_choice_is_the_fastest_compile_within_ten_percent_of_the_best_step(
    tmp_path, second_step, chosen):
  for i, (compile_s, step_s) in enumerate([(38.7, 0.011), (26.1, second_step)]):
    os.makedirs(tmp_path / f"xlaflags{i}")
    (tmp_path / f"xlaflags{i}" / "pretrain_step.jsonl").write_text(
        json.dumps({"compile_s": compile_s, "median_step_s": step_s}) + "\n")
  out = io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
    pick_xla_flags.main(str(tmp_path), ["--a", "--b", "--missing"])
  assert out.getvalue().strip() == chosen


def test_kernel_workers_get_the_kernels_and_the_fetch_interval():
  argv = driver.worker_argv(bench_args("--kernels", "fused", "--sync_every", "10"),
                            "kernel_ratio")
  assert argv[argv.index("--kernels") + 1] == "fused"
  assert argv[argv.index("--sync_every") + 1] == "10"
  assert configs.model_config(bench_args("--kernels", "fused_loss")).kernels == "fused_loss"
  assert configs.model_config(bench_args()).kernels == "reference"


def test_largest_batch_from_the_state_and_the_per_row_memory(tmp_path):
  # 1000 MiB of state; 30 + 2 MiB a batch of 32 rows (1 MiB a row) for the
  # larger variant: (0.8 · 80000 − 1000) / 1 = 63000 rows, capped at 1024
  mem = {"reference": {"argument_size_mb": 1000.0, "temp_size_mb": 20.0,
                       "output_size_mb": 1002.0, "alias_size_mb": 1000.0},
         "fused": {"argument_size_mb": 1000.0, "temp_size_mb": 30.0,
                   "output_size_mb": 1002.0, "alias_size_mb": 1000.0}}
  rec = {"job": "kernel_ratio", "bsz": 32, "xla_memory": mem,
         "device_memory": {"bytes_limit": 80000.0}}
  (tmp_path / "pretrain_step.jsonl").write_text(json.dumps({"job": "step"}) + "\n"
                                                + json.dumps(rec) + "\n")
  out = io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
    pick_batch.main(str(tmp_path))
    pick_batch.main(str(tmp_path), 0.8, 32, 100000)
    pick_batch.main(str(tmp_path), 0.0126, 32)     # 1008 MiB: 8 rows, at least one multiple
  assert out.getvalue().split() == ["1024", "62976", "32"]



def _kernel_records(root, step_ratio, loss_ratios, graph_ratio, older=None):
  """gpu_run.sh's records as stages kernels and fused32 write them."""
  os.makedirs(root / "fused32", exist_ok=True)
  rows = [{"impl": "glomo_jax", "job": "kernel_ratio"}]
  if step_ratio is not None:
    rows.append({"impl": "summary", "kernels": "fused", "paired_ratio_median": step_ratio})
  (root / "fused32" / "pretrain_step.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  recs = list(older or []) + [
      {"case": "loss", "paired_ratio_over_reference": loss_ratios,
       "default_program": "fused 64x64"},
      {"case": "graph_all", "paired_ratio_over_reference": {"fused": graph_ratio}},
      {"case": "graph_top", "paired_ratio_over_reference": {"fused": 0.5}}]
  (root / "kernel_speed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
  return str(root)


def test_kernels_choice_is_the_whole_fused_step_or_the_one_faster_kernel(tmp_path):
  choose = lambda *a, **k: pick_kernels.choose(_kernel_records(*a, **k))[0]
  # the whole fused step faster by more than the margin
  assert choose(tmp_path / "a", 0.9, {"fused 64x64": 1.2}, 1.1) == "fused"
  # not the step, but the loss kernel at its default blocks alone
  assert choose(tmp_path / "b", 1.0, {"fused 32x128": 1.5, "fused 64x64": 0.8}, 1.0) == "fused_loss"
  # a faster non-default block setting does not count; the graph kernel alone
  assert choose(tmp_path / "c", 1.18, {"fused 64x64": 1.49, "fused 32x128": 0.5},
                0.9) == "fused_graph"
  # within the margin, or both alone faster while the step is not: the reference
  assert choose(tmp_path / "d", 0.98, {"fused 64x64": 0.98}, 0.99) == "reference"
  assert choose(tmp_path / "e", 1.0, {"fused 64x64": 0.8}, 0.8) == "reference"
  # the last run of each case decides; no records at all: the reference
  assert choose(tmp_path / "f", None, {"fused 64x64": 1.3}, 1.2,
                older=[{"case": "loss", "paired_ratio_over_reference": {"fused 64x64": 0.5}}]
                ) == "reference"
  assert pick_kernels.choose(str(tmp_path / "none"))[0] == "reference"
  # a loss case whose default blocks failed to compile has no timing, even
  # where another block setting ran
  for name, ratios in (("g", {}), ("h", {"fused 32x128": 0.5})):
    kernels, why = pick_kernels.choose(_kernel_records(tmp_path / name, None, ratios, 1.0))
    assert kernels == "reference" and any("no timing" in w for w in why)


HLO = """\
ENTRY %main.1 (p: f32[4,8]) -> f32[4,4] {
  %fusion.3 = f32[4,4]{1,0} fusion(f32[4,8]{1,0} %p), kind=kLoop, calls=%fused_add, metadata={op_name="jit(train_step)/jvp(GLoMo)/decoder_fw.decode_windows/gru/add"}
  %custom-call.2 = f32[4,4]{1,0} custom-call(f32[4,4]{1,0} %fusion.3), custom_call_target="__cublas$gemm", metadata={op_name="jit(train_step)/transpose(jvp(GLoMo))/closed_call/dot_general"}
}
"""


def test_hlo_instructions_give_kind_and_flax_module_path():
  info = profile_step.hlo_instructions(HLO)
  assert set(info) == {"fusion.3", "custom-call.2"}
  assert profile_step.kind_of("fusion.3", info["fusion.3"]) == "fusion kLoop"
  assert profile_step.kind_of("custom-call.2", info["custom-call.2"]) == (
      "custom-call __cublas$gemm")
  assert profile_step.module_path(info["fusion.3"]["op_name"], 3) == (
      "jvp(GLoMo)/decoder_fw.decode_windows/gru")


def test_model_part_is_the_deepest_module_with_parameters_and_the_pass():
  modules = {("transfer",), ("transfer", "mixture_fw"), ("transfer", "mixture_fw", "logits"),
             ("rnn_0",)}
  part = lambda op, depth=2: profile_step.model_part(op, modules, depth)
  assert part("jit(train_step)/jvp(TextClassifier)/transfer/mixture_fw/logits/dot_general") == (
      "transfer/mixture_fw (forward)")
  assert part("jit(train_step)/jvp(TextClassifier)/transfer/mixture_fw/logits/dot_general",
              depth=3) == "transfer/mixture_fw/logits (forward)"
  assert part("jit(train_step)/transpose(jvp(TextClassifier))/transfer/slice") == (
      "transfer (backward)")
  # a name that is not a module with parameters ends the path: ops, Dropout
  assert part("jit(train_step)/jvp(TextClassifier)/rnn_0/while/body/rnn_0/add") == (
      "rnn_0 (forward)")
  assert part("jit(train_step)/jvp(TextClassifier)/Dropout_1/add") == "(top level) (forward)"
  assert part("jit(train_step)/optax/add") == "outside the model"
  assert part("") == "outside the model"


def test_profile_step_attributes_a_cpu_trace_to_the_steps_instructions(capsys):
  profile_step.main(["--config", "small", "--bsz", "2", "--bptt", "12", "--steps", "1",
                     "--warmup", "1", "--top", "5"])
  out = capsys.readouterr().out
  attributed = float(out.split("attributed events ")[1].split(" ms")[0])
  assert attributed > 0
  kinds = out.split("-- by kind\n")[1].split("\n\n")[0].splitlines()
  assert kinds and all(" ms " in row for row in kinds)
  assert "GLoMo" in out.split("-- by op_name")[1]
  threads = out.split("-- XLA:CPU worker threads (")[1]
  counts = dict(item.split(": ") for item in
                threads.split("busy: ")[1].splitlines()[0].split(", "))
  assert sum(float(ms) for ms in counts.values()) > 0


def test_a_task_steps_profile_splits_its_time_by_module_and_pass(tmp_path):
  sys.path.insert(0, REPO)
  from benchmarks.task_timing import TimedTask  # noqa: PLC0415
  from glomo_jax.classification import (ClassificationTask, build_model,  # noqa: PLC0415
                                        load_task_data)
  from glomo_jax.text import embedding_matrix  # noqa: PLC0415
  from test_classification_task import imdb_config  # noqa: PLC0415
  config = imdb_config(tmp_path, variant="uniform")
  data = load_task_data(config)
  vocab = data.build_vocabulary()
  table, _ = embedding_matrix(vocab, None, dim=16, oov_scale=0.5, seed=0)
  timed = TimedTask("uniform", ClassificationTask(build_model(config, data, len(vocab), table),
                                                  data, vocab, config))
  before = int(timed.state.step)
  parts = timed.profile([list(range(8)), list(range(8, 16))], 8)
  assert int(timed.state.step) == before + 3            # a warm step, then the two traced
  assert all(ms >= 0 for ms in parts.values()) and sum(parts.values()) > 0
  assert {"transfer/fusion (forward)", "transfer/fusion (backward)"} <= set(parts)
  assert any(p.startswith("rnn_0") for p in parts)


def test_thread_occupancy_counts_busy_threads_and_what_ran_alone():
  """Two threads, times in ns. Thread 0 runs A [0, 10) and B [10, 14);
  thread 1 runs C [2, 6) and a parallel task of B's [10, 12)."""
  task = profile_step.PARALLEL_TASK
  threads = [[(0, 10, "A"), (10, 14, "B")], [(2, 6, "C"), (10, 12, task)]]
  by_count, alone = profile_step.occupancy(threads)
  assert dict(by_count) == {1: 8, 2: 6}                  # [0,2) [6,10) [12,14) alone
  assert dict(alone) == {"A": 6, "B": 2}
  # a thread busy only with another op's task counts, named as the task
  by_count, alone = profile_step.occupancy([[(0, 4, task)], [(6, 8, "D")]])
  assert dict(by_count) == {1: 6, 0: 2} and dict(alone) == {task: 4, "D": 2}


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (the peer)")
def test_peer_on_device_runs_the_peers_step_on_the_named_device():
  """Needs the PyTorch peer's file in $GLOMO_TORCH_PEER (benchmarks/README.md)."""
  import subprocess
  peer = os.environ.get("GLOMO_TORCH_PEER")
  if not peer:
    pytest.skip("GLOMO_TORCH_PEER (the PyTorch peer's file) is not set")
  if not os.path.isfile(peer):
    pytest.skip(f"GLOMO_TORCH_PEER={peer}: no such file")
  out = subprocess.run(
      [sys.executable, os.path.join(BENCH, "peer_on_device.py"), "--peer", peer,
       "--device", "cpu", "--d", "32", "--ntokens", "50", "--bsz", "2", "--bptt", "12",
       "--steps", "1", "--warmup", "1"], capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  rec = json.loads(out.stdout.strip().splitlines()[-1])
  assert rec["device"] == "cpu" and rec["tf32"] is False
  assert rec["config"]["d"] == 32 and len(rec["step_s"]) == 1
