#!/usr/bin/env bash
# Runs an entry point on a Cloud TPU VM or pod slice, from your workstation:
# creates the TPU if it does not exist, copies this checkout (git archive of
# HEAD) to every worker, installs, and runs the entry point. The run kinds
# (pretrain, pretrain_images, classify, squad, cifar, picking, lstm_lm: experiments/kinds.py) run
# on every worker of a pod slice, started together through jax.distributed
# (JAX finds the coordinator on TPU); the other entry points are single-host
# and run on worker 0.
#   bash launch/tpu_vm.sh [--dry-run] --name=NAME --zone=ZONE [--type=v5litepod-8] \
#     [--version=v2-alpha-tpuv5-lite] [--project=PROJECT] [--spot=1] \
#     [--entry=NAME] CONFIG WORKDIR [FLAGS...]
# CONFIG is a file of experiments/configs with an optional preset (paper,
# images_pretrain); the entry point follows from it as in gpu_host.sh. WORKDIR
# must be shared by the workers for checkpoints (a gcsfuse mount of a bucket,
# the same path on every worker); FLAGS go to the entry point. --dry-run
# prints the gcloud commands instead of running them.
set -euo pipefail
LAUNCH_OPTIONS="name zone type version project spot"
NAME="" ZONE="" TYPE=v5litepod-8 VERSION=v2-alpha-tpuv5-lite PROJECT="" SPOT=0
source "$(dirname "$0")/common.sh"
parse_common_args "$@"
set -- "${REST[@]}"
[ -n "$NAME" ] || die "--name=NAME (the TPU VM to create or reuse) is needed"
[ -n "$ZONE" ] || die "--zone=ZONE (e.g. us-central1-a) is needed"
resolve_config "${1:-}"
WORKDIR=${2:?"usage: launch/tpu_vm.sh --name=NAME --zone=ZONE [options] CONFIG WORKDIR [FLAGS...]"}
shift 2
cd "$(dirname "$0")/.."

TPU=(gcloud compute tpus tpu-vm)
WHERE=(--zone="$ZONE")
[ -n "$PROJECT" ] && WHERE+=(--project="$PROJECT")
CREATE=("${TPU[@]}" create "$NAME" "${WHERE[@]}" --accelerator-type="$TYPE" --version="$VERSION")
[ "$SPOT" = 1 ] && CREATE+=(--spot)
ARCHIVE=/tmp/glomo_jax-$(git rev-parse --short HEAD 2>/dev/null || echo tree).tar.gz
INSTALL='rm -rf glomo_jax && mkdir glomo_jax && tar -xzf glomo_jax.tar.gz -C glomo_jax && cd glomo_jax'
INSTALL+=" && python3 -m venv .venv && .venv/bin/pip install -q --upgrade pip"
INSTALL+=" && .venv/bin/pip install -q -e '.[tf]' 'jax[tpu]'"
RUN_ON=0 DISTRIBUTED=()
is_run_kind "$ENTRY" && RUN_ON=all DISTRIBUTED=(--distributed)
COMMAND="cd glomo_jax && $(command_line .venv/bin/python -m "experiments.$ENTRY" \
  "$CONFIG_FLAG" --workdir="$WORKDIR" "${DISTRIBUTED[@]}" "$@")"

if [ "$DRY_RUN" = 1 ]; then
  echo "$(command_line "${TPU[@]}" describe "$NAME" "${WHERE[@]}") || $(command_line "${CREATE[@]}")"
elif ! "${TPU[@]}" describe "$NAME" "${WHERE[@]}" >/dev/null 2>&1; then
  "${CREATE[@]}"
fi
run git archive --format=tar.gz -o "$ARCHIVE" HEAD
run "${TPU[@]}" scp "$ARCHIVE" "$NAME:glomo_jax.tar.gz" "${WHERE[@]}" --worker=all
run "${TPU[@]}" ssh "$NAME" "${WHERE[@]}" --worker=all --command="$INSTALL"
run "${TPU[@]}" ssh "$NAME" "${WHERE[@]}" --worker="$RUN_ON" --command="$COMMAND"
