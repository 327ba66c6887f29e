#!/usr/bin/env bash
# glomo_jax against the PyTorch peer on one CUDA GPU, the peer's model on the
# same GPU (benchmarks/peer_on_device.py), in stages:
#
#   benchmarks/gpu_run.sh PEER OUTDIR STAGE...
#
#   env          nvidia-smi, python, jax/jaxlib/flax/optax/torch versions, devices
#   equivalence  benchmarks/torch_equivalence.py: glomo_jax on the GPU (float64
#                and float32, matmuls at 'highest') against the peer on the CPU
#   small        config small: float32 (both 'highest') and bfloat16 (glomo_jax's
#                mixed precision against the peer's bfloat16 model), 2 rounds each
#   paper        config paper (bsz 32, bptt 200, V 100000), the same two
#   tf32         config small and paper, float32 with TensorFloat-32 on both sides
#   positions    every position against the sampled 20, paired (small and paper)
#   xlaflags     glomo_jax alone at small, float32, under each XLA_FLAGS setting in
#                FLAG_SETS (compile time and step time); the stages after it run
#                under the setting that compiles fastest without a step more
#                than 10% slower than the best step
#   small_bf16   the bfloat16 half of stage small
#   chunks       config paper, float32, with the tied softmax in chunks of 1920
#                and 3840 rows instead of 512 (CHUNK_SIZES): whether longer
#                GEMMs speed up the gradient GEMM dlogits · E (K = 100000)
#   profile      benchmarks/profile_step.py at paper, float32 and bfloat16: where
#                the GPU time goes, by kernel kind and by Flax module
#
# The fused Pallas kernels (ModelConfig.kernels; KERNELS, default fused, is
# the variant measured against the reference ops; every timed glomo_jax step
# below fetches its loss after every 10th step only, as the training loop):
#   kernels      benchmarks/kernel_speed.py, bfloat16: the fused tied softmax
#                (four block settings) and the fused graph mixing (every row,
#                20 rows) each against its reference op at the paper's shapes,
#                with the outputs' largest difference on this device
#   fused32      config paper, bfloat16, B 32: the KERNELS step and the
#                reference step paired in one process, then the peer
#                (--kernel_ratio): step, TFLOP/s and share of the same-run
#                matmul peak, XLA memory, tokens/s against the peer
#   maxbatch     the same without the peer at the largest batch that fits
#                (benchmarks/pick_batch.py from fused32's memory; halved once
#                if that fails)
#   cmdbuf       config paper, bfloat16, KERNELS: XLA command buffers as XLA
#                sets them, off, and for every kind of command (tuning.py's
#                GPU_COMMAND_BUFFERS_*), alternating processes
#   pipeline     experiments.accelerator_pipeline's pretraining stage for
#                PIPELINE_MINUTES (default 4) with each of PIPELINE_KERNELS
#                (default "fused"; a kernel set with the fused graph kernel
#                trains the authors' graphs, which it computes: no distance
#                prior), data in PIPELINE_DATA (default .gpu/data),
#                the tokenizer PIPELINE_TOKENIZER (default .gpu/tokenizer.model);
#                needs ml_collections and tensorboardX (setup.cfg)
#
# ROUNDS (default 2) sets the rounds of the timed stages. DEADLINE_S: a stage
# is not started once that many seconds have passed since the script began
# (a time budget: e.g. a limit on how long one command may run), so what ran
# before is reported.
#
# PYTHON (default python3) must have jax with CUDA and torch with CUDA. Results
# (JSON lines and markdown) go to OUTDIR/results, the log to OUTDIR/log.txt.
# JAX's persistent compilation cache (JAX_COMPILATION_CACHE_DIR) lets the
# second round of a config load the first round's executable.
set -u
PEER=$1
OUTDIR=$2
shift 2
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-/tmp/glomo_jax_compile_cache}
mkdir -p "$OUTDIR/results"
exec > >(tee -a "$OUTDIR/log.txt") 2>&1

BENCH=("$PY" benchmarks/pretrain_step.py --peer "$PEER" --peer_python "$PY"
       --peer_device cuda --results_dir "$OUTDIR/results" --peak_sizes 4096,8192
       --peak_inner 10 --timeout 300)
SMALL=(--config small --steps 40 --warmup 10 --rounds "${ROUNDS:-2}")
PAPER=(--config paper --steps 20 --warmup 5 --rounds "${ROUNDS:-2}")
FLAG_SETS=("--xla_gpu_enable_triton_gemm=false" "--xla_gpu_autotune_level=0")
KERNELS=${KERNELS:-fused}
JAX_BENCH=("$PY" benchmarks/pretrain_step.py --peak_sizes 4096,8192 --peak_inner 10
           --timeout 400)
FUSED=(--config paper --dtype bfloat16 --kernels "$KERNELS" --sync_every 10 --steps 20
       --warmup 4 --rounds 1 --timeout 450)
tuning_flags() {  # a constant of glomo_jax/tuning.py (which imports no JAX)
  "$PY" -c "import sys; sys.path.insert(0, 'glomo_jax'); import tuning; print(tuning.$1)"
}

authors_graphs_for() {  # the flags a kernels value needs: the fused graph kernel has no distance prior
  case "$1" in fused|fused_graph)
    echo "--config.model.distance_prior=0 --config.model.distance_prior_init=0" ;; esac
}

