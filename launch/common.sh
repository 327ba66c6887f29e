# Shared by the launch scripts: option parsing, --dry-run, config and entry names.
# shellcheck shell=bash

DRY_RUN=0
ENTRY=""
REST=()
LAUNCH_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

die() { echo "error: $*" >&2; exit 2; }

# One shell word: as it is when it needs no quoting, else in single quotes.
quote() {
  if [[ "$1" =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
    printf '%s' "$1"
  else
    printf "'%s'" "${1//\'/\'\\\'\'}"
  fi
}

# The arguments as one command line.
command_line() {
  local out="" a
  for a in "$@"; do out+="$(quote "$a") "; done
  printf '%s' "${out% }"
}

# Runs a command, or prints it on one line under --dry-run.
run() {
  if [ "$DRY_RUN" = 1 ]; then
    command_line "$@"; echo
  else
    "$@"
  fi
}

# Reads --dry-run, --entry=NAME and any --NAME=VALUE named in LAUNCH_OPTIONS
# (stored in the upper-case variable NAME); the other arguments land in REST.
parse_common_args() {
  REST=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --dry-run) DRY_RUN=1 ;;
      --entry=*) ENTRY=${1#--entry=} ;;
      --*=*)
        local name=${1%%=*}; name=${name#--}
        if [[ " ${LAUNCH_OPTIONS:-} " == *" $name "* ]]; then
          printf -v "${name^^}" '%s' "${1#*=}"
        else
          REST+=("$1")
        fi ;;
      *) REST+=("$1") ;;
    esac
    shift
  done
}

# Entry points: the experiments/*.py files that end in cli.run(main) or
# entry.run_kind(...) (the run kinds, which take --distributed).
entry_points() {
  grep -lE "^  (cli\.run\(main\)|entry\.run_kind\()" "$LAUNCH_ROOT"/experiments/*.py |
    xargs -n1 basename | sed 's/\.py$//'
}

# Whether entry point $1 is a run kind of experiments/entry.py (it trains on
# the loop and takes --distributed, so it runs on every host of a job).
is_run_kind() {
  grep -q "^  entry\.run_kind(" "$LAUNCH_ROOT/experiments/$1.py"
}

# The run kinds: the entry points that call entry.run_kind (experiments/kinds.py).
run_kinds() {
  grep -l "^  entry\.run_kind(" "$LAUNCH_ROOT"/experiments/*.py | xargs -n1 basename |
    sed 's/\.py$//'
}

# Sets CONFIG_FLAG and ENTRY from a config spec: 'wiki_cpu' ->
# --config=experiments/configs/wiki_cpu.py and experiments.pretrain;
# 'cifar:cpu' -> --config=experiments/configs/cifar.py:cpu and experiments.cifar.
# The entry is the run kind the config file states (RUN_KIND = "..."); an
# unknown or missing one is an error. --entry=NAME overrides the entry point.
resolve_config() {
  local spec=${1:-}
  [ -n "$spec" ] || die "a config name is needed first, e.g. wiki_cpu or cifar:cpu"
  local name=${spec%%:*} preset=""
  [[ "$spec" == *:* ]] && preset=":${spec#*:}"
  [ -f "$LAUNCH_ROOT/experiments/configs/$name.py" ] || die "no config" \
    "experiments/configs/$name.py (configs: $(cd "$LAUNCH_ROOT/experiments/configs" &&
    ls ./*.py | sed -e 's|^\./||' -e 's/\.py$//' | grep -v -e '^_' -e '^common$' | tr '\n' ' '))"
  CONFIG_FLAG="--config=experiments/configs/$name.py$preset"
  if [ -z "$ENTRY" ]; then
    local file="$LAUNCH_ROOT/experiments/configs/$name.py"
    ENTRY=$(sed -n 's/^RUN_KIND = "\([A-Za-z0-9_]*\)".*/\1/p' "$file" | head -n 1)
    [ -n "$ENTRY" ] || die "experiments/configs/$name.py states no RUN_KIND (the run kind" \
      "it is for, e.g. RUN_KIND = \"pretrain\"; pass --entry=NAME for another entry point)"
    run_kinds | grep -qx "$ENTRY" || die "experiments/configs/$name.py states RUN_KIND =" \
      "\"$ENTRY\", no run kind (run kinds: $(run_kinds | tr '\n' ' '))"
  fi
  entry_points | grep -qx "$ENTRY" || die "no entry point experiments/$ENTRY.py" \
    "(--entry= takes one of: $(entry_points | tr '\n' ' '))"
}
