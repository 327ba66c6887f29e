#!/usr/bin/env bash
# Pretrain on a Cloud TPU VM slice (every worker runs this; multi-host start
# through jax.distributed, the coordinator found by JAX on TPU):
#   gcloud compute tpus tpu-vm ssh NAME --zone ZONE --worker=all \
#     --command "cd glomo_jax && bash launch/tpu_vm.sh paper /mnt/runs/paper"
set -euo pipefail
CONFIG=${1:?config name, e.g. paper}
WORKDIR=${2:?workdir on a local or mounted file system (e.g. a gcsfuse mount)}
shift 2
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[tf]' 'jax[tpu]'
fi
exec .venv/bin/python -m experiments.pretrain --config="experiments/configs/${CONFIG}.py" \
  --workdir="$WORKDIR" --distributed "$@"
