r"""Where finished picking runs read on longer sequences: for each run and
question k, the accuracy and, span by span, the gate openness and the
attention's mass (`glomo_jax.focused.spans`; docs/focused.md).

  python -m experiments.picking_spans --workdir=runs/picking/fhe_n200_s0 \
      [--workdir=runs/picking/lstm1_n200_s0 ...] [--length=10000] \
      [--k=20,100,180] [--examples=100]

The sequences: the first --examples drawn from each run's stream of
--length-digit test sequences (split n<length>: where --length is one of
the run's test_lengths, the first of the very sequences its results.json
scored), every one asked each k (1 to the trained length). Default k: a
tenth, half and nine tenths of the largest k the run trained on. Prints one
markdown table per run.
"""
from absl import flags

from experiments import cli
from experiments.picking_report import questions, spans_table

_WORKDIRS = flags.DEFINE_multi_string("workdir", None, "A picking run's --workdir (repeat).")
_LENGTH = flags.DEFINE_integer("length", 10_000, "The sequences' length in digits.")
_K = flags.DEFINE_list("k", None, "The questions k (default: module docstring).")
_EXAMPLES = flags.DEFINE_integer("examples", 100, "Sequences read with each k.")
flags.mark_flags_as_required(["workdir"])


def main(argv):
  del argv
  ks = questions(_K.value)
  print("\n\n".join(spans_table(w, _LENGTH.value, ks, _EXAMPLES.value)
                    for w in _WORKDIRS.value))


if __name__ == "__main__":
  cli.run(main)