START_S=$SECONDS
for stage in "$@"; do
  if [ -n "${DEADLINE_S:-}" ] && [ $((SECONDS - START_S)) -ge "$DEADLINE_S" ]; then
    echo "=== stage $stage skipped: ${DEADLINE_S} s deadline passed ($(date -u +%H:%M:%S))"
    continue
  fi
  echo "=== stage $stage ($(date -u +%H:%M:%S))"
  case $stage in
    env)
      nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
      "$PY" - <<'EOF'
import platform, jax, jaxlib, flax, optax, torch
print("python", platform.python_version(), "| jax", jax.__version__, "jaxlib",
      jaxlib.__version__, "flax", flax.__version__, "optax", optax.__version__,
      "| torch", torch.__version__, "cuda", torch.version.cuda)
print("jax devices", jax.devices(), "| torch", torch.cuda.get_device_name(0))
EOF
      ;;
    equivalence)
      JAX_DEFAULT_MATMUL_PRECISION=highest "$PY" benchmarks/torch_equivalence.py \
          --peer "$PEER" --threads 4
      ;;
    small)
      "${BENCH[@]}" "${SMALL[@]}" --float32_matmul highest
      "${BENCH[@]}" "${SMALL[@]}" --dtype bfloat16
      ;;
    paper)
      "${BENCH[@]}" "${PAPER[@]}" --float32_matmul highest
      "${BENCH[@]}" "${PAPER[@]}" --dtype bfloat16
      ;;
    tf32)
      "${BENCH[@]}" "${SMALL[@]}" --float32_matmul tf32
      "${BENCH[@]}" "${PAPER[@]}" --float32_matmul tf32
      ;;
    positions)
      "${BENCH[@]}" --config small --every_position_ratio --rounds 1 --steps 20 \
          --warmup 5 --float32_matmul highest
      "${BENCH[@]}" --config paper --every_position_ratio --rounds 1 --steps 10 \
          --warmup 3 --float32_matmul highest
      ;;
    xlaflags)
      for i in "${!FLAG_SETS[@]}"; do
        XLA_FLAGS="${FLAG_SETS[$i]}" "$PY" benchmarks/pretrain_step.py --config small \
            --steps 20 --warmup 5 --rounds 1 --float32_matmul highest --peak_sizes "" \
            --timeout 200 --results_dir "$OUTDIR/results/xlaflags$i"
      done
      XLA_FLAGS=$("$PY" benchmarks/pick_xla_flags.py "$OUTDIR/results" "${FLAG_SETS[@]}")
      export XLA_FLAGS
      echo "chosen XLA_FLAGS='$XLA_FLAGS'"
      ;;
    profile)
      "$PY" benchmarks/profile_step.py --config paper --steps 5 --warmup 5 \
          --float32_matmul highest --depth 3
      "$PY" benchmarks/profile_step.py --config paper --steps 5 --warmup 5 \
          --dtype bfloat16 --depth 3
      ;;
    small_bf16)
      "${BENCH[@]}" "${SMALL[@]}" --dtype bfloat16
      ;;
    chunks)
      for rows in ${CHUNK_SIZES:-1920 3840}; do
        "${BENCH[@]}" "${PAPER[@]}" --float32_matmul highest --loss_chunk_size "$rows"
      done
      ;;
    kernels)
      "$PY" benchmarks/kernel_speed.py --dtype bfloat16 --results_dir "$OUTDIR/results"
      ;;
    fused32)
      "${BENCH[@]}" "${FUSED[@]}" --kernel_ratio --results_dir "$OUTDIR/results/fused32"
      ;;
    maxbatch)
      bsz=$("$PY" benchmarks/pick_batch.py "$OUTDIR/results/fused32")
      echo "largest batch expected to fit: ${bsz:-none}"
      for b in $bsz $((${bsz:-0} / 2)); do
        [ "$b" -gt 0 ] || break
        "${JAX_BENCH[@]}" "${FUSED[@]}" --kernel_ratio --bsz "$b" \
            --results_dir "$OUTDIR/results/maxbatch$b"
        grep -q '"paired_ratio_median"' "$OUTDIR/results/maxbatch$b/pretrain_step.jsonl" && break
      done
      ;;
    cmdbuf)
      "${JAX_BENCH[@]}" "${FUSED[@]}" --peak_sizes "" --results_dir "$OUTDIR/results/cmdbuf" \
          --xla_flag_sets "|$(tuning_flags GPU_COMMAND_BUFFERS_OFF_XLA_FLAGS)|$(tuning_flags \
          GPU_COMMAND_BUFFERS_ALL_XLA_FLAGS)"
      ;;
    pipeline)
      for k in ${PIPELINE_KERNELS:-fused}; do
        work=${PIPELINE_WORKDIR:-/tmp/glomo_pipeline}/$k
        mkdir -p "$work"
        cp -n "${PIPELINE_TOKENIZER:-.gpu/tokenizer.model}" "$work/"
        minutes=${PIPELINE_MINUTES:-4}
        "$PY" -m experiments.accelerator_pipeline --data="${PIPELINE_DATA:-.gpu/data}" \
            --workdir="$work" --out="$OUTDIR/pipeline_$k" --stages=pretrain \
            --pretrain_minutes="$minutes" --budget_minutes="$("$PY" -c "print($minutes + 1.5)")" \
            --pretrain_flags="--config.model.kernels=$k $(authors_graphs_for "$k")"
        cp -r "$work/pretrain/tensorboard" "$OUTDIR/pipeline_$k/" 2>/dev/null
      done
      ;;
    *)
      echo "unknown stage $stage" >&2
      exit 2
      ;;
  esac
done
echo "=== done ($(date -u +%H:%M:%S))"
